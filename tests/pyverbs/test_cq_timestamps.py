"""Completion timestamps (ibv_create_cq_ex(3) IBV_WC_EX_WITH_COMPLETION_TIMESTAMP and _WALLCLOCK)
and the device clock they count (ibv_query_rt_values_ex(3), hca_core_clock): every completion
is stamped when it is produced, by whichever process produces it, on one clock the whole host
shares."""
import time
import unittest

import base
import pyverbs.enums as e
from agent import Agent
from base import Buffer
from pyverbs.cq import CQEX, CqInitAttrEx, PollCqAttr

tearDownModule = base.tear_down_module

RC = e.IBV_QPT_RC
OK = e.IBV_WC_SUCCESS
STAMPS = e.IBV_WC_EX_WITH_COMPLETION_TIMESTAMP | e.IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK


def device_clock(ctx):
    sec, nsec = ctx.query_rt_values_ex()
    return sec * 10**9 + nsec


def poll_ex(cq, n, timeout=base.POLL_TIMEOUT):
    """[(wr_id, status, opcode, device timestamp, wallclock ns)] of n completions."""
    out, deadline = [], time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        if cq.start_poll(PollCqAttr()) != 0:
            continue
        while True:
            out.append((cq.wr_id, cq.status, cq.read_opcode(), cq.read_timestamp(),
                        cq.read_completion_wallclock_ns()))
            if cq.poll_next() != 0:
                break
        cq.end_poll()
    if len(out) < n:
        raise AssertionError(f'{len(out)} of {n} completions within {timeout} s: {out}')
    return out


class TimestampTest(base.DataTestCase):

    def stamped_peer(self, flags=STAMPS):
        cq = CQEX(self.ctx, CqInitAttrEx(cqe=64, wc_flags=e.IBV_WC_EX_WITH_BYTE_LEN | flags))
        return base.Peer(self.ctx, self.pd, RC, cq=cq)

    def test_device_clock_is_monotonic_nanoseconds(self):
        sec, nsec = self.ctx.query_rt_values_ex()
        self.assertEqual(sec, 0)  # the raw counter, all in tv_nsec as hardware providers give it
        a = device_clock(self.ctx)
        time.sleep(0.01)
        b = device_clock(self.ctx)
        self.assertGreaterEqual(b - a, 10_000_000)  # at least the 10 ms slept, in ns
        self.assertLess(b - a, 10 * 10**9)

    def test_completions_carry_both_stamps_in_order(self):
        a = self.stamped_peer()
        b = self.stamped_peer()
        a.connect(b.qpn)
        b.connect(a.qpn)
        buf = Buffer(self.pd, 64)
        b.post_recv(buf.sge(32, 32), wr_id=1)
        t0, w0 = device_clock(self.ctx), time.time_ns()
        a.post_send(base.send_wr(e.IBV_WR_SEND, [buf.sge(0, 8)], wr_id=2))
        a.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [buf.sge(0, 8)], wr_id=3,
                                 rdma=(buf.rkey, buf.addr + 16)))
        [send, write] = poll_ex(a.cq, 2)
        [recv] = poll_ex(b.cq, 1)
        t1, w1 = device_clock(self.ctx), time.time_ns()
        for wr_id, status, _, ts, wall in (send, write, recv):
            with self.subTest(wr_id=wr_id):
                self.assertEqual(status, OK)
                self.assertTrue(t0 <= ts <= t1, (t0, ts, t1))
                self.assertTrue(w0 <= wall <= w1, (w0, wall, w1))
        self.assertLessEqual(send[3], write[3])  # produced in posting order

    def test_stamped_by_the_producing_process(self):
        # The receive completion is written by the sender in another process: its stamp is
        # still on this host's device clock.
        child = Agent()
        self.addCleanup(child.close)
        me = self.stamped_peer(e.IBV_WC_EX_WITH_COMPLETION_TIMESTAMP)
        info = child.call('qp', qpt=RC, size=64)
        me.connect(info['qpn'])
        child.call('connect', id=info['id'], remote_qpn=me.qpn, attrs={})
        buf = Buffer(self.pd, 64)
        me.post_recv(buf.sge(), wr_id=5)
        t0 = device_clock(self.ctx)
        child.call('post_send', id=info['id'], opcode=e.IBV_WR_SEND, wr_id=6, offset=0, length=8)
        self.assertEqual(child.call('poll', id=info['id'])[0]['status'], OK)
        t1 = device_clock(self.ctx)
        [(wr_id, status, opcode, ts, _)] = poll_ex(me.cq, 1)
        self.assertEqual((wr_id, status, opcode), (5, OK, e.IBV_WC_RECV))
        self.assertTrue(t0 <= ts <= t1, (t0, ts, t1))


if __name__ == '__main__':
    unittest.main()
