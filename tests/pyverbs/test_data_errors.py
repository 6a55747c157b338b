"""Completion errors of the data path (ibv_poll_cq(3) statuses, IBA 10.8.3 / 9.9 / 9.7.5.2.8 /
9.7.6.1.3) and what follows them: memory protection that never writes outside a memory region,
local errors, length errors, the QP in ERR with every outstanding WR flushed, RNR and transport
retries, and the refusals of ibv_post_send/ibv_post_recv themselves."""
import errno
import textwrap
import threading
import unittest

import base
import pyverbs.enums as e
from base import Buffer
from pyverbs.pd import PD
from pyverbs.srq import SRQ, SrqAttr, SrqInitAttr

tearDownModule = base.tear_down_module

RC, UC, UD = e.IBV_QPT_RC, e.IBV_QPT_UC, e.IBV_QPT_UD
OK = e.IBV_WC_SUCCESS
FLUSH = e.IBV_WC_WR_FLUSH_ERR
NO_REMOTE_WRITE = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_READ | e.IBV_ACCESS_REMOTE_ATOMIC
NO_REMOTE_READ = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_ATOMIC
NO_REMOTE_ATOMIC = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ


def state(peer):
    return peer.qp.query(e.IBV_QP_STATE)[0].qp_state


class ErrorTestCase(base.DataTestCase):

    def pair(self, qpt=RC, a_attrs=None, b_attrs=None, **kw):
        return base.connected_pair(self.ctx, self.pd, qpt, a_attrs=a_attrs, b_attrs=b_attrs, **kw)

    def assertState(self, peer, expected):
        self.assertEqual(base.STATE_NAMES[state(peer)], base.STATE_NAMES[expected])

    def assertFlushedNext(self, a, src):
        """The QP is in ERR: a WR posted now completes with IBV_WC_WR_FLUSH_ERR."""
        a.post_send(base.send_wr(e.IBV_WR_SEND, [src.sge(0, 8)], wr_id=0xf1))
        self.assertWC(a.poll()[0], wr_id=0xf1, status=FLUSH, qp_num=a.qpn)
        self.assertNoCompletion(a)


