"""Posting through ibv_qp_ex (ibv_wr_post(3)): the builders post at ibv_wr_complete, an aborted
batch posts nothing, an op not requested at creation refuses the batch, and the QP must be in
RTS."""
import errno
import unittest

import base
import pyverbs.enums as e
from pyverbs.qp import QPCap, QPEx, QPInitAttrEx

RC = e.IBV_QPT_RC
OPS = (e.IBV_QP_EX_WITH_RDMA_WRITE | e.IBV_QP_EX_WITH_SEND | e.IBV_QP_EX_WITH_RDMA_READ |
       e.IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD)


class QpExPeer(base.Peer):
    """A Peer whose QP is created with send_ops_flags, so it has the ibv_qp_ex interface."""

    def __init__(self, ctx, pd, ops=OPS):
        self.ctx, self.pd, self.qpt = ctx, pd, RC
        self.cq = base.CQ(ctx, 256, None, None, 0)
        attr = QPInitAttrEx(qp_type=RC, scq=self.cq, rcq=self.cq, pd=pd,
                            cap=QPCap(max_send_wr=64, max_recv_wr=64, max_send_sge=2, max_recv_sge=2),
                            comp_mask=e.IBV_QP_INIT_ATTR_PD | e.IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
                            send_ops_flags=ops)
        self.qp = QPEx(ctx, attr)
        self.qpn = self.qp.qp_num


class QpExTest(base.DataTestCase):

    def setUp(self):
        super().setUp()
        self.a = QpExPeer(self.ctx, self.pd)
        self.b = base.Peer(self.ctx, self.pd, RC)

    def connect(self):
        self.a.connect(self.b.qpn)
        self.b.connect(self.a.qpn)

    def test_write_send_read_and_atomic_through_the_builders(self):
        self.connect()
        src = base.Buffer(self.pd, 64)
        dst = base.Buffer(self.pd, 64)
        src.write(b'qp_ex write!' + bytes(52))
        dst.write((40).to_bytes(8, 'little'), 56)
        self.b.post_recv(dst.sge(16, 16), wr_id=9)
        qp = self.a.qp
        qp.wr_start()
        qp.wr_id, qp.wr_flags = 1, e.IBV_SEND_SIGNALED
        qp.wr_rdma_write(dst.rkey, dst.addr)
        qp.wr_set_sge(src.sge(0, 12))
        qp.wr_id, qp.wr_flags = 2, e.IBV_SEND_SIGNALED
        qp.wr_send()
        qp.wr_set_sge(src.sge(0, 12))
        qp.wr_id, qp.wr_flags = 3, e.IBV_SEND_SIGNALED
        qp.wr_rdma_read(dst.rkey, dst.addr)
        qp.wr_set_sge(src.sge(32, 12))
        qp.wr_id, qp.wr_flags = 4, e.IBV_SEND_SIGNALED
        qp.wr_atomic_fetch_add(dst.rkey, dst.addr + 56, 2)
        qp.wr_set_sge(src.sge(48, 8))
        qp.wr_complete()
        wcs = self.a.poll(4)
        self.assertEqual([(w.wr_id, w.status) for w in wcs], [(1, 0), (2, 0), (3, 0), (4, 0)])
        self.assertEqual(dst.read(0, 12), b'qp_ex write!')          # WRITE
        self.assertEqual(self.b.poll(1)[0].wr_id, 9)
        self.assertEqual(dst.read(16, 12), b'qp_ex write!')         # SEND
        self.assertEqual(src.read(32, 12), b'qp_ex write!')         # READ
        self.assertEqual(int.from_bytes(src.read(48, 8), 'little'), 40)  # FETCH_AND_ADD original
        self.assertEqual(int.from_bytes(dst.read(56, 8), 'little'), 42)

    def test_aborted_batch_posts_nothing(self):
        self.connect()
        src = base.Buffer(self.pd, 16)
        dst = base.Buffer(self.pd, 16)
        src.write(b'x' * 16)
        qp = self.a.qp
        qp.wr_start()
        qp.wr_id, qp.wr_flags = 1, e.IBV_SEND_SIGNALED
        qp.wr_rdma_write(dst.rkey, dst.addr)
        qp.wr_set_sge(src.sge(0, 16))
        qp.wr_abort()
        self.assertEqual(self.a.drain(), [])
        self.assertEqual(dst.read(), bytes(16))

    def test_op_not_requested_refuses_the_whole_batch(self):
        self.connect()
        src = base.Buffer(self.pd, 16)
        dst = base.Buffer(self.pd, 16)
        qp = self.a.qp
        qp.wr_start()
        qp.wr_id, qp.wr_flags = 1, e.IBV_SEND_SIGNALED
        qp.wr_rdma_write(dst.rkey, dst.addr)
        qp.wr_set_sge(src.sge(0, 8))
        qp.wr_rdma_write_imm(dst.rkey, dst.addr, 7)  # WRITE_WITH_IMM was not requested
        qp.wr_set_sge(src.sge(0, 8))
        self.assertRDMAError(errno.EINVAL, qp.wr_complete)
        self.assertEqual(self.a.drain(), [])

    def test_complete_outside_rts_is_einval(self):
        src = base.Buffer(self.pd, 16)
        qp = self.a.qp
        qp.wr_start()
        qp.wr_id, qp.wr_flags = 1, e.IBV_SEND_SIGNALED
        qp.wr_send()
        qp.wr_set_sge(src.sge(0, 8))
        self.assertRDMAError(errno.EINVAL, qp.wr_complete)


if __name__ == '__main__':
    unittest.main()
