"""RAW_PACKET QPs and flow steering (issue 14).

The data-path cases (raw_cases.py) run in a child inside a user + network namespace of its own
(`unshare -rn`: CAP_NET_RAW there, root or not), which creates its own veth pair; nothing here
sends a frame anywhere else. The refusals that need no namespace run here.
"""
import os
import subprocess
import sys
import tempfile
import unittest

import base  # environment first
import pyverbs.enums as e
from pyverbs.cq import CQ
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QP, QPCap, QPInitAttr, QPInitAttrEx

CHILD_TIMEOUT = 120


def run_in_namespace(target, extra_env=None):
    """Runs unittest `target` (module.Class, or a list of them) in `unshare -rn`; returns (exit
    code, output)."""
    env = dict(os.environ, **(extra_env or {}))
    targets = [target] if isinstance(target, str) else list(target)
    cmd = ['unshare', '-rn', base.PYTHON, '-m', 'unittest', '-v'] + targets
    p = subprocess.run(cmd, cwd=base.HERE, env=env, capture_output=True, text=True, timeout=CHILD_TIMEOUT)
    return p.returncode, p.stdout + p.stderr


def can_unshare():
    try:
        return subprocess.run(['unshare', '-rn', 'true'], timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@unittest.skipUnless(can_unshare(), 'needs user namespaces (unshare -rn)')
class InNamespaceTest(unittest.TestCase):
    def check(self, target):
        code, out = run_in_namespace(target)
        self.assertEqual(code, 0, out)
        self.assertIn('OK', out.splitlines()[-1] if out.strip() else '', out)

    def test_frames(self):
        self.check('raw_cases.FramesTest')

    def test_flows(self):
        self.check('raw_cases.FlowTest')

    def test_flow_refusals(self):
        self.check('raw_cases.FlowRefusalTest')

    def test_create_flags(self):
        self.check('raw_cases.CreateFlagsTest')

    def test_flow_tag_drop_and_spec_sizes(self):
        self.check('raw_cases.CFlowTest')

    def test_rss(self):
        self.check('raw_cases.RssTest')

    def test_tso(self):
        self.check('raw_cases.TsoTest')

    def test_counters_tunnels_self_loopback_and_pacing(self):
        # One child for the four (each child costs a namespace and an interpreter); the library
        # writes its error lines to a file the cases read back.
        with tempfile.TemporaryDirectory() as d:
            code, out = run_in_namespace(['raw_cases.CountersTest', 'raw_cases.InnerRssTest',
                                          'raw_cases.SelfLoopbackTest', 'raw_cases.PacingTest'],
                                         {'RAW_CASES_LOG_FILE': os.path.join(d, 'softverbs.log')})
        self.assertEqual(code, 0, out)
        self.assertIn('OK', out.splitlines()[-1] if out.strip() else '', out)

    def test_close_and_destroy_with_work_left(self):
        self.check(['raw_close_cases.CloseTest', 'raw_close_cases.DestroyTest'])


def child_without_net_raw(code):
    """Runs python `code` with CAP_NET_RAW dropped (root: from the bounding set; others have none)."""
    cmd = [base.PYTHON, '-c', code]
    if os.geteuid() == 0:
        cmd = ['setpriv', '--bounding-set', '-net_raw', '--inh-caps', '-net_raw'] + cmd
    return subprocess.run(cmd, cwd=base.HERE, capture_output=True, text=True, timeout=60)


CREATE_RAW = '''
import base, os
os.environ['SOFTVERBS_LOG'] = 'error'  # base.py clears it; the library reads it at its first line
import pyverbs.enums as e
from pyverbs.cq import CQ
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QP, QPCap, QPInitAttr, QPInitAttrEx
ctx = base.open_context(); pd = PD(ctx); cq = CQ(ctx, 8)
try:
    {create}
    print('CREATED')
except PyverbsRDMAError as x:
    print('ERRNO', x.error_code)
'''


class CapabilityTest(unittest.TestCase):
    """Without CAP_NET_RAW in its network namespace a process gets EPERM and a log line (as the
    kernel's mlx5 raw QPs and IBV_QP_CREATE_SOURCE_QPN)."""

    def test_raw_qp_needs_cap_net_raw(self):
        p = child_without_net_raw(CREATE_RAW.format(
            create="QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RAW_PACKET, scq=cq, rcq=cq, cap=QPCap(4, 4, 1, 1)))"))
        self.assertIn('ERRNO 1', p.stdout, p.stdout + p.stderr)
        self.assertRegex(p.stderr, r'ibv_create_qp\(pd 0x[0-9a-f]+\): .*CAP_NET_RAW')

    def test_source_qpn_needs_cap_net_raw(self):
        p = child_without_net_raw(CREATE_RAW.format(
            create="QP(ctx, QPInitAttrEx(qp_type=e.IBV_QPT_UD, scq=cq, rcq=cq, pd=pd, cap=QPCap(4, 4, 1, 1), "
                   "comp_mask=e.IBV_QP_INIT_ATTR_PD | e.IBV_QP_INIT_ATTR_CREATE_FLAGS, "
                   "create_flags=e.IBV_QP_CREATE_SOURCE_QPN, source_qpn=1))"))
        self.assertIn('ERRNO 1', p.stdout, p.stdout + p.stderr)
        self.assertRegex(p.stderr, r'ibv_create_qp_ex\(pd 0x[0-9a-f]+\): .*SOURCE_QPN needs CAP_NET_RAW')


class RawRefusalTest(unittest.TestCase):
    """Create-time rules that hold whatever the capability."""

    def setUp(self):
        self.ctx = base.open_context()
        self.pd = PD(self.ctx)
        self.cq = CQ(self.ctx, 8)

    def tearDown(self):
        self.ctx.close()

    def create_ex(self, qp_type, flags):
        init = QPInitAttrEx(qp_type=qp_type, scq=self.cq, rcq=self.cq, pd=self.pd, cap=QPCap(4, 4, 1, 1),
                            comp_mask=e.IBV_QP_INIT_ATTR_PD | e.IBV_QP_INIT_ATTR_CREATE_FLAGS, create_flags=flags)
        return QP(self.ctx, init)

    def test_raw_only_create_flags_refused_on_other_types(self):
        for flag in (e.IBV_QP_CREATE_SCATTER_FCS, e.IBV_QP_CREATE_CVLAN_STRIPPING):
            for qpt in (e.IBV_QPT_RC, e.IBV_QPT_UD):
                with self.assertRaises(PyverbsRDMAError) as cm:
                    self.create_ex(qpt, flag)
                self.assertEqual(cm.exception.error_code, 22)

    def test_device_caps_are_honest(self):
        x = self.ctx.query_device_ex()
        self.assertEqual(x.rss_caps.supported_qpts, 1 << e.IBV_QPT_RAW_PACKET)
        self.assertEqual(x.rss_caps.max_rwq_indirection_table_size, 256)
        self.assertEqual(x.rss_caps.rx_hash_function, e.IBV_RX_HASH_FUNC_TOEPLITZ)
        self.assertEqual(x.rss_caps.rx_hash_fields_mask, 0x800001ff)  # addresses, ports, IPSEC_SPI, INNER
        self.assertEqual(x.tso_caps.max_tso, 256 * 1024)
        self.assertEqual(x.tso_caps.supported_qpts, 1 << e.IBV_QPT_RAW_PACKET)
        for cap in (e.IBV_RAW_PACKET_CAP_IP_CSUM, e.IBV_RAW_PACKET_CAP_SCATTER_FCS,
                    e.IBV_RAW_PACKET_CAP_CVLAN_STRIPPING):
            self.assertTrue(x.raw_packet_caps & cap)

    def test_flow_on_rc_qp_is_einval(self):
        from pyverbs.flow import Flow, FlowAttr
        qp = QP(self.pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq, cap=QPCap(4, 4, 1, 1)))
        with self.assertRaises(PyverbsRDMAError) as cm:
            Flow(qp, FlowAttr(num_of_specs=0, flow_type=e.IBV_FLOW_ATTR_SNIFFER, port=1))
        self.assertEqual(cm.exception.error_code, 22)


if __name__ == '__main__':
    unittest.main()