class RemoteAccessTest(ErrorTestCase):
    """IBV_WC_REM_ACCESS_ERR: rkey, bounds, access flags of the MR and of the QP, PD, a
    deregistered MR. Nothing outside (or inside) the target MR changes."""

    SIZE = 256
    ATOMICS = (e.IBV_WR_ATOMIC_FETCH_AND_ADD, e.IBV_WR_ATOMIC_CMP_AND_SWP)

    # name -> (offset into the target, length); atomics always access 8 aligned bytes, so their
    # bounds cases are the 8 bytes just past the end and just before the start.
    CASES = {
        'bad rkey': (0, 64),
        'one byte past the end': (1, SIZE),
        'one byte before the start': (-1, 8),
        'length above the MR': (0, SIZE + 1),
        'MR without the remote access': (0, 64),
        'QP without the remote access': (0, 64),
        'MR of another PD': (0, 64),
        'MR deregistered': (0, 64),
    }
    ATOMIC_OFFSET = {'one byte past the end': SIZE, 'one byte before the start': -8}

    def run_case(self, opcode, no_access, name):
        offset, length = self.CASES[name]
        b_access = no_access if name == 'QP without the remote access' else base.ACCESS_ALL
        a, b = self.pair(b_attrs={'access': b_access})
        pd = PD(self.ctx) if name == 'MR of another PD' else self.pd
        mr_access = no_access if name == 'MR without the remote access' else base.ACCESS_ALL
        target = Buffer(pd, self.SIZE, mr_access, fill=0x3c)
        local = Buffer(self.pd, self.SIZE + 8, fill=0x77)
        rkey = target.rkey ^ 0x00ab0000 if name == 'bad rkey' else target.rkey
        if name == 'MR deregistered':
            target.mr.close()
        before, local_before = target.snapshot(), local.snapshot()
        if opcode in self.ATOMICS:
            addr = target.addr + self.ATOMIC_OFFSET.get(name, 0)
            wr = base.send_wr(opcode, [local.sge(0, 8)], wr_id=0xacc,
                              atomic=(rkey, addr, 0x3c3c3c3c3c3c3c3c, 1))
        else:
            wr = base.send_wr(opcode, [local.sge(0, length)], wr_id=0xacc, imm_data=1,
                              rdma=(rkey, target.addr + offset))
        a.post_send(wr)
        self.assertWC(a.poll()[0], wr_id=0xacc, status=e.IBV_WC_REM_ACCESS_ERR, qp_num=a.qpn)
        self.assertEqual(target.snapshot(), before, 'the target memory changed')
        self.assertEqual(local.snapshot(), local_before, 'the local buffer changed')
        self.assertState(a, e.IBV_QPS_ERR)
        self.assertFlushedNext(a, local)

    def test_rdma_write(self):
        for name in self.CASES:
            with self.subTest(case=name):
                self.run_case(e.IBV_WR_RDMA_WRITE, NO_REMOTE_WRITE, name)

    def test_rdma_write_with_imm(self):
        for name in self.CASES:
            with self.subTest(case=name):
                self.run_case(e.IBV_WR_RDMA_WRITE_WITH_IMM, NO_REMOTE_WRITE, name)

    def test_rdma_read(self):
        for name in self.CASES:
            with self.subTest(case=name):
                self.run_case(e.IBV_WR_RDMA_READ, NO_REMOTE_READ, name)

    def test_atomics(self):
        for opcode in self.ATOMICS:
            for name in self.CASES:
                if name != 'length above the MR':
                    with self.subTest(opcode=opcode, case=name):
                        self.run_case(opcode, NO_REMOTE_ATOMIC, name)

    def test_target_rc_qp_enters_err(self):
        # IBA 9.9.3: a responder access error moves the responder's RC QP to ERR as well; its
        # posted receives are flushed.
        a, b = self.pair()
        target, local = Buffer(self.pd, 64), Buffer(self.pd, 64)
        b.post_recv(target.sge(), wr_id=0xbbb)
        a.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [local.sge()], wr_id=1,
                                 rdma=(target.rkey, target.addr + 1)))
        self.assertWC(a.poll()[0], wr_id=1, status=e.IBV_WC_REM_ACCESS_ERR)
        self.assertState(b, e.IBV_QPS_ERR)
        self.assertWC(b.poll()[0], wr_id=0xbbb, status=FLUSH, qp_num=b.qpn)


