"""UC and UD data paths: UC SEND/WRITE (with immediate), UD SEND with the GRH area, Q_Keys, the
one-packet limit of UD, and the unacknowledged nature of both (errors at the responder are not
reported to the sender)."""
import ipaddress
import random
import socket

import base
import pyverbs.enums as e
from base import Buffer
from pyverbs.qp import QPAttr

tearDownModule = base.tear_down_module

UC, UD = e.IBV_QPT_UC, e.IBV_QPT_UD
OK = e.IBV_WC_SUCCESS
GRH = base.GRH_LEN
LOOPBACK4 = bytes([127, 0, 0, 1])


def payload(n, seed=1):
    return random.Random(seed).randbytes(n)


def state(peer):
    return base.STATE_NAMES[peer.qp.query(e.IBV_QP_STATE)[0].qp_state]


class SendQueueErrorMixin:
    """IBA 10.3.1 / 10.8.3: a UC or UD send completion in error moves the QP to SQE, not ERR: what
    is posted next is flushed, receives go on, and ibv_modify_qp SQE -> RTS resumes sending."""

    def check_sqe(self, fail, send_ok, receive_ok):
        fail(wr_id=1)
        self.assertNotEqual(self.a.poll()[0].status, OK)
        self.assertEqual(state(self.a), 'SQE')
        send_ok(wr_id=2)
        self.assertWC(self.a.poll()[0], wr_id=2, status=e.IBV_WC_WR_FLUSH_ERR)
        receive_ok()  # the receive queue still works
        self.a.qp.modify(QPAttr(qp_state=e.IBV_QPS_RTS, cur_qp_state=e.IBV_QPS_SQE), e.IBV_QP_STATE)
        self.assertEqual(state(self.a), 'RTS')
        send_ok(wr_id=3)
        self.assertWC(self.a.poll()[0], wr_id=3, status=OK)


