"""Send-side features of ibv_post_send(3) on every QP type that has them: IBV_SEND_INLINE,
gather/scatter lists, signaled and unsignaled WRs (sq_sig_all), zero-length messages."""
import ctypes
import random

import base
import pyverbs.enums as e
from base import Buffer
from pyverbs.wr import SGE

tearDownModule = base.tear_down_module

RC, UC, UD = e.IBV_QPT_RC, e.IBV_QPT_UC, e.IBV_QPT_UD
OK = e.IBV_WC_SUCCESS


def payload(n, seed=1):
    return random.Random(seed).randbytes(n)


class SendFeatureTest(base.DataTestCase):

    def pair(self, qpt, **kw):
        return base.connected_pair(self.ctx, self.pd, qpt, **kw)

    def ud(self, a, b, qpt):
        return (a.ah(), b.qpn, base.QKEY) if qpt == UD else None

    def test_inline_send_uses_the_data_at_post_time(self):
        inline_cap = base.default_cap(max_send_wr=16, max_recv_wr=16, max_inline_data=512)
        for qpt in (RC, UC, UD):
            with self.subTest(qp_type=base.QPT_NAMES[qpt]):
                a, b = self.pair(qpt, cap=inline_cap)
                src, dst = Buffer(self.pd, 400), Buffer(self.pd, 400 + base.GRH_LEN)
                data = payload(400, qpt)
                src.write(data)
                b.post_recv(dst.sge(), wr_id=1)
                a.post_send(base.send_wr(e.IBV_WR_SEND, [src.sge()], wr_id=2,
                                         flags=e.IBV_SEND_SIGNALED | e.IBV_SEND_INLINE,
                                         ud=self.ud(a, b, qpt)))
                src.write(b'\xee' * 400)  # the buffer may be reused as soon as post returns
                self.assertWC(a.poll()[0], wr_id=2, status=OK, opcode=e.IBV_WC_SEND)
                grh = base.GRH_LEN if qpt == UD else 0
                self.assertWC(b.poll()[0], wr_id=1, status=OK, byte_len=400 + grh)
                self.assertEqual(dst.read(grh, 400), data)

    def test_inline_rdma_write(self):
        a, b = self.pair(RC, cap=base.default_cap(max_inline_data=256))
        src, dst = Buffer(self.pd, 200), Buffer(self.pd, 200)
        src.write(payload(200, 9))
        a.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [src.sge()], wr_id=3,
                                 flags=e.IBV_SEND_SIGNALED | e.IBV_SEND_INLINE,
                                 rdma=(dst.rkey, dst.addr)))
        src.write(bytes(200))
        self.assertWC(a.poll()[0], wr_id=3, status=OK, opcode=e.IBV_WC_RDMA_WRITE)
        self.assertEqual(dst.read(), payload(200, 9))

    def test_inline_data_needs_no_memory_region(self):
        # ibv_post_send(3), IBV_SEND_INLINE: "The L_Key will not be checked".
        a, b = self.pair(RC, cap=base.default_cap(max_inline_data=64))
        plain = ctypes.create_string_buffer(b'unregistered memory!', 20)
        dst = Buffer(self.pd, 64)
        b.post_recv(dst.sge(), wr_id=1)
        a.post_send(base.send_wr(e.IBV_WR_SEND, [SGE(ctypes.addressof(plain), 20, 0xdead)],
                                 wr_id=2, flags=e.IBV_SEND_SIGNALED | e.IBV_SEND_INLINE))
        self.assertWC(a.poll()[0], wr_id=2, status=OK)
        self.assertWC(b.poll()[0], wr_id=1, status=OK, byte_len=20)
        self.assertEqual(dst.read(0, 20), b'unregistered memory!')

    def test_inline_send_of_an_empty_sge_at_address_zero(self):
        # UCX posts inline messages whose SGE is (0, 0): nothing to read, never a fault (the
        # sanitizer run checks no byte is copied from address 0).
        a, b = self.pair(RC, cap=base.default_cap(max_inline_data=64, max_send_sge=2))
        src, dst = Buffer(self.pd, 16), Buffer(self.pd, 64)
        src.write(b'after the empty!')
        b.post_recv(dst.sge(), wr_id=1)
        a.post_send(base.send_wr(e.IBV_WR_SEND, [SGE(0, 0, 0), src.sge()], wr_id=2,
                                 flags=e.IBV_SEND_SIGNALED | e.IBV_SEND_INLINE))
        self.assertWC(a.poll()[0], wr_id=2, status=OK)
        self.assertWC(b.poll()[0], wr_id=1, status=OK, byte_len=16)
        self.assertEqual(dst.read(0, 16), b'after the empty!')

    def test_inline_send_of_several_sges(self):
        a, b = self.pair(RC, cap=base.default_cap(max_inline_data=128, max_send_sge=3))
        src, dst = Buffer(self.pd, 128), Buffer(self.pd, 128)
        src.write(payload(128, 10))
        b.post_recv(dst.sge(), wr_id=1)
        a.post_send(base.send_wr(e.IBV_WR_SEND, [src.sge(100, 5), src.sge(0, 50), src.sge(60, 1)],
                                 wr_id=2, flags=e.IBV_SEND_SIGNALED | e.IBV_SEND_INLINE))
        src.write(bytes(128))
        self.assertWC(a.poll()[0], wr_id=2, status=OK)
        self.assertWC(b.poll()[0], wr_id=1, status=OK, byte_len=56)
        p = payload(128, 10)
        self.assertEqual(dst.read(0, 56), p[100:105] + p[0:50] + p[60:61])

    def test_gather_and_scatter_of_three_sges_each(self):
        # Odd sizes on both sides, so the pieces cross each other's boundaries; the send SGEs come
        # from two MRs, the receive SGEs from three.
        gather = [(0, 7), (1, 333), (0, 1001)]     # (which send MR, length)
        scatter = [100, 5, 2000]                   # receive SGE lengths (room for 1341 bytes)
        for qpt in (RC, UC, UD):
            with self.subTest(qp_type=base.QPT_NAMES[qpt]):
                a, b = self.pair(qpt)
                s_mrs = [Buffer(self.pd, 2048), Buffer(self.pd, 2048)]
                r_mrs = [Buffer(self.pd, 2048) for _ in scatter]
                for k, m in enumerate(s_mrs):
                    m.write(payload(2048, 20 + k))
                sges, expected, off = [], b'', [11, 3]
                for which, n in gather:
                    sges.append(s_mrs[which].sge(off[which], n))
                    expected += s_mrs[which].read(off[which], n)
                    off[which] += n + 17
                grh = base.GRH_LEN if qpt == UD else 0
                r_sges = [r_mrs[k].sge(k * 3, n + (grh if k == 0 else 0))
                          for k, n in enumerate(scatter)]
                b.post_recv(*r_sges, wr_id=50)
                a.post_send(base.send_wr(e.IBV_WR_SEND, sges, wr_id=51, ud=self.ud(a, b, qpt)))
                self.assertWC(a.poll()[0], wr_id=51, status=OK)
                self.assertWC(b.poll()[0], wr_id=50, status=OK, byte_len=len(expected) + grh)
                got = (r_mrs[0].read(grh, 100) + r_mrs[1].read(3, 5) +
                       r_mrs[2].read(6, len(expected) - 105))
                self.assertEqual(got, expected)
                self.assertEqual(r_mrs[2].read(6 + len(expected) - 105),
                                 bytes(2048 - 6 - len(expected) + 105))
                for m in r_mrs:
                    self.assertTrue(m.guards_intact())

    def test_rdma_write_gathers_and_rdma_read_scatters(self):
        a, b = self.pair(RC)
        src, remote, back = Buffer(self.pd, 1024), Buffer(self.pd, 1024), Buffer(self.pd, 1024)
        src.write(payload(1024, 30))
        pieces = [(900, 13), (0, 500), (600, 99)]
        a.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [src.sge(o, n) for o, n in pieces],
                                 wr_id=1, rdma=(remote.rkey, remote.addr + 1)))
        self.assertWC(a.poll()[0], wr_id=1, status=OK)
        joined = b''.join(src.read(o, n) for o, n in pieces)
        self.assertEqual(remote.read(1, len(joined)), joined)
        # Read it back into three pieces of another MR.
        a.post_send(base.send_wr(e.IBV_WR_RDMA_READ,
                                 [back.sge(500, 150), back.sge(0, 12), back.sge(700, 300)],
                                 wr_id=2, rdma=(remote.rkey, remote.addr + 1)))
        self.assertWC(a.poll()[0], wr_id=2, status=OK, opcode=e.IBV_WC_RDMA_READ,
                      byte_len=462)
        self.assertEqual(back.read(500, 150) + back.read(0, 12) + back.read(700, 300),
                         remote.read(1, 462))
        self.assertTrue(all(m.guards_intact() for m in (src, remote, back)))

    def test_unsignaled_sends_complete_silently(self):
        for qpt in (RC, UC, UD):
            with self.subTest(qp_type=base.QPT_NAMES[qpt]):
                a, b = self.pair(qpt)
                src, dst = Buffer(self.pd, 64), Buffer(self.pd, 4 * (64 + base.GRH_LEN))
                for k in range(4):
                    b.post_recv(dst.sge(k * (64 + base.GRH_LEN), 64 + base.GRH_LEN), wr_id=k)
                for k in range(4):
                    flags = e.IBV_SEND_SIGNALED if k == 2 else 0
                    a.post_send(base.send_wr(e.IBV_WR_SEND, [src.sge()], wr_id=100 + k,
                                             flags=flags, ud=self.ud(a, b, qpt)))
                self.assertEqual([w.wr_id for w in b.poll(4)], [0, 1, 2, 3])
                [s] = a.poll()
                self.assertWC(s, wr_id=102, status=OK)
                self.assertNoCompletion(a)

    def test_sq_sig_all_signals_every_wr(self):
        for qpt in (RC, UC, UD):
            with self.subTest(qp_type=base.QPT_NAMES[qpt]):
                a, b = self.pair(qpt, sq_sig_all=1)
                src, dst = Buffer(self.pd, 64), Buffer(self.pd, 3 * (64 + base.GRH_LEN))
                for k in range(3):
                    b.post_recv(dst.sge(k * (64 + base.GRH_LEN), 64 + base.GRH_LEN), wr_id=k)
                for k in range(3):
                    a.post_send(base.send_wr(e.IBV_WR_SEND, [src.sge()], wr_id=200 + k, flags=0,
                                             ud=self.ud(a, b, qpt)))
                self.assertEqual([w.wr_id for w in a.poll(3)], [200, 201, 202])
                self.assertEqual([w.wr_id for w in b.poll(3)], [0, 1, 2])
                self.assertNoCompletion(a)

    def test_unsignaled_rdma_ops(self):
        a, b = self.pair(RC)
        src, dst = Buffer(self.pd, 64), Buffer(self.pd, 64)
        src.write(b'w' * 64)
        a.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [src.sge()], wr_id=1, flags=0,
                                 rdma=(dst.rkey, dst.addr)))
        a.post_send(base.send_wr(e.IBV_WR_ATOMIC_FETCH_AND_ADD, [src.sge(0, 8)], wr_id=2, flags=0,
                                 atomic=(dst.rkey, dst.addr + 8, 1, 0)))
        a.post_send(base.send_wr(e.IBV_WR_RDMA_READ, [src.sge(16, 16)], wr_id=3,
                                 rdma=(dst.rkey, dst.addr)))
        self.assertWC(a.poll()[0], wr_id=3, status=OK, opcode=e.IBV_WC_RDMA_READ)
        self.assertNoCompletion(a)
        expected_word = (int.from_bytes(b'w' * 8, 'little') + 1).to_bytes(8, 'little')
        self.assertEqual(dst.read(), b'w' * 8 + expected_word + b'w' * 48)
        self.assertEqual(src.read(0, 8), b'w' * 8)  # the fetched original
        self.assertEqual(src.read(16, 16), b'w' * 8 + expected_word)

    def test_zero_length_send(self):
        for qpt in (RC, UC, UD):
            for opcode in (e.IBV_WR_SEND, e.IBV_WR_SEND_WITH_IMM):
                with self.subTest(qp_type=base.QPT_NAMES[qpt], opcode=opcode):
                    a, b = self.pair(qpt)
                    dst = Buffer(self.pd, 64 + base.GRH_LEN, fill=0x5c)
                    b.post_recv(dst.sge(), wr_id=1)
                    a.post_send(base.send_wr(opcode, [], wr_id=2, imm_data=0x01020304,
                                             ud=self.ud(a, b, qpt)))
                    self.assertWC(a.poll()[0], wr_id=2, status=OK, opcode=e.IBV_WC_SEND)
                    grh = base.GRH_LEN if qpt == UD else 0
                    imm = opcode == e.IBV_WR_SEND_WITH_IMM
                    r = b.poll()[0]
                    self.assertWC(r, wr_id=1, status=OK, opcode=e.IBV_WC_RECV, byte_len=grh,
                                  wc_flags=(e.IBV_WC_WITH_IMM if imm else 0) |
                                  (e.IBV_WC_GRH if qpt == UD else 0))
                    if imm:
                        self.assertEqual(r.imm_data, 0x01020304)
                    self.assertEqual(dst.read(grh), b'\x5c' * (dst.size - grh))

    def test_zero_length_send_into_a_receive_without_sges(self):
        a, b = self.pair(RC)
        b.post_recv(wr_id=1)
        a.post_send(base.send_wr(e.IBV_WR_SEND, [], wr_id=2))
        self.assertWC(a.poll()[0], wr_id=2, status=OK)
        self.assertWC(b.poll()[0], wr_id=1, status=OK, byte_len=0)

    def test_zero_length_rdma_write_and_read(self):
        # IBA 9.4.3.1 / 9.4.4: a zero-length RDMA operation transfers nothing and checks no R_Key.
        for qpt, opcodes in ((RC, (e.IBV_WR_RDMA_WRITE, e.IBV_WR_RDMA_READ)),
                             (UC, (e.IBV_WR_RDMA_WRITE,))):
            for opcode in opcodes:
                with self.subTest(qp_type=base.QPT_NAMES[qpt], opcode=opcode):
                    a, b = self.pair(qpt)
                    a.post_send(base.send_wr(opcode, [], wr_id=3, rdma=(0, 0)))
                    self.assertWC(a.poll()[0], wr_id=3, status=OK)
                    self.assertNoCompletion(b)
