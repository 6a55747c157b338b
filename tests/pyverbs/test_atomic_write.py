"""ATOMIC WRITE (issue 13 item 7; IBA 1.5 9.4.6, ibv_wr_atomic_write(3), IBV_WR_ATOMIC_WRITE):
8 bytes stored at once at a naturally aligned remote address, on RC QPs of this host. Checked as
the kernel's rxe (rxe_resp.c): the QP and the R_Key must allow REMOTE_WRITE (REMOTE_ATOMIC is not
needed), a misaligned address is an invalid request (IBV_WC_REM_INV_REQ_ERR); the completion's
opcode is IBV_WC_ATOMIC_WRITE. ibv_wr_atomic_write passes the 8 bytes by pointer; ibv_post_send
takes them from its SGE (or inline). Every byte of the target, guards included, is checked."""
import errno

import base
import pyverbs.enums as e
from base import Buffer
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QPCap, QPEx, QPInitAttrEx
from pyverbs.wr import SGE

tearDownModule = base.tear_down_module

RC = e.IBV_QPT_RC
OK = e.IBV_WC_SUCCESS
VALUE = bytes.fromhex('0123456789abcdef')


def qp_ex_peer(ctx, pd, qpt=RC, ops=e.IBV_QP_EX_WITH_ATOMIC_WRITE | e.IBV_QP_EX_WITH_SEND):
    p = base.Peer.__new__(base.Peer)
    p.ctx, p.pd, p.qpt = ctx, pd, qpt
    p.cq = base.CQ(ctx, 256, None, None, 0)
    attr = QPInitAttrEx(qp_type=qpt, scq=p.cq, rcq=p.cq, pd=pd,
                        cap=QPCap(max_send_wr=64, max_recv_wr=64, max_send_sge=2, max_recv_sge=2),
                        comp_mask=e.IBV_QP_INIT_ATTR_PD | e.IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
                        send_ops_flags=ops)
    p.qp = QPEx(ctx, attr)
    p.qpn = p.qp.qp_num
    return p


