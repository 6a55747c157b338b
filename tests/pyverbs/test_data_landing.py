"""Small SENDs from another process travel inside their receive completion and are scattered
into the receive buffers by ibv_poll_cq (transport/cq_ring.h, docs/data-path.md): the bytes must
be in place, split across SGEs, with the UD GRH, on both sides of the size limit, and never
written once the receive buffer's MR is gone."""
import random
import unittest

import base
import pyverbs.enums as e
from agent import Agent
from base import Buffer
from pyverbs.mr import MR

tearDownModule = base.tear_down_module

RC, UD = e.IBV_QPT_RC, e.IBV_QPT_UD
OK = e.IBV_WC_SUCCESS
LANDING_BYTES = 88  # transport::kLandingBytes


def payload(n, seed):
    return random.Random(seed).randbytes(n)


class LandingTest(base.DataTestCase):

    def setUp(self):
        super().setUp()
        self.child = Agent()
        self.addCleanup(self.child.close)

    def link(self, qpt=RC):
        info = self.child.call('qp', qpt=qpt, size=4096)
        me = base.Peer(self.ctx, self.pd, qpt).connect(info['qpn'])
        self.child.call('connect', id=info['id'], remote_qpn=me.qpn, attrs={})
        return me, info

    def send_from_child(self, info, data, wr_id, ud_qpn=None):
        self.child.call('write', id=info['id'], offset=0, data=data.hex())
        self.child.call('post_send', id=info['id'], opcode=e.IBV_WR_SEND, wr_id=wr_id, offset=0,
                        length=len(data), ud_qpn=ud_qpn)
        [swc] = self.child.call('poll', id=info['id'])
        self.assertEqual((swc['wr_id'], swc['status']), (wr_id, OK))

    def test_sizes_around_the_landing_limit(self):
        me, info = self.link()
        buf = Buffer(self.pd, 256)
        for n in (0, 1, 8, LANDING_BYTES - 1, LANDING_BYTES, LANDING_BYTES + 1, 200):
            with self.subTest(bytes=n):
                buf.write(bytes(256))
                data = payload(n, n)
                me.post_recv(buf.sge(16, 200), wr_id=n)
                self.send_from_child(info, data, wr_id=1000 + n)
                self.assertWC(me.poll()[0], wr_id=n, status=OK, opcode=e.IBV_WC_RECV, byte_len=n)
                self.assertEqual(buf.read(16, n), data)
                self.assertEqual(buf.read(16 + n, 256 - 16 - n), bytes(256 - 16 - n))
                self.assertEqual(buf.read(0, 16), bytes(16))
        self.assertTrue(buf.guards_intact())

    def test_scatter_across_receive_sges(self):
        me, info = self.link()
        a, b, c = Buffer(self.pd, 16), Buffer(self.pd, 16), Buffer(self.pd, 64)
        with self.subTest('two SGEs: landed'):
            me.post_recv(a.sge(0, 5), b.sge(3, 13), wr_id=1)
            data = payload(12, 1)
            self.send_from_child(info, data, wr_id=2)
            self.assertWC(me.poll()[0], wr_id=1, status=OK, byte_len=12)
            self.assertEqual(a.read(0, 5) + b.read(3, 7), data)
            self.assertEqual(b.read(0, 3) + b.read(10, 6), bytes(9))
        with self.subTest('three SGEs: copied by the sender'):
            me.post_recv(a.sge(0, 2), b.sge(0, 2), c.sge(0, 64), wr_id=3)
            data = payload(30, 2)
            self.send_from_child(info, data, wr_id=4)
            self.assertWC(me.poll()[0], wr_id=3, status=OK, byte_len=30)
            self.assertEqual(a.read(0, 2) + b.read(0, 2) + c.read(0, 26), data)
        for x in (a, b, c):
            self.assertTrue(x.guards_intact())

    def test_ud_grh_and_payload_land_together(self):
        me, info = self.link(UD)
        buf = Buffer(self.pd, 128)
        me.post_recv(buf.sge(0, 128), wr_id=7)
        data = payload(24, 3)
        self.send_from_child(info, data, wr_id=8, ud_qpn=me.qpn)
        wc = me.poll()[0]
        self.assertWC(wc, wr_id=7, status=OK, byte_len=40 + 24, wc_flags=e.IBV_WC_GRH,
                      src_qp=info['qpn'])
        grh = buf.read(0, 40)
        self.assertEqual(grh[20] >> 4, 4)                   # IPv4 header in the last 20 bytes
        self.assertEqual(grh[32:36], bytes([127, 0, 0, 1]))  # source 127.0.0.1
        self.assertEqual(buf.read(40, 24), data)

    def test_mr_deregistered_before_the_poll_is_never_written(self):
        me, info = self.link()
        buf = Buffer(self.pd, 64)
        # A second MR over the same bytes: the receive names it, and it is gone before the poll.
        extra = MR(self.pd, 64, base.ACCESS_ALL, address=buf.addr)
        me.post_recv(buf.sge(0, 64, lkey=extra.lkey), wr_id=5)
        self.send_from_child(info, payload(16, 4), wr_id=6)
        extra.close()
        wc = me.poll()[0]
        self.assertWC(wc, wr_id=5, status=e.IBV_WC_LOC_PROT_ERR)
        self.assertEqual(buf.read(), bytes(64))
        # The receive error moved the QP to ERR (IBA 10.8.3).
        me.drain()
        self.assertEqual(me.qp.query(e.IBV_QP_STATE)[0].qp_state, e.IBV_QPS_ERR)


if __name__ == '__main__':
    unittest.main()