class LocalErrorTest(ErrorTestCase):

    def test_bad_lkey_is_a_local_protection_error(self):
        for what in ('bad lkey', 'past the end of the MR', 'MR of another PD', 'deregistered'):
            with self.subTest(case=what):
                a, b = self.pair()
                pd = PD(self.ctx) if what == 'MR of another PD' else self.pd
                src, dst = Buffer(pd, 64), Buffer(self.pd, 128)
                b.post_recv(dst.sge(), wr_id=1)
                sge = {'bad lkey': src.sge(lkey=src.lkey ^ 0x00cd0000),
                       'past the end of the MR': src.sge(1, 64)}.get(what, src.sge())
                if what == 'deregistered':
                    src.mr.close()
                a.post_send(base.send_wr(e.IBV_WR_SEND, [sge], wr_id=2))
                self.assertWC(a.poll()[0], wr_id=2, status=e.IBV_WC_LOC_PROT_ERR, qp_num=a.qpn)
                self.assertNoCompletion(b)
                self.assertEqual(dst.read(), bytes(128))
                self.assertState(a, e.IBV_QPS_ERR)

    def test_rdma_read_into_memory_without_local_write(self):
        # The local buffer of an RDMA READ is written: its MR needs IBV_ACCESS_LOCAL_WRITE.
        a, b = self.pair()
        remote = Buffer(self.pd, 64, fill=0x42)
        local = Buffer(self.pd, 64, e.IBV_ACCESS_REMOTE_READ, fill=0x01)
        a.post_send(base.send_wr(e.IBV_WR_RDMA_READ, [local.sge()], wr_id=3,
                                 rdma=(remote.rkey, remote.addr)))
        self.assertWC(a.poll()[0], wr_id=3, status=e.IBV_WC_LOC_PROT_ERR)
        self.assertEqual(local.read(), b'\x01' * 64)
        self.assertState(a, e.IBV_QPS_ERR)

    def test_atomic_result_into_memory_without_local_write(self):
        a, b = self.pair()
        remote = Buffer(self.pd, 64)
        local = Buffer(self.pd, 64, 0, fill=0x01)
        a.post_send(base.send_wr(e.IBV_WR_ATOMIC_FETCH_AND_ADD, [local.sge(0, 8)], wr_id=4,
                                 atomic=(remote.rkey, remote.addr, 5, 0)))
        self.assertWC(a.poll()[0], wr_id=4, status=e.IBV_WC_LOC_PROT_ERR)
        self.assertEqual(remote.read(), bytes(64))
        self.assertEqual(local.read(), b'\x01' * 64)

    def test_send_too_long_for_the_receive(self):
        # IBA 9.9.3.1.2: LOC_LEN_ERR on the receive WQE, REM_INV_REQ_ERR for the sender; both
        # RC QPs enter ERR.
        for sizes in ((64,), (16, 16, 16)):
            with self.subTest(receive_sges=sizes):
                a, b = self.pair()
                src = Buffer(self.pd, 100, fill=0x99)
                dst = [Buffer(self.pd, n) for n in sizes]
                b.post_recv(*[d.sge() for d in dst], wr_id=0x111)
                b.post_recv(dst[0].sge(), wr_id=0x112)
                a.post_send(base.send_wr(e.IBV_WR_SEND, [src.sge()], wr_id=0x222))
                self.assertWC(a.poll()[0], wr_id=0x222, status=e.IBV_WC_REM_INV_REQ_ERR,
                              qp_num=a.qpn)
                self.assertWC(b.poll()[0], wr_id=0x111, status=e.IBV_WC_LOC_LEN_ERR,
                              qp_num=b.qpn)
                self.assertTrue(all(d.guards_intact() for d in dst))
                self.assertState(a, e.IBV_QPS_ERR)
                self.assertState(b, e.IBV_QPS_ERR)
                self.assertWC(b.poll()[0], wr_id=0x112, status=FLUSH, qp_num=b.qpn)
                self.assertFlushedNext(a, src)


