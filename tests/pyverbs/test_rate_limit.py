"""Packet pacing (issue 13 item 7; ibv_modify_qp_rate_limit(3), IBV_QP_RATE_LIMIT of
ibv_modify_qp(3)): packet_pacing_caps as ibv_query_device_ex reports them, the verb's acceptance
in RTS, its refusals as mlx5 refuses them (a comp_mask, a burst or packet size without a rate, a
rate outside the caps: EINVAL; a QP not in RTS: EINVAL, RTS->RTS being the one transition that
takes the attribute) with their log lines, and data under a rate limit still landing byte for
byte, every WR completing once. The pacing decisions themselves are unit-tested against a fake
clock (tests/unit/transport/pacer_test.cc, requester_test.cc): no assertion here is on time.

pyverbs does not wrap ibv_modify_qp_rate_limit (a static inline of verbs.h): it is called through
its verbs_context slot with the struct ibv_qp * pyverbs keeps inside its QP object."""
import ctypes
import errno

import base
import pyverbs.enums as e
import raw
from base import Buffer

tearDownModule = base.tear_down_module

RC, UC, UD = e.IBV_QPT_RC, e.IBV_QPT_UC, e.IBV_QPT_UD
OK = e.IBV_WC_SUCCESS
VCTX_MODIFY_QP_RATE_LIMIT = 104  # offsetof(struct verbs_context, modify_qp_rate_limit), rdma-core 44 x86-64
RATE_MIN, RATE_MAX = 1, 100000000  # kbps


class IbvQpRateLimitAttr(ctypes.Structure):
    _fields_ = [('rate_limit', ctypes.c_uint32), ('max_burst_sz', ctypes.c_uint32),
                ('typical_pkt_sz', ctypes.c_uint16), ('comp_mask', ctypes.c_uint32)]


def qp_pointer(qp):
    return raw.pyverbs_pointer(qp, 52, qp.qp_num)  # struct ibv_qp: qp_num at 52


def modify_rate_limit(qp_ptr, rate, burst=0, typical=0, comp_mask=0):
    """ibv_modify_qp_rate_limit(3): its return value (0 or an errno)."""
    ctx = ctypes.c_void_p.from_address(qp_ptr).value
    attr = IbvQpRateLimitAttr(rate, burst, typical, comp_mask)
    return raw.verbs_op(ctx, VCTX_MODIFY_QP_RATE_LIMIT, ctypes.c_int, ctypes.c_void_p,
                        ctypes.POINTER(IbvQpRateLimitAttr))(qp_ptr, ctypes.byref(attr))


def rate_of(qp):
    return qp.query(e.IBV_QP_RATE_LIMIT)[0].rate_limit


def payload(n, seed):
    return bytes((seed * 31 + i * 7) & 0xff for i in range(n))


class CapsTest(base.SoftverbsTestCase):

    def test_packet_pacing_caps(self):
        caps = self.ctx.query_device_ex().packet_pacing_caps
        self.assertEqual((caps.qp_rate_limit_min, caps.qp_rate_limit_max), (RATE_MIN, RATE_MAX))
        self.assertEqual(caps.supported_qpts, (1 << RC) | (1 << UC) | (1 << UD) | (1 << e.IBV_QPT_RAW_PACKET))


