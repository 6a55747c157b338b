"""Completion channels with real completions (ibv_req_notify_cq(3), ibv_get_cq_event(3)): an armed
CQ makes the channel fd readable once per arming, and solicited-only arming wakes only for
solicited messages."""
import select

import base
import pyverbs.enums as e
from base import Buffer
from pyverbs.cq import CQ

tearDownModule = base.tear_down_module

RC, UD = e.IBV_QPT_RC, e.IBV_QPT_UD
OK = e.IBV_WC_SUCCESS
WAKE = 5.0     # bound on a wake-up that must come
QUIET = 0.1    # how long a channel that must stay quiet is watched


def readable(fd, timeout):
    return select.select([fd], [], [], timeout)[0] == [fd]


class ChannelTest(base.DataTestCase):

    def setUp(self):
        super().setUp()
        self.ch, self.fd = base.comp_channel(self.ctx)
        self.src, self.dst = Buffer(self.pd, 4096), Buffer(self.pd, 4096)

    def pair(self, qpt=RC, channel_side='b'):
        a = base.Peer(self.ctx, self.pd, qpt, channel=self.ch if channel_side == 'a' else None)
        b = base.Peer(self.ctx, self.pd, qpt, channel=self.ch if channel_side == 'b' else None)
        a.connect(b.qpn)
        b.connect(a.qpn)
        return a, b

    def send(self, a, b, flags=e.IBV_SEND_SIGNALED, opcode=e.IBV_WR_SEND, wr_id=1, length=16):
        ud = (a.ah(), b.qpn, base.QKEY) if a.qpt == UD else None
        rdma = (self.dst.rkey, self.dst.addr + 2048) if opcode == e.IBV_WR_RDMA_WRITE_WITH_IMM \
            else None
        a.post_send(base.send_wr(opcode, [self.src.sge(0, length)], wr_id=wr_id, flags=flags,
                                 imm_data=0x11, ud=ud, rdma=rdma))

    def get_event(self, cq):
        self.assertTrue(readable(self.fd, WAKE), 'no completion event')
        self.ch.get_cq_event(cq)  # pyverbs checks that the event names this CQ
        cq.ack_events(1)

    def test_armed_cq_wakes_the_channel_once(self):
        a, b = self.pair()
        self.assertFalse(readable(self.fd, 0))
        b.cq.req_notify(0)
        self.assertFalse(readable(self.fd, QUIET), 'readable before any completion')
        b.post_recv(self.dst.sge(0, 64), wr_id=10)
        self.assertFalse(readable(self.fd, QUIET), 'a posted receive is no completion')
        self.src.write(b'wake up!' * 2)
        self.send(a, b)
        self.get_event(b.cq)
        self.assertWC(b.poll()[0], wr_id=10, status=OK, byte_len=16)
        self.assertEqual(self.dst.read(0, 16), b'wake up!' * 2)
        self.assertFalse(readable(self.fd, 0), 'still readable after the event was taken')
        # Not re-armed: the next completion raises no event.
        b.post_recv(self.dst.sge(0, 64), wr_id=11)
        self.send(a, b, wr_id=2)
        self.assertWC(b.poll()[0], wr_id=11, status=OK)
        self.assertFalse(readable(self.fd, QUIET), 'an event without arming')
        # Re-armed: the next one does.
        b.cq.req_notify(0)
        b.post_recv(self.dst.sge(0, 64), wr_id=12)
        self.send(a, b, wr_id=3)
        self.get_event(b.cq)
        self.assertWC(b.poll()[0], wr_id=12, status=OK)
        self.assertEqual(len(a.poll(3)), 3)

    def test_send_completion_wakes_the_senders_channel(self):
        a, b = self.pair(channel_side='a')
        a.cq.req_notify(0)
        b.post_recv(self.dst.sge(0, 64), wr_id=1)
        self.send(a, b, wr_id=5)
        self.get_event(a.cq)
        self.assertWC(a.poll()[0], wr_id=5, status=OK, opcode=e.IBV_WC_SEND)

    def test_completion_already_in_the_cq_before_arming_raises_no_event(self):
        # ibv_req_notify_cq(3): the event is for the *next* completion.
        a, b = self.pair()
        b.post_recv(self.dst.sge(0, 64), wr_id=1)
        self.send(a, b)
        # The RC send completes once the message is delivered: the receive completion is in
        # b's CQ (unpolled) before b arms it.
        self.assertWC(a.poll()[0], wr_id=1, status=OK)
        b.cq.req_notify(0)
        self.assertFalse(readable(self.fd, QUIET))
        self.assertWC(b.poll()[0], wr_id=1, status=OK)

    def test_solicited_only_wakes_for_solicited_messages(self):
        for qpt in (RC, UD):
            with self.subTest(qp_type=base.QPT_NAMES[qpt]):
                a, b = self.pair(qpt)
                for k in range(3):
                    b.post_recv(self.dst.sge(k * 128, 128), wr_id=20 + k)
                b.cq.req_notify(1)
                self.send(a, b, wr_id=30)  # not solicited
                self.assertWC(b.poll()[0], wr_id=20, status=OK)
                self.assertFalse(readable(self.fd, QUIET), 'woken by an unsolicited message')
                self.send(a, b, flags=e.IBV_SEND_SIGNALED | e.IBV_SEND_SOLICITED, wr_id=31,
                          opcode=e.IBV_WR_SEND_WITH_IMM)
                self.get_event(b.cq)
                self.assertWC(b.poll()[0], wr_id=21, status=OK, imm_data=0x11)
                # Arming for any completion after that wakes for an unsolicited one.
                b.cq.req_notify(0)
                self.send(a, b, wr_id=32)
                self.get_event(b.cq)
                self.assertWC(b.poll()[0], wr_id=22, status=OK)
                self.assertEqual([w.wr_id for w in a.poll(3)], [30, 31, 32])

    def test_solicited_rdma_write_with_imm_wakes_solicited_only(self):
        a, b = self.pair()
        b.post_recv(wr_id=40)
        b.post_recv(wr_id=41)
        b.cq.req_notify(1)
        self.send(a, b, opcode=e.IBV_WR_RDMA_WRITE_WITH_IMM, wr_id=1)
        self.assertWC(b.poll()[0], wr_id=40, status=OK, opcode=e.IBV_WC_RECV_RDMA_WITH_IMM)
        self.assertFalse(readable(self.fd, QUIET))
        self.send(a, b, opcode=e.IBV_WR_RDMA_WRITE_WITH_IMM, wr_id=2,
                  flags=e.IBV_SEND_SIGNALED | e.IBV_SEND_SOLICITED)
        self.get_event(b.cq)
        self.assertWC(b.poll()[0], wr_id=41, status=OK, opcode=e.IBV_WC_RECV_RDMA_WITH_IMM)

    def test_two_cqs_on_one_channel(self):
        a, b = self.pair()
        cq2 = CQ(self.ctx, 16, None, self.ch, 0)
        c = base.Peer(self.ctx, self.pd, RC)
        d = base.Peer(self.ctx, self.pd, RC, cq=cq2)
        d.connect(c.qpn)
        c.connect(d.qpn)
        b.cq.req_notify(0)
        cq2.req_notify(0)
        d.post_recv(self.dst.sge(0, 64), wr_id=50)
        self.send(c, d, wr_id=51)
        self.get_event(cq2)  # the event names cq2, not b's CQ
        self.assertWC(d.poll()[0], wr_id=50, status=OK)
        self.assertFalse(readable(self.fd, QUIET))
        b.post_recv(self.dst.sge(0, 64), wr_id=52)
        self.send(a, b, wr_id=53)
        self.get_event(b.cq)
        self.assertWC(b.poll()[0], wr_id=52, status=OK)