class FlushTest(ErrorTestCase):

    FLUSH_WAIT = 0.5  # a flush is due at once; this only bounds the wait

    def test_after_an_error_the_next_wr_is_flushed_and_the_qp_is_in_err(self):
        a, b = self.pair()
        src = Buffer(self.pd, 64)
        a.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [src.sge()], wr_id=1,
                                 rdma=(0xbad, 0x1000)))
        self.assertWC(a.poll()[0], wr_id=1, status=e.IBV_WC_REM_ACCESS_ERR)
        self.assertState(a, e.IBV_QPS_ERR)
        for k in range(3):
            a.post_send(base.send_wr(e.IBV_WR_SEND, [src.sge()], wr_id=10 + k, flags=0))
        # ibv_post_send(3): in ERR, even unsignaled WRs complete (with a flush error).
        self.assertEqual([(w.wr_id, w.status, w.qp_num) for w in a.poll(3)],
                         [(10 + k, FLUSH, a.qpn) for k in range(3)])
        # Receives posted in ERR are flushed too.
        a.post_recv(src.sge(), wr_id=20)
        self.assertWC(a.poll()[0], wr_id=20, status=FLUSH, qp_num=a.qpn)
        self.assertNoCompletion(a)

    def test_modify_to_err_flushes_posted_receives(self):
        for qpt in (RC, UC, UD):
            with self.subTest(qp_type=base.QPT_NAMES[qpt]):
                a, b = self.pair(qpt)
                dst = Buffer(self.pd, 1024)
                n = 7
                for k in range(n):
                    b.post_recv(dst.sge(k * 100, 100), wr_id=500 + k)
                b.qp.modify(base.QPAttr(qp_state=e.IBV_QPS_ERR), e.IBV_QP_STATE)
                wcs = b.poll(n)
                self.assertEqual([(w.wr_id, w.status, w.qp_num) for w in wcs],
                                 [(500 + k, FLUSH, b.qpn) for k in range(n)])
                self.assertNoCompletion(b)
                self.assertEqual(dst.read(), bytes(1024))

    def test_modify_to_err_flushes_queued_sends(self):
        # The first SEND waits for a receive (RNR, retried forever); the others queue behind it.
        a, b = self.pair(a_attrs={'rnr_retry': 7}, b_attrs={'min_rnr_timer': 1})
        src = Buffer(self.pd, 64)
        for k in range(4):
            a.post_send(base.send_wr(e.IBV_WR_SEND, [src.sge()], wr_id=600 + k,
                                     flags=e.IBV_SEND_SIGNALED if k != 2 else 0))
        self.assertNoCompletion(a, 0.02)
        a.qp.modify(base.QPAttr(qp_state=e.IBV_QPS_ERR), e.IBV_QP_STATE)
        wcs = a.poll(4)
        self.assertEqual([(w.wr_id, w.status, w.qp_num) for w in wcs],
                         [(600 + k, FLUSH, a.qpn) for k in range(4)])
        self.assertNoCompletion(a)
        self.assertNoCompletion(b)

    def test_outstanding_wrs_behind_a_failed_one_are_flushed(self):
        # One retry after a long delay (RNR timer 41 ms, ACK timeout 67 ms) leaves time to post
        # all three WRs (in one chained ibv_post_send) before the head fails in the background.
        for case in ('RNR retries exhausted', 'transport retries exhausted'):
            with self.subTest(case=case):
                if case.startswith('RNR'):
                    a, b = self.pair(a_attrs={'rnr_retry': 1}, b_attrs={'min_rnr_timer': 24})
                    status = e.IBV_WC_RNR_RETRY_EXC_ERR
                else:
                    a = base.Peer(self.ctx, self.pd, RC).connect(0xfffff0, timeout=14,
                                                                 retry_cnt=1)
                    status = e.IBV_WC_RETRY_EXC_ERR
                src = Buffer(self.pd, 64)
                wrs = [base.send_wr(e.IBV_WR_SEND, [src.sge()], wr_id=700 + k) for k in range(3)]
                wrs[1].next_wr = wrs[2]
                wrs[0].next_wr = wrs[1]
                a.post_send(wrs[0])
                # Only polling, no other verb on a.
                wcs = a.poll(3, timeout=0.2 + self.FLUSH_WAIT)
                self.assertEqual([(w.wr_id, w.status) for w in wcs],
                                 [(700, status), (701, FLUSH), (702, FLUSH)])

    def test_receives_of_a_failed_responder_are_flushed(self):
        for case in ('access error', 'length error'):
            with self.subTest(case=case):
                a, b = self.pair()
                small, local = Buffer(self.pd, 8), Buffer(self.pd, 64)
                for k in range(3):
                    b.post_recv(small.sge(), wr_id=900 + k)
                if case == 'access error':
                    a.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [local.sge()], wr_id=1,
                                             rdma=(small.rkey, small.addr)))
                    expected = [(900, FLUSH), (901, FLUSH), (902, FLUSH)]
                else:
                    a.post_send(base.send_wr(e.IBV_WR_SEND, [local.sge()], wr_id=1))
                    expected = [(900, e.IBV_WC_LOC_LEN_ERR), (901, FLUSH), (902, FLUSH)]
                self.assertNotEqual(a.poll()[0].status, OK)
                # Only polling: no other verb on b.
                wcs = b.poll(3, timeout=self.FLUSH_WAIT)
                self.assertEqual([(w.wr_id, w.status) for w in wcs], expected)

    def test_srq_wqes_are_not_flushed(self):
        # IBA 10.3.1 / ibv_modify_qp(3): the WQEs of an SRQ belong to the SRQ, not to a QP in ERR.
        srq = SRQ(self.pd, SrqInitAttr(SrqAttr(max_wr=16, max_sge=1)))
        a, b = self.pair(srq=srq)
        dst = Buffer(self.pd, 256)
        for k in range(3):
            srq.post_recv(base.recv_wr([dst.sge(k * 64, 64)], wr_id=800 + k))
        b.qp.modify(base.QPAttr(qp_state=e.IBV_QPS_ERR), e.IBV_QP_STATE)
        self.assertNoCompletion(b)
        # Another QP on the same SRQ still receives into them, in order.
        c, d = self.pair(srq=srq)
        src = Buffer(self.pd, 64)
        src.write(b'srq!' * 16)
        c.post_send(base.send_wr(e.IBV_WR_SEND, [src.sge()], wr_id=1))
        self.assertWC(c.poll()[0], wr_id=1, status=OK)
        self.assertWC(d.poll()[0], wr_id=800, status=OK, byte_len=64, qp_num=d.qpn)
        self.assertEqual(dst.read(0, 64), b'srq!' * 16)