class UcTest(SendQueueErrorMixin, base.DataTestCase):

    def setUp(self):
        super().setUp()
        self.a, self.b = base.connected_pair(self.ctx, self.pd, UC)
        self.src, self.dst = Buffer(self.pd, 4096), Buffer(self.pd, 4096)

    def tearDown(self):
        try:
            self.assertTrue(self.src.guards_intact() and self.dst.guards_intact(),
                            'a write landed outside a registered region')
        finally:
            super().tearDown()

    def test_send_and_send_with_imm(self):
        for k, (opcode, imm) in enumerate(((e.IBV_WR_SEND, 0),
                                           (e.IBV_WR_SEND_WITH_IMM, socket.htonl(0xa1b2c3d4)))):
            with self.subTest(opcode=opcode):
                data = payload(2500, k)
                self.src.write(data)
                self.b.post_recv(self.dst.sge(), wr_id=10 + k)
                self.a.post_send(base.send_wr(opcode, [self.src.sge(0, 2500)], wr_id=20 + k,
                                              imm_data=imm))
                self.assertWC(self.a.poll()[0], wr_id=20 + k, status=OK, opcode=e.IBV_WC_SEND,
                              qp_num=self.a.qpn)
                r = self.b.poll()[0]
                self.assertWC(r, wr_id=10 + k, status=OK, opcode=e.IBV_WC_RECV, byte_len=2500,
                              qp_num=self.b.qpn, wc_flags=e.IBV_WC_WITH_IMM if imm else 0)
                if imm:
                    self.assertEqual(socket.ntohl(r.imm_data), 0xa1b2c3d4)
                self.assertEqual(self.dst.read(0, 2500), data)

    def test_rdma_write(self):
        data = payload(3000, 3)
        self.src.write(data)
        self.a.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [self.src.sge(0, 3000)], wr_id=1,
                                      rdma=(self.dst.rkey, self.dst.addr + 96)))
        self.assertWC(self.a.poll()[0], wr_id=1, status=OK, opcode=e.IBV_WC_RDMA_WRITE,
                      qp_num=self.a.qpn)
        self.assertNoCompletion(self.b)
        self.assertEqual(self.dst.read(96, 3000), data)
        self.assertEqual(self.dst.read(0, 96) + self.dst.read(3096), bytes(4096 - 3000))

    def test_rdma_write_with_imm(self):
        imm = socket.htonl(0x00c0ffee)
        data = payload(64, 4)
        self.src.write(data)
        self.b.post_recv(wr_id=5)
        self.a.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE_WITH_IMM, [self.src.sge(0, 64)],
                                      wr_id=6, imm_data=imm,
                                      rdma=(self.dst.rkey, self.dst.addr + 8)))
        self.assertWC(self.a.poll()[0], wr_id=6, status=OK, opcode=e.IBV_WC_RDMA_WRITE)
        self.assertWC(self.b.poll()[0], wr_id=5, status=OK, opcode=e.IBV_WC_RECV_RDMA_WITH_IMM,
                      byte_len=64, qp_num=self.b.qpn, wc_flags=e.IBV_WC_WITH_IMM, imm_data=imm)
        self.assertEqual(self.dst.read(8, 64), data)

    def test_send_without_a_receive_is_dropped(self):
        # IBA 9.8.3: a UC responder without a receive WQE drops the message; the sender, which
        # gets no acknowledgement, completes successfully.
        self.src.write(b'first message')
        self.a.post_send(base.send_wr(e.IBV_WR_SEND, [self.src.sge(0, 13)], wr_id=1))
        self.assertWC(self.a.poll()[0], wr_id=1, status=OK)
        self.assertNoCompletion(self.b)
        # Nothing was kept for later: a receive posted now sees only the next message.
        self.b.post_recv(self.dst.sge(), wr_id=2)
        self.assertNoCompletion(self.b)
        self.src.write(b'second')
        self.a.post_send(base.send_wr(e.IBV_WR_SEND, [self.src.sge(0, 6)], wr_id=3))
        self.assertWC(self.a.poll()[0], wr_id=3, status=OK)
        self.assertWC(self.b.poll()[0], wr_id=2, status=OK, byte_len=6)
        self.assertEqual(self.dst.read(0, 13), b'second' + bytes(7))

    def test_write_with_imm_without_a_receive_is_dropped(self):
        self.src.write(b'data')
        self.a.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE_WITH_IMM, [self.src.sge(0, 4)],
                                      wr_id=1, imm_data=1, rdma=(self.dst.rkey, self.dst.addr)))
        self.assertWC(self.a.poll()[0], wr_id=1, status=OK)
        self.assertNoCompletion(self.b)
        self.assertEqual(self.a.qp.query(e.IBV_QP_STATE)[0].qp_state, e.IBV_QPS_RTS)

    # UC has no responses (IBA 9.8.3) and ibv_poll_cq(3) names REM_ACCESS_ERR and REM_INV_REQ_ERR
    # "Relevant for RC QPs": an error at a UC responder drops the message; the requester completes
    # its WR successfully and stays in RTS.
    def test_rdma_write_with_a_bad_rkey_is_not_reported_to_the_sender(self):
        before = self.dst.snapshot()
        self.src.write(b'\x11' * 64)
        self.a.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [self.src.sge(0, 64)], wr_id=1,
                                      rdma=(self.dst.rkey ^ 0x5a5a00, self.dst.addr)))
        self.assertEqual(self.dst.snapshot(), before)
        self.assertWC(self.a.poll()[0], wr_id=1, status=OK)
        self.assertEqual(self.a.qp.query(e.IBV_QP_STATE)[0].qp_state, e.IBV_QPS_RTS)

    def test_rdma_write_out_of_bounds_is_not_reported_to_the_sender(self):
        before = self.dst.snapshot()
        self.a.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [self.src.sge(0, 64)], wr_id=1,
                                      rdma=(self.dst.rkey, self.dst.addr + 4096 - 63)))
        self.assertEqual(self.dst.snapshot(), before)
        self.assertWC(self.a.poll()[0], wr_id=1, status=OK)

    def test_send_too_long_for_the_receive_is_not_reported_to_the_sender(self):
        small = Buffer(self.pd, 16)
        self.b.post_recv(small.sge(), wr_id=1)
        self.a.post_send(base.send_wr(e.IBV_WR_SEND, [self.src.sge(0, 100)], wr_id=2))
        self.assertWC(self.a.poll()[0], wr_id=2, status=OK)
        self.assertTrue(small.guards_intact())
        self.assertEqual(self.a.qp.query(e.IBV_QP_STATE)[0].qp_state, e.IBV_QPS_RTS)


    def test_a_local_send_error_enters_sqe_and_receives_go_on(self):
        def fail(wr_id):  # an SGE with a key that is no MR: IBV_WC_LOC_PROT_ERR
            self.a.post_send(base.send_wr(e.IBV_WR_SEND, [self.src.sge(0, 8, lkey=0xdead00)], wr_id=wr_id))

        def send_ok(wr_id):
            self.b.post_recv(self.dst.sge(0, 64), wr_id=100 + wr_id)
            self.a.post_send(base.send_wr(e.IBV_WR_SEND, [self.src.sge(0, 8)], wr_id=wr_id))

        def receive_ok():
            self.a.post_recv(self.dst.sge(64, 64), wr_id=50)
            self.b.post_send(base.send_wr(e.IBV_WR_SEND, [self.src.sge(0, 8)], wr_id=51))
            self.assertWC(self.b.poll()[0], wr_id=51, status=OK)
            self.assertWC(self.a.poll()[0], wr_id=50, status=OK, opcode=e.IBV_WC_RECV)
        self.check_sqe(fail, send_ok, receive_ok)
        self.b.drain()


