"""The RC data path (ibv_post_send(3), ibv_post_recv(3), ibv_poll_cq(3)): every RC opcode with
its data checked byte for byte and the completion fields exact, between QPs of one context and of
two contexts in one process."""
import random
import socket

import base
import pyverbs.enums as e
from base import Buffer
from pyverbs.pd import PD

tearDownModule = base.tear_down_module

RC = e.IBV_QPT_RC
OK = e.IBV_WC_SUCCESS


def payload(n, seed=1):
    return random.Random(seed).randbytes(n)


class RcOpcodeTest(base.DataTestCase):
    """a sends to / operates on b; each side has its own CQ."""

    def setUp(self):
        super().setUp()
        self.a, self.b = base.connected_pair(self.ctx, self.pd, RC)
        self.src = Buffer(self.pd, 4096)   # a's memory
        self.dst = Buffer(self.pd, 4096)   # b's memory

    def tearDown(self):
        try:
            for buf in (self.src, self.dst):
                self.assertTrue(buf.guards_intact(), 'a write landed outside a registered region')
        finally:
            super().tearDown()

    def test_send(self):
        data = payload(1000)
        self.src.write(data)
        self.b.post_recv(self.dst.sge(), wr_id=0x1111)
        self.a.post_send(base.send_wr(e.IBV_WR_SEND, [self.src.sge(0, 1000)], wr_id=0x2222))
        [s] = self.a.poll()
        [r] = self.b.poll()
        self.assertWC(s, wr_id=0x2222, status=OK, opcode=e.IBV_WC_SEND, qp_num=self.a.qpn)
        self.assertWC(r, wr_id=0x1111, status=OK, opcode=e.IBV_WC_RECV, byte_len=1000,
                      qp_num=self.b.qpn, wc_flags=0)
        self.assertEqual(self.dst.read(0, 1000), data)
        self.assertEqual(self.dst.read(1000), bytes(4096 - 1000))
        self.assertNoCompletion(self.a)
        self.assertNoCompletion(self.b)

    def test_send_with_imm(self):
        # ibv_post_send(3)/ibv_poll_cq(3): imm_data is in network byte order at both ends.
        imm = socket.htonl(0x12345678)
        data = payload(333, 2)
        self.src.write(data)
        self.b.post_recv(self.dst.sge(), wr_id=5)
        self.a.post_send(base.send_wr(e.IBV_WR_SEND_WITH_IMM, [self.src.sge(0, 333)], wr_id=6,
                                      imm_data=imm))
        [s] = self.a.poll()
        [r] = self.b.poll()
        self.assertWC(s, wr_id=6, status=OK, opcode=e.IBV_WC_SEND, qp_num=self.a.qpn)
        self.assertWC(r, wr_id=5, status=OK, opcode=e.IBV_WC_RECV, byte_len=333,
                      qp_num=self.b.qpn, wc_flags=e.IBV_WC_WITH_IMM, imm_data=imm)
        self.assertEqual(socket.ntohl(r.imm_data), 0x12345678)
        self.assertEqual(self.dst.read(0, 333), data)

    def test_rdma_write(self):
        data = payload(777, 3)
        self.src.write(data, 5)
        # A receive is posted: a WRITE without immediate must not consume it.
        self.b.post_recv(self.dst.sge(3000, 100), wr_id=77)
        self.a.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [self.src.sge(5, 777)], wr_id=1,
                                      rdma=(self.dst.rkey, self.dst.addr + 13)))
        [s] = self.a.poll()
        self.assertWC(s, wr_id=1, status=OK, opcode=e.IBV_WC_RDMA_WRITE, qp_num=self.a.qpn)
        self.assertNoCompletion(self.b)
        self.assertEqual(self.dst.read(0, 13), bytes(13))
        self.assertEqual(self.dst.read(13, 777), data)
        self.assertEqual(self.dst.read(790), bytes(4096 - 790))
        # The receive is still there: the next SEND takes it.
        self.src.write(b'next', 0)
        self.a.post_send(base.send_wr(e.IBV_WR_SEND, [self.src.sge(0, 4)], wr_id=2))
        [r] = self.b.poll()
        self.assertWC(r, wr_id=77, status=OK, opcode=e.IBV_WC_RECV, byte_len=4)
        self.assertEqual(self.dst.read(3000, 4), b'next')

    def test_rdma_write_with_imm(self):
        imm = socket.htonl(0xcafe0001)
        data = payload(500, 4)
        self.src.write(data)
        recv_buf = Buffer(self.pd, 64)
        self.b.post_recv(recv_buf.sge(), wr_id=9)
        self.a.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE_WITH_IMM, [self.src.sge(0, 500)],
                                      wr_id=10, imm_data=imm,
                                      rdma=(self.dst.rkey, self.dst.addr + 100)))
        [s] = self.a.poll()
        [r] = self.b.poll()
        self.assertWC(s, wr_id=10, status=OK, opcode=e.IBV_WC_RDMA_WRITE, qp_num=self.a.qpn)
        # ibv_poll_cq(3): byte_len of RECV_RDMA_WITH_IMM is the length of the written data.
        self.assertWC(r, wr_id=9, status=OK, opcode=e.IBV_WC_RECV_RDMA_WITH_IMM, byte_len=500,
                      qp_num=self.b.qpn, wc_flags=e.IBV_WC_WITH_IMM, imm_data=imm)
        self.assertEqual(self.dst.read(100, 500), data)
        self.assertEqual(self.dst.read(0, 100) + self.dst.read(600), bytes(4096 - 500))
        self.assertEqual(recv_buf.read(), bytes(64), 'the receive buffer was written')
        self.assertTrue(recv_buf.guards_intact())

    def test_rdma_write_with_imm_into_a_receive_without_sges(self):
        self.src.write(b'x' * 32)
        self.b.post_recv(wr_id=11)  # num_sge 0: the usual receive for WRITE_WITH_IMM
        self.a.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE_WITH_IMM, [self.src.sge(0, 32)],
                                      wr_id=12, imm_data=socket.htonl(7),
                                      rdma=(self.dst.rkey, self.dst.addr)))
        self.assertWC(self.a.poll()[0], wr_id=12, status=OK)
        self.assertWC(self.b.poll()[0], wr_id=11, status=OK,
                      opcode=e.IBV_WC_RECV_RDMA_WITH_IMM, byte_len=32,
                      imm_data=socket.htonl(7), wc_flags=e.IBV_WC_WITH_IMM)
        self.assertEqual(self.dst.read(0, 32), b'x' * 32)

    def test_rdma_read(self):
        data = payload(1234, 5)
        self.dst.write(data, 7)
        self.a.post_send(base.send_wr(e.IBV_WR_RDMA_READ, [self.src.sge(3, 1234)], wr_id=20,
                                      rdma=(self.dst.rkey, self.dst.addr + 7)))
        [s] = self.a.poll()
        self.assertWC(s, wr_id=20, status=OK, opcode=e.IBV_WC_RDMA_READ, byte_len=1234,
                      qp_num=self.a.qpn)
        self.assertNoCompletion(self.b)
        self.assertEqual(self.src.read(3, 1234), data)
        self.assertEqual(self.src.read(0, 3) + self.src.read(1237), bytes(4096 - 1234))

    def atomic(self, opcode, compare_add, swap, wr_id, result_offset=8):
        target = self.dst.addr + 16
        self.assertEqual(target % 8, 0)
        self.a.post_send(base.send_wr(opcode, [self.src.sge(result_offset, 8)], wr_id=wr_id,
                                      atomic=(self.dst.rkey, target, compare_add, swap)))
        [s] = self.a.poll()
        return s

    def test_atomic_fetch_and_add(self):
        self.dst.set_u64(0x0123456789abcdef, 16)
        s = self.atomic(e.IBV_WR_ATOMIC_FETCH_AND_ADD, 0x1111, 0, wr_id=30)
        self.assertWC(s, wr_id=30, status=OK, opcode=e.IBV_WC_FETCH_ADD, byte_len=8,
                      qp_num=self.a.qpn)
        self.assertEqual(self.src.u64(8), 0x0123456789abcdef)
        self.assertEqual(self.dst.u64(16), 0x0123456789abcdef + 0x1111)
        # The sum wraps at 2^64.
        self.dst.set_u64(0xffffffffffffffff, 16)
        s = self.atomic(e.IBV_WR_ATOMIC_FETCH_AND_ADD, 2, 0, wr_id=31, result_offset=24)
        self.assertWC(s, wr_id=31, status=OK, opcode=e.IBV_WC_FETCH_ADD)
        self.assertEqual(self.src.u64(24), 0xffffffffffffffff)
        self.assertEqual(self.dst.u64(16), 1)
        self.assertEqual(self.dst.read(0, 16) + self.dst.read(24), bytes(4096 - 8))

    def test_atomic_compare_and_swap(self):
        self.dst.set_u64(0xaaaa5555aaaa5555, 16)
        # The compare value differs: nothing changes, the original comes back.
        s = self.atomic(e.IBV_WR_ATOMIC_CMP_AND_SWP, 0x1, 0x2222, wr_id=40)
        self.assertWC(s, wr_id=40, status=OK, opcode=e.IBV_WC_COMP_SWAP, byte_len=8,
                      qp_num=self.a.qpn)
        self.assertEqual(self.src.u64(8), 0xaaaa5555aaaa5555)
        self.assertEqual(self.dst.u64(16), 0xaaaa5555aaaa5555)
        # It matches: swapped.
        s = self.atomic(e.IBV_WR_ATOMIC_CMP_AND_SWP, 0xaaaa5555aaaa5555, 0x0102030405060708,
                        wr_id=41, result_offset=32)
        self.assertWC(s, wr_id=41, status=OK, opcode=e.IBV_WC_COMP_SWAP, byte_len=8)
        self.assertEqual(self.src.u64(32), 0xaaaa5555aaaa5555)
        self.assertEqual(self.dst.u64(16), 0x0102030405060708)
        self.assertNoCompletion(self.b)

    def test_sends_arrive_in_order(self):
        n = 100
        for k in range(n):
            self.b.post_recv(self.dst.sge(k * 8, 8), wr_id=1000 + k)
        for k in range(n):
            self.src.write(k.to_bytes(8, 'little'), k * 8)
            self.a.post_send(base.send_wr(e.IBV_WR_SEND, [self.src.sge(k * 8, 8)], wr_id=k))
        self.assertEqual([w.wr_id for w in self.a.poll(n)], list(range(n)))
        recvs = self.b.poll(n)
        self.assertEqual([w.wr_id for w in recvs], [1000 + k for k in range(n)])
        self.assertEqual({w.status for w in recvs}, {OK})
        self.assertEqual(self.dst.read(0, 8 * n), b''.join(k.to_bytes(8, 'little')
                                                             for k in range(n)))

    def test_send_of_a_chained_wr_list(self):
        # ibv_post_send(3) takes a linked list; the WRs execute in list order.
        for k in range(3):
            self.b.post_recv(self.dst.sge(k * 16, 16), wr_id=k)
        self.src.write(b'A' * 16 + b'B' * 16 + b'C' * 16)
        third = base.send_wr(e.IBV_WR_SEND, [self.src.sge(32, 16)], wr_id=102)
        second = base.send_wr(e.IBV_WR_SEND, [self.src.sge(16, 16)], wr_id=101)
        first = base.send_wr(e.IBV_WR_SEND, [self.src.sge(0, 16)], wr_id=100)
        second.next_wr = third
        first.next_wr = second
        self.a.post_send(first)
        self.assertEqual([w.wr_id for w in self.a.poll(3)], [100, 101, 102])
        self.assertEqual([w.wr_id for w in self.b.poll(3)], [0, 1, 2])
        self.assertEqual(self.dst.read(0, 48), b'A' * 16 + b'B' * 16 + b'C' * 16)

    def test_a_list_of_every_rc_opcode(self):
        # One ibv_post_send list (one work request converted after the other into the same
        # transport WR): each opcode's own fields arrive -- an atomic's operands, a WRITE's inline
        # bytes, an immediate -- and none leaks into the next; the unsignaled WRITE completes
        # without a completion (ibv_post_send(3)).
        cap = base.default_cap(max_send_wr=16, max_recv_wr=16, max_send_sge=4, max_recv_sge=4,
                               max_inline_data=64)
        a, b = base.connected_pair(self.ctx, self.pd, RC, cap=cap)
        src, dst = self.src, self.dst
        dst.set_u64(100, 16)
        dst.set_u64(7, 24)
        dst.write(b'R' * 32, 64)
        src.write(b'W' * 8 + b'S' * 16)
        b.post_recv(dst.sge(128, 16), wr_id=500)
        imm = socket.htonl(0x0a0b0c0d)
        wrs = [
            base.send_wr(e.IBV_WR_ATOMIC_FETCH_AND_ADD, [src.sge(64, 8)], wr_id=1,
                         atomic=(dst.rkey, dst.addr + 16, 5, 0)),
            base.send_wr(e.IBV_WR_RDMA_WRITE, [src.sge(0, 8)], wr_id=2, flags=e.IBV_SEND_INLINE,
                         rdma=(dst.rkey, dst.addr + 32)),
            base.send_wr(e.IBV_WR_ATOMIC_CMP_AND_SWP, [src.sge(72, 8)], wr_id=3,
                         atomic=(dst.rkey, dst.addr + 24, 7, 9)),
            base.send_wr(e.IBV_WR_RDMA_READ, [src.sge(96, 32)], wr_id=4, rdma=(dst.rkey, dst.addr + 64)),
            base.send_wr(e.IBV_WR_SEND_WITH_IMM, [src.sge(8, 16)], wr_id=5, imm_data=imm),
        ]
        for first, then in zip(wrs, wrs[1:]):
            first.next_wr = then
        a.post_send(wrs[0])
        cs = a.poll(4)
        self.assertEqual([(c.wr_id, c.status, c.opcode, c.byte_len) for c in cs],
                         [(1, OK, e.IBV_WC_FETCH_ADD, 8), (3, OK, e.IBV_WC_COMP_SWAP, 8),
                          (4, OK, e.IBV_WC_RDMA_READ, 32), (5, OK, e.IBV_WC_SEND, 16)])
        [r] = b.poll()
        self.assertWC(r, wr_id=500, status=OK, opcode=e.IBV_WC_RECV, byte_len=16,
                      wc_flags=e.IBV_WC_WITH_IMM, imm_data=imm)
        self.assertEqual((src.u64(64), dst.u64(16)), (100, 105))
        self.assertEqual((src.u64(72), dst.u64(24)), (7, 9))
        self.assertEqual(dst.read(32, 8), b'W' * 8)
        self.assertEqual(src.read(96, 32), b'R' * 32)
        self.assertEqual(dst.read(128, 16), b'S' * 16)
        self.assertNoCompletion(a)