class RnrTest(ErrorTestCase):

    def test_rc_send_without_receive_exhausts_rnr_retries(self):
        a, b = self.pair(a_attrs={'rnr_retry': 2}, b_attrs={'min_rnr_timer': 1})
        src = Buffer(self.pd, 64)
        a.post_send(base.send_wr(e.IBV_WR_SEND, [src.sge()], wr_id=1))
        self.assertWC(a.poll()[0], wr_id=1, status=e.IBV_WC_RNR_RETRY_EXC_ERR, qp_num=a.qpn)
        self.assertState(a, e.IBV_QPS_ERR)
        self.assertNoCompletion(b)
        self.assertState(b, e.IBV_QPS_RTS)  # an RNR NAK is no error of the responder

    def test_rc_write_with_imm_without_receive_exhausts_rnr_retries(self):
        a, b = self.pair(a_attrs={'rnr_retry': 1}, b_attrs={'min_rnr_timer': 1})
        src, dst = Buffer(self.pd, 64), Buffer(self.pd, 64)
        a.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE_WITH_IMM, [src.sge()], wr_id=1,
                                 imm_data=1, rdma=(dst.rkey, dst.addr)))
        self.assertWC(a.poll()[0], wr_id=1, status=e.IBV_WC_RNR_RETRY_EXC_ERR)

    def test_rc_send_waits_for_a_late_receive(self):
        # rnr_retry 7 retries forever: a receive posted 50 ms later (by another thread) gets it.
        a, b = self.pair(a_attrs={'rnr_retry': 7}, b_attrs={'min_rnr_timer': 1})
        src, dst = Buffer(self.pd, 300), Buffer(self.pd, 300)
        src.write(bytes(range(256)) + b'late' * 11)
        a.post_send(base.send_wr(e.IBV_WR_SEND, [src.sge()], wr_id=1))
        timer = threading.Timer(0.05, lambda: b.post_recv(dst.sge(), wr_id=2))
        timer.start()
        try:
            self.assertWC(a.poll()[0], wr_id=1, status=OK, opcode=e.IBV_WC_SEND)
        finally:
            timer.join(5)
        self.assertWC(b.poll()[0], wr_id=2, status=OK, byte_len=300)
        self.assertEqual(dst.read(), bytes(range(256)) + b'late' * 11)
        self.assertState(a, e.IBV_QPS_RTS)

    def test_uc_send_without_receive_is_lost(self):
        a, b = self.pair(UC)
        src = Buffer(self.pd, 64)
        a.post_send(base.send_wr(e.IBV_WR_SEND, [src.sge()], wr_id=1))
        self.assertWC(a.poll()[0], wr_id=1, status=OK)
        self.assertNoCompletion(b)
        self.assertState(a, e.IBV_QPS_RTS)


