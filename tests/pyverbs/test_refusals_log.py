"""Every refusal says why (DESIGN.md section 7): with SOFTVERBS_LOG set, a refused verb writes
exactly one line naming the verb, the object and the rule; without it, nothing is printed."""
import re
import textwrap
import unittest

import base

tearDownModule = base.tear_down_module

PRELUDE = textwrap.dedent('''
    import errno, os, sys
    print('pid', os.getpid())
    import pyverbs.enums as e
    from pyverbs.addr import AHAttr, GlobalRoute
    from pyverbs.cq import CQ
    from pyverbs.device import Context
    from pyverbs.mr import MR
    from pyverbs.pd import PD
    from pyverbs.pyverbs_error import PyverbsRDMAError
    from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
    ctx = Context(name='softverbs0')
    pd = PD(ctx)
    cq = CQ(ctx, 16, None, None, 0)
    def new_qp(qpt=e.IBV_QPT_RC, **cap):
        c = dict(max_send_wr=4, max_recv_wr=4, max_send_sge=1, max_recv_sge=1)
        c.update(cap)
        return QP(pd, QPInitAttr(qp_type=qpt, scq=cq, rcq=cq, cap=QPCap(**c)))
    def refused(fn, *args, **kw):
        try:
            fn(*args, **kw)
        except PyverbsRDMAError as ex:
            print('refused', abs(ex.error_code))
        else:
            print('accepted')
''')

BAD_MODIFY = PRELUDE + textwrap.dedent('''
    peer, qp = new_qp(), new_qp()
    a = QPAttr(qp_state=e.IBV_QPS_INIT)
    a.pkey_index, a.port_num, a.qp_access_flags = 0, 1, e.IBV_ACCESS_LOCAL_WRITE
    qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS)
    a = QPAttr(qp_state=e.IBV_QPS_RTR)
    a.ah_attr = AHAttr(port_num=1, is_global=1,
                       gr=GlobalRoute(dgid=ctx.query_gid(1, 1), sgid_index=1))
    a.path_mtu, a.dest_qp_num, a.rq_psn, a.max_dest_rd_atomic = e.IBV_MTU_1024, peer.qp_num, 0, 1
    print('qp_num', qp.qp_num)
    refused(qp.modify, a, e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN |
            e.IBV_QP_RQ_PSN | e.IBV_QP_MAX_DEST_RD_ATOMIC)
''')

BAD_REG_MR = PRELUDE + textwrap.dedent('''
    refused(MR, pd, 4096, e.IBV_ACCESS_REMOTE_WRITE)
''')

BAD_CREATE_QP = PRELUDE + textwrap.dedent('''
    refused(new_qp, max_send_wr=32769)
''')

BAD_BIND = PRELUDE + textwrap.dedent('''
    import base
    from pyverbs.mr import MW, MWBindInfo
    from pyverbs.wr import SendWR
    a, b = base.connected_pair(ctx, pd, e.IBV_QPT_RC)
    mr = MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE)  # no IBV_ACCESS_MW_BIND
    mw = MW(pd, e.IBV_MW_TYPE_2)
    wr = SendWR(opcode=e.IBV_WR_BIND_MW, wr_id=1, send_flags=e.IBV_SEND_SIGNALED)
    wr.set_bind_wr(mw, MWBindInfo(mr, mr.buf, 64, e.IBV_ACCESS_REMOTE_READ))
    a.post_send(wr)
    print('qp_num', a.qpn, 'status', a.poll()[0].status)
    mw.close()
''')

WIDE_PSN = PRELUDE + textwrap.dedent('''
    qp = new_qp(e.IBV_QPT_UD)
    a = QPAttr(qp_state=e.IBV_QPS_INIT)
    a.pkey_index, a.port_num, a.qkey = 0, 1, 7
    qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_QKEY)
    qp.modify(QPAttr(qp_state=e.IBV_QPS_RTR), e.IBV_QP_STATE)
    a = QPAttr(qp_state=e.IBV_QPS_RTS)
    a.sq_psn = 0x51234567
    qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_SQ_PSN)
    print('qp_num', qp.qp_num, 'sq_psn', hex(qp.query(e.IBV_QP_SQ_PSN)[0].sq_psn))
''')