class AtomicWriteTest(base.DataTestCase):

    def setUp(self):
        super().setUp()
        self.a = qp_ex_peer(self.ctx, self.pd)
        self.b = base.Peer(self.ctx, self.pd, RC)
        self.a.connect(self.b.qpn)
        self.b.connect(self.a.qpn)
        self.dst = Buffer(self.pd, 64, fill=0x5a)

    def builder(self, rkey, addr, value=VALUE, wr_id=1):
        qp = self.a.qp
        qp.wr_start()
        qp.wr_id, qp.wr_flags = wr_id, e.IBV_SEND_SIGNALED
        qp.wr_atomic_write(rkey, addr, value)
        qp.wr_complete()
        return self.a.poll()[0]

    def test_builder_writes_eight_bytes(self):
        wc = self.builder(self.dst.rkey, self.dst.addr + 16)
        self.assertWC(wc, wr_id=1, status=OK, opcode=e.IBV_WC_ATOMIC_WRITE)
        self.assertEqual(self.dst.read(), b'\x5a' * 16 + VALUE + b'\x5a' * 40)
        self.assertTrue(self.dst.guards_intact())

    def test_post_send_takes_the_sge(self):
        src = Buffer(self.pd, 16)
        src.write(VALUE[::-1], 4)
        self.a.post_send(base.send_wr(e.IBV_WR_ATOMIC_WRITE, [src.sge(4, 8)], wr_id=2,
                                      rdma=(self.dst.rkey, self.dst.addr + 56)))
        self.assertWC(self.a.poll()[0], wr_id=2, status=OK, opcode=e.IBV_WC_ATOMIC_WRITE)
        self.assertEqual(self.dst.read(), b'\x5a' * 56 + VALUE[::-1])
        # Inline too.
        src.write(VALUE, 0)
        self.a.post_send(base.send_wr(e.IBV_WR_ATOMIC_WRITE, [src.sge(0, 8)], wr_id=3,
                                      flags=e.IBV_SEND_SIGNALED | e.IBV_SEND_INLINE,
                                      rdma=(self.dst.rkey, self.dst.addr)))
        self.assertWC(self.a.poll()[0], wr_id=3, status=OK)
        self.assertEqual(self.dst.read(0, 8), VALUE)
        self.assertTrue(self.dst.guards_intact())

    def test_remote_write_access_is_what_it_needs(self):
        # REMOTE_WRITE without REMOTE_ATOMIC: allowed (rxe's check_rkey asks REMOTE_WRITE).
        w = Buffer(self.pd, 16, access=e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE, fill=1)
        self.assertWC(self.builder(w.rkey, w.addr, wr_id=4), wr_id=4, status=OK)
        self.assertEqual(w.read(), VALUE + b'\x01' * 8)

    def test_refused_targets_change_nothing(self):
        atomic_only = Buffer(self.pd, 16, access=e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_ATOMIC, fill=2)
        cases = [('misaligned', self.dst.rkey, self.dst.addr + 4, e.IBV_WC_REM_INV_REQ_ERR, self.dst),
                 ('no REMOTE_WRITE', atomic_only.rkey, atomic_only.addr, e.IBV_WC_REM_ACCESS_ERR, atomic_only),
                 ('beyond the MR', self.dst.rkey, self.dst.addr + 64, e.IBV_WC_REM_ACCESS_ERR, self.dst)]
        for name, rkey, addr, status, buf in cases:
            with self.subTest(case=name):
                self.a = qp_ex_peer(self.ctx, self.pd)
                self.b = base.Peer(self.ctx, self.pd, RC)
                self.a.connect(self.b.qpn)
                self.b.connect(self.a.qpn)
                before = buf.snapshot()
                self.assertWC(self.builder(rkey, addr, wr_id=5), wr_id=5, status=status)
                self.assertEqual(buf.snapshot(), before)

    def test_local_length_and_post_refusals(self):
        src = Buffer(self.pd, 16)
        # Four bytes through an SGE: a local length error (the operation is 8 bytes).
        self.a.post_send(base.send_wr(e.IBV_WR_ATOMIC_WRITE, [src.sge(0, 4)], wr_id=6,
                                      rdma=(self.dst.rkey, self.dst.addr)))
        self.assertWC(self.a.poll()[0], wr_id=6, status=e.IBV_WC_LOC_LEN_ERR)
        # Four bytes inline: refused at post (EINVAL), on a new pair.
        a = qp_ex_peer(self.ctx, self.pd)
        b = base.Peer(self.ctx, self.pd, RC)
        a.connect(b.qpn)
        b.connect(a.qpn)
        with self.assertRaises(PyverbsRDMAError) as c:
            a.post_send(base.send_wr(e.IBV_WR_ATOMIC_WRITE, [src.sge(0, 4)], wr_id=7,
                                     flags=e.IBV_SEND_SIGNALED | e.IBV_SEND_INLINE,
                                     rdma=(self.dst.rkey, self.dst.addr)))
        self.assertEqual(abs(c.exception.error_code), errno.EINVAL)
        # On UC and UD it is no operation of the QP: EINVAL when asked for at creation.
        for qpt in (e.IBV_QPT_UC, e.IBV_QPT_UD):
            with self.subTest(qpt=qpt):
                with self.assertRaises(PyverbsRDMAError) as c:
                    qp_ex_peer(self.ctx, self.pd, qpt, e.IBV_QP_EX_WITH_ATOMIC_WRITE)
                self.assertEqual(abs(c.exception.error_code), errno.EINVAL)

    def test_refusal_log_line(self):
        code = ('import base, os, test_atomic_write as t, pyverbs.enums as e\nos.environ["SOFTVERBS_LOG"] = "error"\n'
                'ctx = base.open_context(); pd = base.PD(ctx)\n'
                'try:\n    t.qp_ex_peer(ctx, pd, e.IBV_QPT_UC, e.IBV_QP_EX_WITH_ATOMIC_WRITE)\n'
                'except base.PyverbsRDMAError as x:\n    print("errno", abs(x.error_code))\n')
        r = base.run_python(code, SOFTVERBS_LOG='error')
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f'errno {errno.EINVAL}', r.stdout)
        self.assertRegex(r.stderr, r'ibv_create_qp_ex.*UC QPs do not offer send_ops_flags 0x1000')