class RetryTest(ErrorTestCase):
    """IBV_WC_RETRY_EXC_ERR: nobody answers within timeout x (retry_cnt + 1)."""

    ATTRS = {'timeout': 1, 'retry_cnt': 2}

    def check_unanswered(self, a, opcode=e.IBV_WR_SEND):
        src = Buffer(self.pd, 64, fill=0x12)
        a.post_send(base.send_wr(opcode, [src.sge()], wr_id=0x7e7, rdma=(1, 0)))
        self.assertWC(a.poll()[0], wr_id=0x7e7, status=e.IBV_WC_RETRY_EXC_ERR, qp_num=a.qpn)
        self.assertEqual(src.read(), b'\x12' * 64)
        self.assertState(a, e.IBV_QPS_ERR)
        self.assertFlushedNext(a, src)

    def test_qp_number_that_does_not_exist(self):
        gone = base.Peer(self.ctx, self.pd, RC)
        qpn = gone.qpn
        gone.qp.close()
        for remote in (qpn, 0xfffff0):
            with self.subTest(remote_qpn=hex(remote)):
                a = base.Peer(self.ctx, self.pd, RC).connect(remote, **self.ATTRS)
                self.check_unanswered(a)

    def test_peer_destroyed_after_connect(self):
        for opcode in (e.IBV_WR_SEND, e.IBV_WR_RDMA_WRITE, e.IBV_WR_RDMA_READ):
            with self.subTest(opcode=opcode):
                a, b = self.pair(a_attrs=self.ATTRS)
                b.qp.close()
                self.check_unanswered(a, opcode)

    def test_peer_not_ready_to_receive(self):
        # IBA 10.3.1: a QP in RESET or INIT drops what arrives; the requester times out.
        for peer_state in (e.IBV_QPS_RESET, e.IBV_QPS_INIT):
            with self.subTest(peer_state=base.STATE_NAMES[peer_state]):
                b = base.Peer(self.ctx, self.pd, RC)
                a = base.Peer(self.ctx, self.pd, RC).connect(b.qpn, **self.ATTRS)
                if peer_state == e.IBV_QPS_INIT:
                    b.connect(a.qpn, to=e.IBV_QPS_INIT)
                    b.post_recv(Buffer(self.pd, 64).sge(), wr_id=1)
                self.check_unanswered(a)
                self.assertNoCompletion(b)


