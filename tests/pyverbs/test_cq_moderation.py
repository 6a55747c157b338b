"""CQ moderation (issue 13 item 7; ibv_modify_cq(3) with IBV_CQ_MODERATE): an armed CQ's event
on its completion channel waits for cq_count completions or cq_period microseconds after the
first of them, whichever comes first (0 turns either limit off; both 0: no moderation). Polling
is never delayed: every completion is visible at once, only the channel's wake-up waits.
cq_mod_caps as mlx5 (count 65535, period 4095 us); a bad attr_mask or a period above the caps
-> EINVAL and a log line.

pyverbs does not wrap ibv_modify_cq: it is called through its verbs_context slot with the
struct ibv_cq * that pyverbs keeps inside its CQ object (raw.pyverbs_pointer). No assertion is
on time: a wake-up that must come is waited for up to WAKE seconds, and "no wake-up" is watched
for QUIET seconds, as test_data_events does."""
import ctypes
import errno
import select

import base
import pyverbs.enums as e
import raw
from base import Buffer

tearDownModule = base.tear_down_module

RC = e.IBV_QPT_RC
OK = e.IBV_WC_SUCCESS
WAKE = 5.0
QUIET = 0.1
VCTX_MODIFY_CQ = 136  # offsetof(struct verbs_context, modify_cq), rdma-core 44 x86-64
CQ_MODERATE = 1       # IBV_CQ_MODERATE
CQ_ATTR_RESERVED = 2  # IBV_CQ_ATTR_RESERVED


class IbvModifyCqAttr(ctypes.Structure):
    _fields_ = [('attr_mask', ctypes.c_uint32), ('cq_count', ctypes.c_uint16),
                ('cq_period', ctypes.c_uint16)]


def cq_pointer(cq):
    return raw.pyverbs_pointer(cq, 28, cq.cqe)  # struct ibv_cq { context; channel; cq_context; handle; cqe; }


def modify_cq(cq_ptr, count, period, mask=CQ_MODERATE):
    """ibv_modify_cq(3): its return value (0 or an errno)."""
    ctx = ctypes.c_void_p.from_address(cq_ptr).value
    attr = IbvModifyCqAttr(mask, count, period)
    return raw.verbs_op(ctx, VCTX_MODIFY_CQ, ctypes.c_int, ctypes.c_void_p,
                        ctypes.POINTER(IbvModifyCqAttr))(cq_ptr, ctypes.byref(attr))


def readable(fd, timeout):
    return select.select([fd], [], [], timeout)[0] == [fd]