GOOD_RUN = PRELUDE + textwrap.dedent('''
    qp = new_qp(e.IBV_QPT_UD)
    a = QPAttr(qp_state=e.IBV_QPS_INIT)
    a.pkey_index, a.port_num, a.qkey = 0, 1, 7
    qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_QKEY)
    MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE)
    print('done')
''')


class RefusalLogTest(unittest.TestCase):

    def run_child(self, code, log):
        r = base.run_python(code, SOFTVERBS_LOG=log)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r

    def assertOneLine(self, r, pattern):
        lines = r.stderr.splitlines()
        self.assertEqual(len(lines), 1, f'expected exactly one line, got: {r.stderr!r}')
        m = re.fullmatch(r'softverbs\[(\d+)\] error: ' + pattern, lines[0])
        self.assertIsNotNone(m, f'{lines[0]!r} does not match {pattern!r}')
        # The line names the process that was refused.
        self.assertEqual(int(m.group(1)), int(r.stdout.split('pid ')[1].split()[0]))
        return m

    def test_bad_modify_logs_one_line(self):
        r = self.run_child(BAD_MODIFY, 'error')
        self.assertIn('refused 22', r.stdout)
        m = self.assertOneLine(
            r, r'ibv_modify_qp\(qp (0x[0-9a-f]+)\): RC INIT->RTR is missing IBV_QP_MIN_RNR_TIMER')
        qp_num = int(r.stdout.split('qp_num ')[1].split()[0])
        self.assertEqual(int(m.group(2), 16), qp_num, 'the line names another QP')

    def test_bad_reg_mr_logs_one_line(self):
        r = self.run_child(BAD_REG_MR, 'error')
        self.assertIn('refused 22', r.stdout)
        self.assertOneLine(r, r'ibv_reg_mr(?:_iova2?)?\(pd 0x[0-9a-f]+\): .*LOCAL_WRITE.*')

    def test_bad_create_qp_logs_one_line(self):
        r = self.run_child(BAD_CREATE_QP, 'error')
        self.assertIn('refused 22', r.stdout)
        self.assertOneLine(r, r'ibv_create_qp\(pd 0x[0-9a-f]+\): .*max_send_wr.*32769.*')

    def test_failed_bind_logs_one_line(self):
        # A work request that fails says why too: once, when it completes in error.
        r = self.run_child(BAD_BIND, 'error')
        self.assertIn(f'status {base.e.IBV_WC_MW_BIND_ERR}', r.stdout)
        m = self.assertOneLine(r, r'ibv_post_send\(qp (0x[0-9a-f]+)\): BIND_MW completes with IBV_WC_MW_BIND_ERR: '
                                  r'.*IBV_ACCESS_MW_BIND.*')
        self.assertEqual(int(m.group(2), 16), int(r.stdout.split('qp_num ')[1].split()[0]))

    def test_masked_psn_logs_one_warning(self):
        # Accepted as mlx5 does, but said: a warning naming the verb, the QP and the cut.
        r = self.run_child(WIDE_PSN, 'warn')
        qp_num = int(r.stdout.split('qp_num ')[1].split()[0])
        self.assertIn('sq_psn 0x234567', r.stdout)
        lines = r.stderr.splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertRegex(lines[0], r'^softverbs\[\d+\] warn: ibv_modify_qp\(qp ' + hex(qp_num) +
                         r'\): sq_psn 0x51234567 masked to its 24 bits: 0x234567')
        self.assertEqual(self.run_child(WIDE_PSN, 'error').stderr, '')

    def test_silent_without_softverbs_log(self):
        for name, code in (('modify', BAD_MODIFY), ('reg_mr', BAD_REG_MR),
                           ('create_qp', BAD_CREATE_QP)):
            with self.subTest(name):
                r = self.run_child(code, None)
                self.assertIn('refused 22', r.stdout)
                self.assertEqual(r.stderr, '')

    def test_accepted_verbs_log_nothing_at_error_level(self):
        r = self.run_child(GOOD_RUN, 'error')
        self.assertIn('done', r.stdout)
        self.assertEqual(r.stderr, '')


if __name__ == '__main__':
    unittest.main()