class PostRefusalTest(ErrorTestCase):
    """ibv_post_send(3)/ibv_post_recv(3) refuse at once, returning an errno and posting nothing."""

    def test_post_send_before_rts_is_einval(self):
        src = Buffer(self.pd, 64)
        for qpt in (RC, UC, UD):
            target = base.Peer(self.ctx, self.pd, qpt)
            for stop in (e.IBV_QPS_RESET, e.IBV_QPS_INIT, e.IBV_QPS_RTR):
                with self.subTest(qp_type=base.QPT_NAMES[qpt], state=base.STATE_NAMES[stop]):
                    q = base.Peer(self.ctx, self.pd, qpt)
                    if stop != e.IBV_QPS_RESET:
                        q.connect(target.qpn, to=stop)
                    ud = (q.ah(), target.qpn, base.QKEY) if qpt == UD else None
                    self.assertRDMAError(errno.EINVAL, q.post_send,
                                         base.send_wr(e.IBV_WR_SEND, [src.sge()], ud=ud))
                    self.assertNoCompletion(q, 0.01)

    def test_post_recv_in_reset_is_einval(self):
        p = base.Peer(self.ctx, self.pd, RC)
        dst = Buffer(self.pd, 64)
        self.assertRDMAError(errno.EINVAL, p.post_recv, dst.sge(), wr_id=1)
        p.connect(to=e.IBV_QPS_INIT)
        p.post_recv(dst.sge(), wr_id=2)  # accepted from INIT on
        self.assertNoCompletion(p, 0.01)

    def test_memory_window_opcodes_need_rc_or_uc(self):
        # ibv_bind_mw(3): binds on UC, RC (and XRC_SEND); SEND_WITH_INV is RC's (IBA 9.4).
        src = Buffer(self.pd, 64)
        for qpt, opcodes in ((UD, (e.IBV_WR_LOCAL_INV, e.IBV_WR_SEND_WITH_INV)),
                             (UC, (e.IBV_WR_SEND_WITH_INV,))):
            a, b = self.pair(qpt)
            for opcode in opcodes:
                with self.subTest(qp_type=base.QPT_NAMES[qpt], opcode=opcode):
                    wr = base.send_wr(opcode, [src.sge()], wr_id=1,
                                      ud=(a.ah(), b.qpn, base.QKEY) if qpt == UD else None)
                    self.assertRDMAError(errno.EINVAL, a.post_send, wr)
            self.assertNoCompletion(a, 0.01)
            self.assertState(a, e.IBV_QPS_RTS)

    def test_opcodes_the_qp_type_lacks_are_einval(self):
        src = Buffer(self.pd, 64)
        for qpt, opcodes in ((UC, (e.IBV_WR_RDMA_READ, e.IBV_WR_ATOMIC_FETCH_AND_ADD,
                                   e.IBV_WR_ATOMIC_CMP_AND_SWP)),
                             (UD, (e.IBV_WR_RDMA_WRITE, e.IBV_WR_RDMA_WRITE_WITH_IMM,
                                   e.IBV_WR_RDMA_READ, e.IBV_WR_ATOMIC_FETCH_AND_ADD))):
            a, b = self.pair(qpt)
            for opcode in opcodes:
                with self.subTest(qp_type=base.QPT_NAMES[qpt], opcode=opcode):
                    wr = base.send_wr(opcode, [src.sge(0, 8)], rdma=(src.rkey, src.addr),
                                      ud=(a.ah(), b.qpn, base.QKEY) if qpt == UD else None)
                    self.assertRDMAError(errno.EINVAL, a.post_send, wr)
            self.assertNoCompletion(a, 0.01)
            self.assertState(a, e.IBV_QPS_RTS)

    def test_limits_of_the_qp_caps(self):
        a, b = self.pair(cap=base.default_cap(max_send_wr=2, max_recv_wr=2, max_send_sge=1,
                                              max_recv_sge=1, max_inline_data=32),
                         a_attrs={'rnr_retry': 7})
        _, init = b.qp.query(e.IBV_QP_CAP)
        src = Buffer(self.pd, 64)
        with self.subTest('num_sge above max_send_sge'):
            self.assertRDMAError(errno.EINVAL, a.post_send,
                                 base.send_wr(e.IBV_WR_SEND, [src.sge(0, 8), src.sge(8, 8)]))
        with self.subTest('inline data above max_inline_data'):
            self.assertRDMAError(errno.EINVAL, a.post_send,
                                 base.send_wr(e.IBV_WR_SEND, [src.sge(0, 64)],
                                              flags=e.IBV_SEND_INLINE))
        with self.subTest('num_sge above max_recv_sge'):
            self.assertRDMAError(errno.EINVAL, b.post_recv, src.sge(0, 8), src.sge(8, 8))
        self.assertNoCompletion(a, 0.01)
        self.assertState(a, e.IBV_QPS_RTS)
        with self.subTest('send queue full'):
            # b has no receive: the SENDs wait (RNR, forever) and fill a's send queue.
            try:
                for k in range(init.max_send_wr):
                    a.post_send(base.send_wr(e.IBV_WR_SEND, [src.sge()], wr_id=k))
                self.assertRDMAError(errno.ENOMEM, a.post_send,
                                     base.send_wr(e.IBV_WR_SEND, [src.sge()], wr_id=99))
            finally:
                base.stop_retries(a)
        with self.subTest('receive queue full'):
            c = base.Peer(self.ctx, self.pd, RC, cap=base.default_cap(max_recv_wr=2))
            c.connect(a.qpn)
            _, c_init = c.qp.query(e.IBV_QP_CAP)
            for k in range(c_init.max_recv_wr):
                c.post_recv(src.sge(), wr_id=k)
            self.assertRDMAError(errno.ENOMEM, c.post_recv, src.sge(), wr_id=99)


# A child that, for up to 3 seconds, opens a context, makes an RC pair whose SENDs wait for a
# receive (RNR, retried every 10 us forever) and closes the context, which destroys the QPs while
# the progress thread retries them (what every tearDown of a test with such a QP does).
DESTROY_WHILE_RETRYING = textwrap.dedent('''
    import time
    import base
    import pyverbs.enums as e
    rounds, deadline = 0, time.monotonic() + 3
    while time.monotonic() < deadline:
        ctx = base.open_context()
        pd = base.PD(ctx)
        src = base.Buffer(pd, 64)
        a, b = base.connected_pair(ctx, pd, e.IBV_QPT_RC, a_attrs={'rnr_retry': 7})
        for k in range(2):
            a.post_send(base.send_wr(e.IBV_WR_SEND, [src.sge()], wr_id=k))
        ctx.close()
        rounds += 1
    print('survived', rounds, flush=True)
''')