# The owner of a small receive CQ blocks in ibv_get_async_event (at most 5 s: SIGALRM ends it)
# while another process sends it more UD messages than the CQ holds.
CQ_OVERRUN_OWNER = '''
import signal
import sys
import base
import pyverbs.enums as e
from pyverbs.cq import CQ
from pyverbs.pd import PD
ctx = base.open_context()
pd = PD(ctx)
peer = base.Peer(ctx, pd, e.IBV_QPT_UD, cqe=2).connect()
buf = base.Buffer(pd, 8 * 128)
for k in range(8):
    peer.post_recv(buf.sge(128 * k, 128), wr_id=k)
print('qpn', peer.qpn, 'cqe', peer.cq.cqe, flush=True)
signal.alarm(5)  # default action: the process ends if no event comes
ev = ctx.get_async_event()
print('event', ev.event_type, flush=True)
ev.ack()
sys.stdin.readline()  # the sender is done
print('polled', len(base.drain(peer.cq)), flush=True)
'''


class CqOverrunTest(base.DataTestCase):

    def test_a_peer_overrunning_a_cq_raises_cq_err_at_its_owner(self):
        # IBA 11.4.2.1 / ibv_get_async_event(3): a completion that finds its CQ full is lost and
        # the CQ is in error; its owner hears IBV_EVENT_CQ_ERR even while blocked waiting for it.
        owner = base.start_python(CQ_OVERRUN_OWNER)
        self.addCleanup(base.stop_child, owner)
        lines = base.LineReader(owner)
        self.addCleanup(lines.close)
        _, qpn, _, cqe = lines.readline().split()
        qpn, cqe = int(qpn), int(cqe)
        self.assertLess(cqe, 8)
        me = base.Peer(self.ctx, self.pd, UD).connect()
        src = Buffer(self.pd, 64)
        for k in range(8):
            me.post_send(base.send_wr(e.IBV_WR_SEND, [src.sge(0, 8)], wr_id=k, ud=(me.ah(), qpn, base.QKEY)))
        self.assertEqual([w.status for w in me.poll(8)], [OK] * 8)  # UD: the sender never knows
        self.assertEqual(lines.readline(), f'event {e.IBV_EVENT_CQ_ERR}')
        owner.stdin.write(b'done\n')
        self.assertEqual(lines.readline(), f'polled {cqe}')  # what fitted is there; the rest is lost