class TwoContextsTest(base.DataTestCase):
    """Two contexts of softverbs0 in one process, as pyverbs' own tests use them."""

    def setUp(self):
        super().setUp()
        self.ctx2 = base.open_context()
        self.addCleanup(self.ctx2.close)
        self.pd2 = PD(self.ctx2)

    def test_send_and_write_between_contexts(self):
        a, b = base.connected_pair(self.ctx, self.pd, RC, b_ctx=self.ctx2, b_pd=self.pd2)
        src, dst = Buffer(self.pd, 2048), Buffer(self.pd2, 2048)
        data = payload(2000, 6)
        src.write(data)
        b.post_recv(dst.sge(), wr_id=1)
        a.post_send(base.send_wr(e.IBV_WR_SEND, [src.sge(0, 2000)], wr_id=2))
        self.assertWC(a.poll()[0], wr_id=2, status=OK, opcode=e.IBV_WC_SEND)
        self.assertWC(b.poll()[0], wr_id=1, status=OK, opcode=e.IBV_WC_RECV, byte_len=2000,
                      qp_num=b.qpn)
        self.assertEqual(dst.read(0, 2000), data)

        data2 = payload(2048, 7)
        src.write(data2)
        a.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [src.sge()], wr_id=3,
                                 rdma=(dst.rkey, dst.addr)))
        self.assertWC(a.poll()[0], wr_id=3, status=OK, opcode=e.IBV_WC_RDMA_WRITE)
        self.assertEqual(dst.read(), data2)
        self.assertNoCompletion(b)

        # And back: b reads a's memory.
        src.write(data)
        b.post_send(base.send_wr(e.IBV_WR_RDMA_READ, [dst.sge(0, 2000)], wr_id=4,
                                 rdma=(src.rkey, src.addr)))
        self.assertWC(b.poll()[0], wr_id=4, status=OK, opcode=e.IBV_WC_RDMA_READ, byte_len=2000)
        self.assertEqual(dst.read(0, 2000), data)
        self.assertTrue(src.guards_intact() and dst.guards_intact())

    def test_uc_and_ud_between_contexts(self):
        for qpt in (e.IBV_QPT_UC, e.IBV_QPT_UD):
            with self.subTest(qp_type=base.QPT_NAMES[qpt]):
                a, b = base.connected_pair(self.ctx, self.pd, qpt, b_ctx=self.ctx2, b_pd=self.pd2)
                src, dst = Buffer(self.pd, 256), Buffer(self.pd2, 256 + base.GRH_LEN)
                src.write(payload(256, qpt))
                b.post_recv(dst.sge(), wr_id=qpt)
                ud = (a.ah(), b.qpn, base.QKEY) if qpt == e.IBV_QPT_UD else None
                a.post_send(base.send_wr(e.IBV_WR_SEND, [src.sge()], wr_id=1, ud=ud))
                self.assertWC(a.poll()[0], wr_id=1, status=OK)
                grh = base.GRH_LEN if qpt == e.IBV_QPT_UD else 0
                self.assertWC(b.poll()[0], wr_id=qpt, status=OK, byte_len=256 + grh)
                self.assertEqual(dst.read(grh, 256), payload(256, qpt))

    def test_mr_of_the_other_context_is_a_local_protection_error(self):
        # An lkey names an MR of the QP's PD (ibv_post_send(3)); another context's is not.
        a, b = base.connected_pair(self.ctx, self.pd, RC, b_ctx=self.ctx2, b_pd=self.pd2)
        foreign = Buffer(self.pd2, 64)
        dst = Buffer(self.pd2, 64)
        b.post_recv(dst.sge(), wr_id=1)
        a.post_send(base.send_wr(e.IBV_WR_SEND, [foreign.sge()], wr_id=2))
        self.assertWC(a.poll()[0], wr_id=2, status=e.IBV_WC_LOC_PROT_ERR)
        self.assertNoCompletion(b)