class UdTest(SendQueueErrorMixin, base.DataTestCase):

    def setUp(self):
        super().setUp()
        self.a, self.b = base.connected_pair(self.ctx, self.pd, UD)
        self.ah = self.a.ah()
        self.src, self.dst = Buffer(self.pd, 8192), Buffer(self.pd, 8192)

    def tearDown(self):
        try:
            self.assertTrue(self.src.guards_intact() and self.dst.guards_intact(),
                            'a write landed outside a registered region')
        finally:
            super().tearDown()

    def send(self, length, wr_id=1, opcode=e.IBV_WR_SEND, imm=0, qkey=base.QKEY, ah=None,
             qpn=None, src_offset=0):
        self.a.post_send(base.send_wr(opcode, [self.src.sge(src_offset, length)], wr_id=wr_id,
                                      imm_data=imm,
                                      ud=(ah or self.ah, self.b.qpn if qpn is None else qpn, qkey)))

    def test_send_and_send_with_imm(self):
        for k, (opcode, imm) in enumerate(((e.IBV_WR_SEND, 0),
                                           (e.IBV_WR_SEND_WITH_IMM, socket.htonl(0x0badf00d)))):
            with self.subTest(opcode=opcode):
                data = payload(1500, k)
                self.src.write(data)
                self.b.post_recv(self.dst.sge(0, GRH + 1500), wr_id=30 + k)
                self.send(1500, wr_id=40 + k, opcode=opcode, imm=imm)
                self.assertWC(self.a.poll()[0], wr_id=40 + k, status=OK, opcode=e.IBV_WC_SEND,
                              qp_num=self.a.qpn)
                r = self.b.poll()[0]
                # ibv_poll_cq(3): byte_len counts the 40 GRH bytes; src_qp names the sender.
                self.assertWC(r, wr_id=30 + k, status=OK, opcode=e.IBV_WC_RECV,
                              byte_len=GRH + 1500, qp_num=self.b.qpn, src_qp=self.a.qpn,
                              wc_flags=e.IBV_WC_GRH | (e.IBV_WC_WITH_IMM if imm else 0))
                if imm:
                    self.assertEqual(socket.ntohl(r.imm_data), 0x0badf00d)
                self.assertEqual(self.dst.read(GRH, 1500), data)

    def test_grh_of_an_ipv4_gid_holds_an_ipv4_header(self):
        # GID index 1 is ::ffff:127.0.0.1. For RoCE v2 over IPv4 the last 20 bytes of the GRH
        # area hold the IPv4 header (ibv_post_recv(3)).
        self.assertEqual(ipaddress.IPv6Address(base.gid_address(self.ctx.query_gid(base.PORT, 1)))
                         .ipv4_mapped, ipaddress.IPv4Address('127.0.0.1'))
        self.src.write(payload(100, 5))
        self.b.post_recv(self.dst.sge(0, GRH + 100), wr_id=1)
        self.send(100)
        # sl carries the L3 header type on RoCE, as mlx5 reports it (2: IPv4); UCX's UD
        # transport reads it to find the destination address in the GRH area.
        self.assertWC(self.b.poll()[0], wr_id=1, status=OK, wc_flags=e.IBV_WC_GRH,
                      byte_len=GRH + 100, sl=2)
        ip = self.dst.read(20, 20)
        self.assertEqual(ip[0], 0x45, 'version 4, IHL 5')
        self.assertEqual(ip[9], socket.IPPROTO_UDP)
        self.assertEqual(ip[12:16], LOOPBACK4, 'source address')
        self.assertEqual(ip[16:20], LOOPBACK4, 'destination address')
        self.assertEqual(self.dst.read(GRH, 100), payload(100, 5))

    def test_grh_of_an_ipv6_gid_holds_an_ipv6_header(self):
        # ::1's place in the GID table depends on the namespace's other addresses.
        loopback6 = ipaddress.IPv6Address('::1')
        index = next((i for i in range(16)
                      if base.gid_address(self.ctx.query_gid(base.PORT, i)) == loopback6), None)
        self.assertIsNotNone(index, '::1 is in the GID table')
        gid3 = loopback6
        ah6 = self.a.ah(sgid_index=index, dgid_index=index)
        self.src.write(payload(64, 6))
        self.b.post_recv(self.dst.sge(0, GRH + 64), wr_id=1)
        self.send(64, ah=ah6)
        self.assertWC(self.b.poll()[0], wr_id=1, status=OK, wc_flags=e.IBV_WC_GRH,
                      byte_len=GRH + 64, src_qp=self.a.qpn, sl=1)  # 1: IPv6 (see above)
        grh = self.dst.read(0, GRH)
        self.assertEqual(grh[0] >> 4, 6, 'IP version 6')
        self.assertEqual(grh[6], socket.IPPROTO_UDP, 'next header')
        self.assertEqual(ipaddress.IPv6Address(grh[8:24]), gid3, 'source GID')
        self.assertEqual(ipaddress.IPv6Address(grh[24:40]), gid3, 'destination GID')
        self.assertEqual(self.dst.read(GRH, 64), payload(64, 6))

    def test_qkey_mismatch_drops_the_datagram(self):
        # IBA 10.2.5 / 9.6.3: the receiver silently drops it; the sender knows nothing.
        self.src.write(b'secret')
        self.b.post_recv(self.dst.sge(0, GRH + 64), wr_id=1)
        self.send(6, wr_id=2, qkey=base.QKEY + 1)
        self.assertWC(self.a.poll()[0], wr_id=2, status=OK)
        self.assertNoCompletion(self.b)
        self.assertEqual(self.dst.read(), bytes(8192))
        # The receive was not consumed: the right Q_Key reaches it.
        self.send(6, wr_id=3)
        self.assertWC(self.a.poll()[0], wr_id=3, status=OK)
        self.assertWC(self.b.poll()[0], wr_id=1, status=OK, byte_len=GRH + 6)
        self.assertEqual(self.dst.read(GRH, 6), b'secret')

    def test_qkey_with_the_high_bit_uses_the_qps_own_qkey(self):
        # IBA 10.2.5: a WR Q_Key with the most significant bit set means "the QP's Q_Key".
        other = base.Peer(self.ctx, self.pd, UD).connect(qkey=0x22222222)
        self.b.post_recv(self.dst.sge(0, GRH + 64), wr_id=1)
        other.post_recv(self.dst.sge(4096, GRH + 64), wr_id=2)
        self.src.write(b'high bit')
        self.send(8, wr_id=3, qkey=0x80000000)                    # a's Q_Key == b's
        self.send(8, wr_id=4, qkey=0x80000000, qpn=other.qpn)     # a's Q_Key != other's
        self.assertEqual([w.status for w in self.a.poll(2)], [OK, OK])
        self.assertWC(self.b.poll()[0], wr_id=1, status=OK, byte_len=GRH + 8)
        self.assertEqual(self.dst.read(GRH, 8), b'high bit')
        self.assertNoCompletion(other)

    def test_send_to_a_missing_qp_is_lost_silently(self):
        gone = base.Peer(self.ctx, self.pd, UD)
        qpn = gone.qpn
        gone.qp.close()
        self.send(16, wr_id=1, qpn=qpn)
        self.assertWC(self.a.poll()[0], wr_id=1, status=OK)
        self.send(16, wr_id=2, qpn=0xfffff0)
        self.assertWC(self.a.poll()[0], wr_id=2, status=OK)

    def test_send_without_a_receive_is_dropped(self):
        self.send(16, wr_id=1)
        self.assertWC(self.a.poll()[0], wr_id=1, status=OK)
        self.assertNoCompletion(self.b)
        self.b.post_recv(self.dst.sge(0, GRH + 16), wr_id=2)
        self.assertNoCompletion(self.b)

    def test_one_sender_many_receivers(self):
        peers = [base.Peer(self.ctx, self.pd, UD).connect() for _ in range(3)]
        for k, p in enumerate(peers):
            p.post_recv(self.dst.sge(k * 256, GRH + 32), wr_id=k)
            self.src.write(bytes([k + 1]) * 32, k * 32)
            self.send(32, wr_id=10 + k, qpn=p.qpn, src_offset=k * 32)
        self.assertEqual([w.wr_id for w in self.a.poll(3)], [10, 11, 12])
        for k, p in enumerate(peers):
            self.assertWC(p.poll()[0], wr_id=k, status=OK, src_qp=self.a.qpn, qp_num=p.qpn)
            self.assertEqual(self.dst.read(k * 256 + GRH, 32), bytes([k + 1]) * 32)

    def test_message_of_the_mtu_fits(self):
        data = payload(base.UD_MAX_MSG, 7)
        self.src.write(data)
        self.b.post_recv(self.dst.sge(0, GRH + base.UD_MAX_MSG), wr_id=1)
        self.send(base.UD_MAX_MSG, wr_id=2)
        self.assertWC(self.a.poll()[0], wr_id=2, status=OK)
        self.assertWC(self.b.poll()[0], wr_id=1, status=OK, byte_len=GRH + base.UD_MAX_MSG)
        self.assertEqual(self.dst.read(GRH, base.UD_MAX_MSG), data)

    def test_message_above_the_mtu_is_a_local_length_error(self):
        # IBA 9.6.3: a UD message is one packet; a longer one fails locally (IBV_WC_LOC_LEN_ERR).
        self.b.post_recv(self.dst.sge(0, 8192), wr_id=1)
        self.send(base.UD_MAX_MSG + 1, wr_id=2)
        self.assertWC(self.a.poll()[0], wr_id=2, status=e.IBV_WC_LOC_LEN_ERR)
        self.assertNoCompletion(self.b)
        self.assertEqual(self.dst.read(), bytes(8192))

    def test_receive_too_small_is_not_reported_to_the_sender(self):
        # UD has no responses: the sender completes successfully whatever the receiver does; the
        # receiver's WQE completes with IBV_WC_LOC_LEN_ERR and nothing lands outside its buffer.
        small = Buffer(self.pd, GRH + 10)
        self.b.post_recv(small.sge(), wr_id=1)
        self.send(100, wr_id=2)
        self.assertWC(self.a.poll()[0], wr_id=2, status=OK)
        self.assertWC(self.b.poll()[0], wr_id=1, status=e.IBV_WC_LOC_LEN_ERR)
        self.assertTrue(small.guards_intact())

    def test_a_local_send_error_enters_sqe_and_receives_go_on(self):
        def fail(wr_id):  # longer than one packet: IBV_WC_LOC_LEN_ERR (IBA 9.6.3)
            self.send(base.UD_MAX_MSG + 1, wr_id=wr_id)

        def send_ok(wr_id):
            self.b.post_recv(self.dst.sge(0, GRH + 64), wr_id=100 + wr_id)
            self.send(8, wr_id=wr_id)

        def receive_ok():
            self.a.post_recv(self.dst.sge(4096, GRH + 64), wr_id=50)
            self.b.post_send(base.send_wr(e.IBV_WR_SEND, [self.src.sge(0, 8)], wr_id=51,
                                          ud=(self.b.ah(), self.a.qpn, base.QKEY)))
            self.assertWC(self.b.poll()[0], wr_id=51, status=OK)
            self.assertWC(self.a.poll()[0], wr_id=50, status=OK, opcode=e.IBV_WC_RECV)
        self.check_sqe(fail, send_ok, receive_ok)
        self.b.drain()
