"""ibv_resolve_eth_l2_from_gid(3) against a neighbour on a veth pair: the cases run in a user +
network namespace of their own (resolve_l2_cases.py); nothing leaves it."""
import os
import tempfile
import unittest

import base  # environment first
from test_raw_packet import can_unshare, run_in_namespace


@unittest.skipUnless(can_unshare(), 'needs user namespaces (unshare -rn)')
class ResolveL2InNamespaceTest(unittest.TestCase):
    def test_resolve_cases(self):
        with tempfile.TemporaryDirectory() as d:
            code, out = run_in_namespace('resolve_l2_cases.ResolveL2Test',
                                         {'RAW_CASES_LOG_FILE': os.path.join(d, 'softverbs.log')})
        self.assertEqual(code, 0, out)
        self.assertIn('OK', out.splitlines()[-1] if out.strip() else '', out)