class VerbTest(base.DataTestCase):

    def test_accepted_in_rts_for_each_paced_type(self):
        for qpt in (RC, UC, UD):
            with self.subTest(qp_type=base.QPT_NAMES[qpt]):
                a, b = base.connected_pair(self.ctx, self.pd, qpt)
                p = qp_pointer(a.qp)
                for rate in (RATE_MIN, 1000, RATE_MAX):
                    self.assertEqual(modify_rate_limit(p, rate), 0)
                    self.assertEqual(rate_of(a.qp), rate)
                # With the burst shape (mlx5 accepts both with a rate), then unlimited again.
                self.assertEqual(modify_rate_limit(p, 5000, burst=8192, typical=1024), 0)
                self.assertEqual(rate_of(a.qp), 5000)
                self.assertEqual(modify_rate_limit(p, 0), 0)
                self.assertEqual(rate_of(a.qp), 0)
                self.assertEqual(a.qp.qp_state, e.IBV_QPS_RTS)

    def test_bad_input_is_einval_and_changes_nothing(self):
        a, b = base.connected_pair(self.ctx, self.pd, RC)
        p = qp_pointer(a.qp)
        self.assertEqual(modify_rate_limit(p, 2000), 0)
        cases = [('rate above qp_rate_limit_max', dict(rate=RATE_MAX + 1)),
                 ('rate 0xffffffff', dict(rate=0xffffffff)),
                 ('max_burst_sz without a rate', dict(rate=0, burst=4096)),
                 ('typical_pkt_sz without a rate', dict(rate=0, typical=1024)),
                 ('a comp_mask', dict(rate=1000, comp_mask=1))]
        for name, kw in cases:
            with self.subTest(case=name):
                self.assertEqual(modify_rate_limit(p, **kw), errno.EINVAL)
                self.assertEqual(rate_of(a.qp), 2000)

    def test_only_in_rts(self):
        # ibv_modify_qp(3): IBV_QP_RATE_LIMIT belongs to RTR->RTS and RTS->RTS; without a state
        # the request is current->current, which RESET, INIT and RTR have none of.
        for to in (e.IBV_QPS_RESET, e.IBV_QPS_INIT, e.IBV_QPS_RTR):
            with self.subTest(state=base.STATE_NAMES[to]):
                peer = base.Peer(self.ctx, self.pd, RC)
                if to != e.IBV_QPS_RESET:
                    base.connect_qp(self.ctx, peer.qp, peer.qpn, to=to)
                self.assertEqual(modify_rate_limit(qp_pointer(peer.qp), 1000), errno.EINVAL)
                self.assertEqual(peer.qp.qp_state, to)

    def test_refusal_log_lines(self):
        code = ('import base, os, test_rate_limit as t, pyverbs.enums as e\n'
                'os.environ["SOFTVERBS_LOG"] = "error"\n'
                'from pyverbs.pd import PD\n'
                'ctx = base.open_context(); pd = PD(ctx)\n'
                'a, b = base.connected_pair(ctx, pd, e.IBV_QPT_RC); p = t.qp_pointer(a.qp)\n'
                'print("range", t.modify_rate_limit(p, 100000001))\n'
                'print("burst", t.modify_rate_limit(p, 0, burst=64))\n'
                'print("mask", t.modify_rate_limit(p, 1, comp_mask=2))\n'
                'r = base.Peer(ctx, pd, e.IBV_QPT_UD)\n'
                'print("state", t.modify_rate_limit(t.qp_pointer(r.qp), 1000))\n')
        r = base.run_python(code, SOFTVERBS_LOG='error')
        self.assertEqual(r.returncode, 0, r.stderr)
        for case in ('range', 'burst', 'mask', 'state'):
            self.assertIn(f'{case} {errno.EINVAL}', r.stdout)
        q = r'ibv_modify_qp_rate_limit\(qp 0x[0-9a-f]+\): '
        self.assertRegex(r.stderr, q + r'RC RTS->RTS: rate_limit 100000001 kbps is outside '
                                   r'packet_pacing_caps \[1, 100000000\]')
        self.assertRegex(r.stderr, q + r'RC RTS->RTS: max_burst_sz 64 / typical_pkt_sz 0 without a rate_limit')
        self.assertRegex(r.stderr, q + r'comp_mask 2 names no field')
        self.assertRegex(r.stderr, q + r'UD RESET->RESET does not accept IBV_QP_RATE_LIMIT')