class ModerationTest(base.DataTestCase):

    def setUp(self):
        super().setUp()
        self.ch, self.fd = base.comp_channel(self.ctx)
        self.a = base.Peer(self.ctx, self.pd, RC)
        self.b = base.Peer(self.ctx, self.pd, RC, channel=self.ch)
        self.a.connect(self.b.qpn)
        self.b.connect(self.a.qpn)
        self.cq = cq_pointer(self.b.cq)
        self.src, self.dst = Buffer(self.pd, 4096), Buffer(self.pd, 4096)

    def send(self, n, first_id=1):
        for i in range(n):
            self.src.write(bytes([first_id + i]) * 16, 16 * i)
            self.b.post_recv(self.dst.sge(16 * (first_id + i), 16), wr_id=first_id + i)
            self.a.post_send(base.send_wr(e.IBV_WR_SEND, [self.src.sge(16 * i, 16)], wr_id=first_id + i))
        self.assertEqual([w.status for w in self.a.poll(n)], [OK] * n)

    def get_event(self):
        self.assertTrue(readable(self.fd, WAKE), 'no completion event')
        self.ch.get_cq_event(self.b.cq)
        self.b.cq.ack_events(1)

    def test_caps(self):
        caps = self.ctx.query_device_ex().cq_mod_caps
        self.assertEqual((caps.max_cq_count, caps.max_cq_period), (65535, 4095))

    def test_event_waits_for_the_count(self):
        self.assertEqual(modify_cq(self.cq, 3, 0), 0)
        self.b.cq.req_notify(0)
        self.send(2)
        # Both completions are there to poll; the wake-up waits for the third.
        wcs = self.b.poll(2)
        self.assertEqual([(w.wr_id, w.status, w.byte_len) for w in wcs], [(1, OK, 16), (2, OK, 16)])
        self.assertFalse(readable(self.fd, QUIET), 'woken before cq_count completions')
        self.send(1, first_id=3)
        self.get_event()
        self.assertWC(self.b.poll()[0], wr_id=3, status=OK, byte_len=16)
        self.assertEqual(self.dst.read(16, 48), b'\x01' * 16 + b'\x02' * 16 + b'\x03' * 16)
        # The next arming counts again from zero.
        self.b.cq.req_notify(0)
        self.send(2, first_id=4)
        self.assertFalse(readable(self.fd, QUIET), 'the count was not restarted')
        self.send(1, first_id=6)
        self.get_event()
        self.assertEqual(len(self.b.poll(3)), 3)

    def test_period_ends_the_wait(self):
        # A count that is never reached: the period (1 ms) wakes the channel anyway.
        self.assertEqual(modify_cq(self.cq, 1000, 1000), 0)
        self.b.cq.req_notify(0)
        self.send(1)
        self.get_event()
        self.assertWC(self.b.poll()[0], wr_id=1, status=OK)
        # Fired once: without re-arming, no more events.
        self.send(1, first_id=2)
        self.assertFalse(readable(self.fd, QUIET), 'an event without arming')
        self.b.poll()

    def test_zero_is_no_moderation_and_lowering_the_count_fires(self):
        self.assertEqual(modify_cq(self.cq, 0, 0), 0)
        self.b.cq.req_notify(0)
        self.send(1)
        self.get_event()
        self.b.poll()
        # Two of five completions wait; the count lowered to 2 releases the event at once.
        self.assertEqual(modify_cq(self.cq, 5, 0), 0)
        self.b.cq.req_notify(0)
        self.send(2, first_id=2)
        self.assertFalse(readable(self.fd, QUIET))
        self.assertEqual(modify_cq(self.cq, 2, 0), 0)
        self.get_event()
        self.assertEqual(len(self.b.poll(2)), 2)

    def test_bad_input(self):
        cases = [('attr_mask 0', 0, 4, 0), ('reserved attr_mask bit', CQ_MODERATE | CQ_ATTR_RESERVED, 4, 0),
                 ('unknown attr_mask', CQ_ATTR_RESERVED, 4, 0), ('period above the caps', CQ_MODERATE, 4, 4096)]
        for name, mask, count, period in cases:
            with self.subTest(case=name):
                self.assertEqual(modify_cq(self.cq, count, period, mask), errno.EINVAL)
        # Nothing was changed: the CQ is not moderated.
        self.b.cq.req_notify(0)
        self.send(1)
        self.get_event()
        self.b.poll()

    def test_refusal_log_line(self):
        code = ('import base, os, test_cq_moderation as t\nos.environ["SOFTVERBS_LOG"] = "error"\n'
                'from pyverbs.cq import CQ\n'
                'ctx = base.open_context(); cq = CQ(ctx, 16, None, None, 0)\n'
                'p = t.cq_pointer(cq)\n'
                'print("mask", t.modify_cq(p, 1, 1, 0))\nprint("period", t.modify_cq(p, 1, 5000))\n')
        r = base.run_python(code, SOFTVERBS_LOG='error')
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f'mask {errno.EINVAL}', r.stdout)
        self.assertIn(f'period {errno.EINVAL}', r.stdout)
        self.assertRegex(r.stderr, r'ibv_modify_cq\(cq 0x[0-9a-f]+\): attr_mask 0 is not IBV_CQ_MODERATE')
        self.assertRegex(r.stderr, r'ibv_modify_cq\(cq 0x[0-9a-f]+\): cq_period 5000 us exceeds '
                                   r'cq_mod_caps.max_cq_period 4095')