class DestroyTest(unittest.TestCase):

    def test_destroy_qp_while_its_sends_wait_for_a_retry(self):
        r = base.run_python(DESTROY_WHILE_RETRYING, timeout=60)
        self.assertEqual(r.returncode, 0, f'child died: {r.returncode}; stderr: {r.stderr[-2000:]}')
        self.assertIn('survived', r.stdout)


class TransportMismatchTest(ErrorTestCase):
    """Issue 17 item 3: a NIC drops a packet whose transport is not its QP's (IBA 9.6.1.1). An RC
    WRITE into a UC QP gets no answer (IBV_WC_RETRY_EXC_ERR); a UC WRITE into an RC QP is lost
    (the UC sender only knows it sent it). Neither target's memory changes."""

    def test_rc_write_into_a_uc_qp_is_not_answered(self):
        a = base.Peer(self.ctx, self.pd, RC)
        b = base.Peer(self.ctx, self.pd, UC)
        a.connect(b.qpn, timeout=1, retry_cnt=1)
        b.connect(a.qpn)
        target = Buffer(self.pd, 64, base.ACCESS_ALL, fill=0x3c)
        src = Buffer(self.pd, 64, fill=0x77)
        before = target.snapshot()
        a.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [src.sge(0, 64)], wr_id=1,
                                 rdma=(target.rkey, target.addr)))
        self.assertWC(a.poll()[0], wr_id=1, status=e.IBV_WC_RETRY_EXC_ERR)
        self.assertEqual(target.snapshot(), before)

    def test_uc_write_into_an_rc_qp_is_lost(self):
        a = base.Peer(self.ctx, self.pd, UC)
        b = base.Peer(self.ctx, self.pd, RC)
        a.connect(b.qpn)
        b.connect(a.qpn)
        target = Buffer(self.pd, 64, base.ACCESS_ALL, fill=0x3c)
        src = Buffer(self.pd, 64, fill=0x77)
        before = target.snapshot()
        a.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [src.sge(0, 64)], wr_id=2,
                                 rdma=(target.rkey, target.addr)))
        self.assertWC(a.poll()[0], wr_id=2, status=OK)
        self.assertEqual(target.snapshot(), before)
        self.assertEqual(base.STATE_NAMES[state(b)], base.STATE_NAMES[e.IBV_QPS_RTS])


class InlineReadTest(ErrorTestCase):
    """Issue 17 item 8: IBV_SEND_INLINE on an RDMA READ is ignored, as mlx5 does; an SGE outside
    every MR completes IBV_WC_LOC_PROT_ERR -- never a crash copying it as inline data."""

    def test_inline_read_with_an_unmapped_sge_is_a_local_protection_error(self):
        a, b = self.pair()
        target = Buffer(self.pd, 64, base.ACCESS_ALL, fill=0x3c)
        local = Buffer(self.pd, 64, fill=0x77)
        unmapped = base.SGE(0x10, 64, local.lkey)  # reading it as inline data would fault
        a.post_send(base.send_wr(e.IBV_WR_RDMA_READ, [unmapped], wr_id=3, rdma=(target.rkey, target.addr),
                                 flags=e.IBV_SEND_SIGNALED | e.IBV_SEND_INLINE))
        self.assertWC(a.poll()[0], wr_id=3, status=e.IBV_WC_LOC_PROT_ERR)

    def test_inline_read_of_a_registered_buffer_reads(self):
        a, b = self.pair()
        target = Buffer(self.pd, 64, base.ACCESS_ALL, fill=0x3c)
        local = Buffer(self.pd, 64, fill=0x77)
        a.post_send(base.send_wr(e.IBV_WR_RDMA_READ, [local.sge(0, 64)], wr_id=4, rdma=(target.rkey, target.addr),
                                 flags=e.IBV_SEND_SIGNALED | e.IBV_SEND_INLINE))
        self.assertWC(a.poll()[0], wr_id=4, status=OK)
        self.assertEqual(local.read(0, 64), bytes([0x3c]) * 64)