class PacedDataTest(base.DataTestCase):
    """Data under a rate limit: the pacer delays messages, never loses, reorders or fails one.
    Rates are chosen so that the whole test sends well under a second of paced bytes."""

    def check_sends(self, qpt, rate, sizes, burst=0):
        a, b = base.connected_pair(self.ctx, self.pd, qpt)
        self.assertEqual(modify_rate_limit(qp_pointer(a.qp), rate, burst=burst), 0)
        grh = base.GRH_LEN if qpt == UD else 0
        slot = max(sizes) + grh
        src, dst = Buffer(self.pd, sum(sizes)), Buffer(self.pd, slot * len(sizes))
        ah = a.ah() if qpt == UD else None
        off = 0
        for i, n in enumerate(sizes):
            src.write(payload(n, i), off)
            b.post_recv(dst.sge(slot * i, slot), wr_id=100 + i)
            ud = (ah, b.qpn, base.QKEY) if qpt == UD else None
            a.post_send(base.send_wr(e.IBV_WR_SEND, [src.sge(off, n)], wr_id=i, ud=ud))
            off += n
        sent = a.poll(len(sizes))
        self.assertEqual([(w.wr_id, w.status) for w in sent], [(i, OK) for i in range(len(sizes))])
        got = b.poll(len(sizes))
        self.assertEqual([(w.wr_id, w.status, w.byte_len) for w in got],
                         [(100 + i, OK, n + grh) for i, n in enumerate(sizes)])
        for i, n in enumerate(sizes):
            self.assertEqual(dst.read(slot * i + grh, n), payload(n, i), f'message {i}')
        self.assertNoCompletion(a)
        self.assertNoCompletion(b)

    def test_rc_sends(self):
        # 10 MB/s (80000 kbps): 64 KiB take about 7 ms.
        self.check_sends(RC, 80000, [4096] * 8 + [1, 0, 32768, 100])

    def test_uc_sends_with_a_small_burst(self):
        self.check_sends(UC, 80000, [1500] * 10, burst=1500)

    def test_ud_sends(self):
        self.check_sends(UD, 80000, [4096] * 6 + [17])

    def test_rc_writes_and_reads(self):
        a, b = base.connected_pair(self.ctx, self.pd, RC)
        self.assertEqual(modify_rate_limit(qp_pointer(a.qp), 100000), 0)  # 12.5 MB/s
        n = 64 * 1024
        src, dst, back = Buffer(self.pd, n), Buffer(self.pd, n), Buffer(self.pd, n)
        src.write(payload(n, 5), 0)
        for k in range(4):  # four WRITEs of a quarter each, then one READ of the whole
            q = n // 4
            a.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [src.sge(k * q, q)], wr_id=k,
                                     rdma=(dst.mr.rkey, dst.addr + k * q)))
        a.post_send(base.send_wr(e.IBV_WR_RDMA_READ, [back.sge(0, n)], wr_id=9,
                                 rdma=(dst.mr.rkey, dst.addr)))
        wcs = a.poll(5)
        self.assertEqual([(w.wr_id, w.status) for w in wcs], [(0, OK), (1, OK), (2, OK), (3, OK), (9, OK)])
        self.assertEqual(dst.read(0, n), payload(n, 5))
        self.assertEqual(back.read(0, n), payload(n, 5))
        self.assertNoCompletion(a)

    def test_queued_paced_wrs_flush_once_on_err(self):
        # A rate of 1 kbps holds everything after the first message back (4 KiB take 32 s): moved
        # to ERR, the QP flushes each waiting WR exactly once.
        a, b = base.connected_pair(self.ctx, self.pd, RC)
        self.assertEqual(modify_rate_limit(qp_pointer(a.qp), 1), 0)
        src, dst = Buffer(self.pd, 4096), Buffer(self.pd, 4 * 4096)
        for i in range(4):
            b.post_recv(dst.sge(4096 * i, 4096), wr_id=100 + i)
            a.post_send(base.send_wr(e.IBV_WR_SEND, [src.sge(0, 4096)], wr_id=i))
        self.assertWC(a.poll()[0], wr_id=0, status=OK)
        self.assertNoCompletion(a)
        base.stop_retries(a)
        wcs = a.poll(3)
        self.assertEqual([(w.wr_id, w.status) for w in wcs], [(i, e.IBV_WC_WR_FLUSH_ERR) for i in (1, 2, 3)])
        self.assertNoCompletion(a)


    def test_a_new_rate_applies_to_what_waits(self):
        # At 1 kbps the second 4 KiB message would wait 32 s; rate_limit 0 releases the queue at
        # once, and the data lands in order.
        a, b = base.connected_pair(self.ctx, self.pd, RC)
        p = qp_pointer(a.qp)
        self.assertEqual(modify_rate_limit(p, 1), 0)
        src, dst = Buffer(self.pd, 3 * 4096), Buffer(self.pd, 3 * 4096)
        for i in range(3):
            src.write(payload(4096, i), 4096 * i)
            b.post_recv(dst.sge(4096 * i, 4096), wr_id=100 + i)
            a.post_send(base.send_wr(e.IBV_WR_SEND, [src.sge(4096 * i, 4096)], wr_id=i))
        self.assertWC(a.poll()[0], wr_id=0, status=OK)
        self.assertEqual(modify_rate_limit(p, 0), 0)
        self.assertEqual([(w.wr_id, w.status) for w in a.poll(2)], [(1, OK), (2, OK)])
        self.assertEqual([w.wr_id for w in b.poll(3)], [100, 101, 102])
        self.assertEqual(dst.read(0, 3 * 4096), src.read(0, 3 * 4096))

if __name__ == '__main__':
    import unittest
    unittest.main()
