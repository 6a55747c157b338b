"""ESP flow actions (ibv_create_flow_action_esp(3)) on RAW_PACKET QPs: inline crypto as mlx5
offers it, done in software (docs/raw-packet.md, "ESP flow actions"). The cases run in a user +
network namespace of their own (raw_esp_cases.py); nothing leaves it."""
import os
import tempfile
import unittest

import base  # environment first
from test_raw_packet import can_unshare, run_in_namespace


@unittest.skipUnless(can_unshare(), 'needs user namespaces (unshare -rn)')
class EspInNamespaceTest(unittest.TestCase):
    def test_esp_cases(self):
        with tempfile.TemporaryDirectory() as d:
            code, out = run_in_namespace('raw_esp_cases.EspTest',
                                         {'RAW_CASES_LOG_FILE': os.path.join(d, 'softverbs.log')})
        self.assertEqual(code, 0, out)
        self.assertIn('OK', out.splitlines()[-1] if out.strip() else '', out)
