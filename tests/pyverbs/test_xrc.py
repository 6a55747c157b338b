"""XRC on the same host (IBA annex A14; ibv_open_xrcd(3), ibv_create_srq_ex(3),
ibv_create_qp_ex(3), ibv_open_qp(3), ibv_post_send(3) qp_type.xrc.remote_srqn).

An XRC_SEND QP is connected to an XRC_RECV QP; every message names an XRC SRQ of the target's
domain, which receives it (its receive WQEs, its CQ, its PD for the memory keys). Data is checked
byte for byte, with guard bytes around every region; bad input is refused with the errno of the
man page (or the kernel, which decides it) and explained in the log.
"""
import errno
import os
import signal
import tempfile
import textwrap
import unittest

import base
import pyverbs.enums as e
from pyverbs.addr import GID
from pyverbs.cq import CQ
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttrEx

import xrc

tearDownModule = base.tear_down_module


def async_event(ctx):
    """The next async event's type (bounded: SIGALRM interrupts a wait that finds none)."""
    def expired(*_):
        raise TimeoutError('no async event within 5 s')
    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(5)
    try:
        ev = ctx.get_async_event()
        ev.ack()
        return ev.event_type
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


class XrcTestCase(base.SoftverbsTestCase):
    """A domain through a temporary file, two XRC SRQs in it, and one XRC connection."""

    def setUp(self):
        super().setUp()
        fd, self.path = tempfile.mkstemp(prefix='softverbs-xrcd-')
        self.fd = fd
        self.xrcd = xrc.open_xrcd(self.ctx, fd)
        self.srq_cq = CQ(self.ctx, 64, None, None, 0)
        self.srq_a = xrc.xrc_srq(self.ctx, self.pd, self.xrcd, self.srq_cq)
        self.srq_b = xrc.xrc_srq(self.ctx, self.pd, self.xrcd, self.srq_cq)
        self.tgt = xrc.recv_qp(self.ctx, self.xrcd)
        self.ini = xrc.send_qp(self.ctx, self.pd, self.cq)
        xrc.connect_recv(self.ctx, self.tgt, self.ini.qp_num)
        xrc.connect_send(self.ctx, self.ini, self.tgt.qp_num)

    def tearDown(self):
        super().tearDown()
        os.close(self.fd)
        os.unlink(self.path)

    def srqn(self, srq):
        return srq.get_srq_num()

    def async_event(self):
        return async_event(self.ctx)


class XrcDataTest(XrcTestCase):

    def test_send_lands_on_the_named_srq(self):
        src = base.Buffer(self.pd, 4096)
        a, b = base.Buffer(self.pd, 4096), base.Buffer(self.pd, 4096)
        self.srq_a.post_recv(base.recv_wr([a.sge()], wr_id=0xa))
        self.srq_b.post_recv(base.recv_wr([b.sge()], wr_id=0xb))
        for target, dest, wr_id, seed in ((self.srq_b, b, 0xb, 7), (self.srq_a, a, 0xa, 11)):
            payload = bytes((seed * i + 3) & 0xff for i in range(3000))
            src.write(payload)
            self.ini.post_send(xrc.xrc_wr(self.srqn(target), sges=[src.sge(0, 3000)], wr_id=seed))
            (sc,) = base.poll(self.cq)
            self.assertEqual(sc.status, e.IBV_WC_SUCCESS, base.wc_str(sc))
            self.assertEqual((sc.wr_id, sc.opcode), (seed, e.IBV_WC_SEND))
            (rc,) = base.poll(self.srq_cq)
            self.assertEqual(rc.status, e.IBV_WC_SUCCESS, base.wc_str(rc))
            self.assertEqual((rc.wr_id, rc.opcode, rc.byte_len), (wr_id, e.IBV_WC_RECV, 3000))
            self.assertEqual(rc.qp_num, self.tgt.qp_num)  # the XRC_RECV QP it came through
            self.assertEqual(dest.read(0, 3000), payload)
            self.assertEqual(dest.read(3000), bytes(1096))
            self.assertTrue(dest.guards_intact())
        self.assertEqual(base.drain(self.srq_cq), [])

    def test_send_with_imm_and_rnr_until_a_wqe_is_posted(self):
        src, dst = base.Buffer(self.pd, 64, fill=0x5c), base.Buffer(self.pd, 64)
        # No WQE on the SRQ yet: RNR NAK, retried (rnr_retry 7 is infinite) until one is posted.
        self.ini.post_send(xrc.xrc_wr(self.srqn(self.srq_a), opcode=e.IBV_WR_SEND_WITH_IMM,
                                      sges=[src.sge()], imm_data=0x12345678, wr_id=1))
        self.assertEqual(base.drain(self.cq, 0.1), [])
        self.srq_a.post_recv(base.recv_wr([dst.sge()], wr_id=2))
        (sc,) = base.poll(self.cq)
        self.assertEqual(sc.status, e.IBV_WC_SUCCESS, base.wc_str(sc))
        (rc,) = base.poll(self.srq_cq)
        self.assertEqual(rc.status, e.IBV_WC_SUCCESS, base.wc_str(rc))
        self.assertTrue(rc.wc_flags & e.IBV_WC_WITH_IMM)
        self.assertEqual(rc.imm_data, 0x12345678)
        self.assertEqual(dst.read(), bytes([0x5c]) * 64)

    def test_write_read_atomics_use_the_srq_pd(self):
        src = base.Buffer(self.pd, 256)
        target = base.Buffer(self.pd, 256)
        payload = bytes(range(200))
        src.write(payload)
        srqn = self.srqn(self.srq_a)
        self.ini.post_send(xrc.xrc_wr(srqn, opcode=e.IBV_WR_RDMA_WRITE, sges=[src.sge(0, 200)],
                                      rdma=(target.rkey, target.addr + 8), wr_id=1))
        (wc,) = base.poll(self.cq)
        self.assertEqual(wc.status, e.IBV_WC_SUCCESS, base.wc_str(wc))
        self.assertEqual(target.read(8, 200), payload)
        self.assertEqual(target.read(0, 8), bytes(8))
        self.assertTrue(target.guards_intact())
        # READ it back into another place.
        back = base.Buffer(self.pd, 256)
        self.ini.post_send(xrc.xrc_wr(srqn, opcode=e.IBV_WR_RDMA_READ, sges=[back.sge(0, 200)],
                                      rdma=(target.rkey, target.addr + 8), wr_id=2))
        (wc,) = base.poll(self.cq)
        self.assertEqual(wc.status, e.IBV_WC_SUCCESS, base.wc_str(wc))
        self.assertEqual(back.read(0, 200), payload)
        # FETCH_ADD then CMP_SWP on an aligned word.
        target.set_u64(40, 216)
        self.ini.post_send(xrc.xrc_wr(srqn, opcode=e.IBV_WR_ATOMIC_FETCH_AND_ADD, sges=[back.sge(0, 8)],
                                      atomic=(target.rkey, target.addr + 216, 2, 0), wr_id=3))
        (wc,) = base.poll(self.cq)
        self.assertEqual(wc.status, e.IBV_WC_SUCCESS, base.wc_str(wc))
        self.assertEqual((back.u64(0), target.u64(216)), (40, 42))
        self.ini.post_send(xrc.xrc_wr(srqn, opcode=e.IBV_WR_ATOMIC_CMP_AND_SWP, sges=[back.sge(8, 8)],
                                      atomic=(target.rkey, target.addr + 216, 42, 99), wr_id=4))
        (wc,) = base.poll(self.cq)
        self.assertEqual(wc.status, e.IBV_WC_SUCCESS, base.wc_str(wc))
        self.assertEqual((back.u64(8), target.u64(216)), (42, 99))
        # No receive WQE is consumed by RDMA: nothing on the SRQ's CQ.
        self.assertEqual(base.drain(self.srq_cq), [])

    def test_key_of_another_pd_than_the_srq_is_a_remote_access_error(self):
        # IBA A14.4.2: the responder checks R_Keys against the PD of the SRQ the XRCETH names.
        other_pd = PD(self.ctx)
        src = base.Buffer(self.pd, 64, fill=1)
        foreign = base.Buffer(other_pd, 64)
        before = foreign.snapshot()
        self.ini.post_send(xrc.xrc_wr(self.srqn(self.srq_a), opcode=e.IBV_WR_RDMA_WRITE, sges=[src.sge()],
                                      rdma=(foreign.rkey, foreign.addr), wr_id=5))
        (wc,) = base.poll(self.cq)
        self.assertEqual(wc.status, e.IBV_WC_REM_ACCESS_ERR, base.wc_str(wc))
        self.assertEqual(foreign.snapshot(), before)
        # The XRC_RECV QP hit a responder error: ERR, as an RC target (IBA 9.9.3).
        self.assertEqual(self.tgt.query(e.IBV_QP_STATE)[0].qp_state, e.IBV_QPS_ERR)

    def test_srq_limit_event_on_an_xrc_srq(self):
        # ibv_modify_srq(3): an armed limit fires IBV_EVENT_SRQ_LIMIT_REACHED once the SRQ holds
        # fewer WQEs than it -- here consumed by XRC messages.
        from pyverbs.srq import SrqAttr
        dst, src = base.Buffer(self.pd, 8 * 64), base.Buffer(self.pd, 64, fill=4)
        for k in range(4):
            self.srq_a.post_recv(base.recv_wr([dst.sge(64 * k, 64)], wr_id=k))
        self.srq_a.modify(SrqAttr(srq_limit=3), e.IBV_SRQ_LIMIT)
        for k in range(2):
            self.ini.post_send(xrc.xrc_wr(self.srqn(self.srq_a), sges=[src.sge()], wr_id=k))
        base.poll(self.cq, 2)
        self.assertEqual([w.wr_id for w in base.poll(self.srq_cq, 2)], [0, 1])
        self.assertEqual(self.async_event(), e.IBV_EVENT_SRQ_LIMIT_REACHED)

    def test_wr_set_xrc_srqn_through_qp_ex(self):
        from pyverbs.qp import QPEx
        cap = QPCap(max_send_wr=8, max_recv_wr=0, max_send_sge=1, max_recv_sge=0)
        attr = QPInitAttrEx(qp_type=e.IBV_QPT_XRC_SEND, pd=self.pd, scq=self.cq, cap=cap,
                            comp_mask=e.IBV_QP_INIT_ATTR_PD | e.IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
                            send_ops_flags=e.IBV_QP_EX_WITH_SEND)
        ini = QPEx(self.ctx, attr)
        tgt = xrc.recv_qp(self.ctx, self.xrcd)
        xrc.connect_recv(self.ctx, tgt, ini.qp_num)
        xrc.connect_send(self.ctx, ini, tgt.qp_num)
        src, dst = base.Buffer(self.pd, 128), base.Buffer(self.pd, 128)
        src.write(b'qp_ex over xrc' * 9)
        self.srq_b.post_recv(base.recv_wr([dst.sge()], wr_id=77))
        ini.wr_start()
        ini.wr_id = 66
        ini.wr_flags = e.IBV_SEND_SIGNALED
        ini.wr_send()
        ini.wr_set_xrc_srqn(self.srqn(self.srq_b))
        ini.wr_set_sge(src.sge(0, 126))
        ini.wr_complete()
        (sc,) = base.poll(self.cq)
        self.assertEqual((sc.status, sc.wr_id), (e.IBV_WC_SUCCESS, 66), base.wc_str(sc))
        (rc,) = base.poll(self.srq_cq)
        self.assertEqual((rc.status, rc.wr_id, rc.byte_len, rc.qp_num), (e.IBV_WC_SUCCESS, 77, 126, tgt.qp_num))
        self.assertEqual(dst.read(0, 126), b'qp_ex over xrc' * 9)


class XrcBadInputTest(XrcTestCase):

    def _nak(self, srqn):
        src = base.Buffer(self.pd, 32, fill=9)
        self.ini.post_send(xrc.xrc_wr(srqn, sges=[src.sge()], wr_id=3))
        (wc,) = base.poll(self.cq)
        return wc

    def test_srq_of_another_domain_is_an_invalid_request(self):
        other = xrc.open_xrcd(self.ctx)  # without a file: a domain of its own
        foreign = xrc.xrc_srq(self.ctx, self.pd, other, self.srq_cq)
        dst = base.Buffer(self.pd, 64)
        before = dst.snapshot()
        foreign.post_recv(base.recv_wr([dst.sge()], wr_id=1))
        wc = self._nak(foreign.get_srq_num())
        self.assertEqual(wc.status, e.IBV_WC_REM_INV_REQ_ERR, base.wc_str(wc))
        self.assertEqual(dst.snapshot(), before)
        self.assertEqual(base.drain(self.srq_cq), [])
        self.assertEqual(self.tgt.query(e.IBV_QP_STATE)[0].qp_state, e.IBV_QPS_ERR)
        self.assertEqual(self.async_event(), e.IBV_EVENT_QP_ACCESS_ERR)

    def test_unknown_srq_number_is_an_invalid_request(self):
        for srqn in (0, 0xfffff0):
            with self.subTest(srqn=hex(srqn)):
                # A fresh connection each time: the NAK moves the target QP to ERR.
                self.tgt = xrc.recv_qp(self.ctx, self.xrcd)
                self.ini = xrc.send_qp(self.ctx, self.pd, self.cq)
                xrc.connect_recv(self.ctx, self.tgt, self.ini.qp_num)
                xrc.connect_send(self.ctx, self.ini, self.tgt.qp_num)
                wc = self._nak(srqn)
                self.assertEqual(wc.status, e.IBV_WC_REM_INV_REQ_ERR, base.wc_str(wc))

    def test_plain_srq_is_not_an_xrc_srq(self):
        from pyverbs.srq import SRQ, SrqAttr, SrqInitAttr
        basic = SRQ(self.pd, SrqInitAttr(SrqAttr(max_wr=4, max_sge=1)))
        wc = self._nak(basic.get_srq_num())
        self.assertEqual(wc.status, e.IBV_WC_REM_INV_REQ_ERR, base.wc_str(wc))

    def test_post_to_queues_xrc_qps_do_not_have(self):
        dst = base.Buffer(self.pd, 64)
        self.assertRDMAError(errno.EINVAL, self.ini.post_recv, base.recv_wr([dst.sge()]))
        self.assertRDMAError(errno.EINVAL, self.tgt.post_recv, base.recv_wr([dst.sge()]))
        self.assertRDMAError(errno.EINVAL, self.tgt.post_send, xrc.xrc_wr(self.srqn(self.srq_a), sges=[dst.sge()]))

    def test_recv_qp_without_xrcd_is_einval(self):
        attr = QPInitAttrEx(qp_type=e.IBV_QPT_XRC_RECV, comp_mask=e.IBV_QP_INIT_ATTR_PD, pd=self.pd,
                            scq=self.cq, rcq=self.cq, cap=base.default_cap())
        self.assertRDMAError(errno.EINVAL, QP, self.ctx, attr)

    def test_xrc_srq_needs_xrcd_and_cq(self):
        from pyverbs.srq import SRQ, SrqInitAttrEx
        for drop in (e.IBV_SRQ_INIT_ATTR_XRCD, e.IBV_SRQ_INIT_ATTR_CQ, e.IBV_SRQ_INIT_ATTR_PD):
            with self.subTest(drop=drop):
                attr = SrqInitAttrEx(max_wr=4, max_sge=1)
                attr.srq_type = e.IBV_SRQT_XRC
                attr.pd, attr.xrcd, attr.cq = self.pd, self.xrcd, self.srq_cq
                attr.comp_mask = (e.IBV_SRQ_INIT_ATTR_TYPE | e.IBV_SRQ_INIT_ATTR_PD | e.IBV_SRQ_INIT_ATTR_CQ |
                                  e.IBV_SRQ_INIT_ATTR_XRCD) & ~drop
                self.assertRDMAError(errno.EINVAL, SRQ, self.ctx, attr)

    def test_modify_ignores_the_other_halfs_attributes(self):
        # The kernel's modify_qp_mask(): RC's full attribute sets work on both halves (perftest
        # -c XRC passes them); what a half does not have is ignored, not refused.
        ini = xrc.send_qp(self.ctx, self.pd, self.cq)
        tgt = xrc.recv_qp(self.ctx, self.xrcd)
        for qp, remote in ((ini, tgt.qp_num), (tgt, ini.qp_num)):
            a = QPAttr(qp_state=e.IBV_QPS_INIT)
            a.pkey_index, a.port_num, a.qp_access_flags = 0, base.PORT, base.ACCESS_ALL
            qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS)
            a = QPAttr(qp_state=e.IBV_QPS_RTR)
            a.ah_attr = base.global_ah_attr(self.ctx)
            a.path_mtu, a.dest_qp_num, a.rq_psn, a.max_dest_rd_atomic, a.min_rnr_timer = e.IBV_MTU_1024, remote, 0, 4, 12
            qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN | e.IBV_QP_RQ_PSN |
                      e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER)
            a = QPAttr(qp_state=e.IBV_QPS_RTS)
            a.sq_psn, a.timeout, a.retry_cnt, a.rnr_retry, a.max_rd_atomic = 0, 14, 7, 7, 4
            qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_SQ_PSN | e.IBV_QP_TIMEOUT | e.IBV_QP_RETRY_CNT |
                      e.IBV_QP_RNR_RETRY | e.IBV_QP_MAX_QP_RD_ATOMIC)
            self.assertEqual(qp.query(e.IBV_QP_STATE)[0].qp_state, e.IBV_QPS_RTS)
        # An XRC_SEND QP's RTR toward a GID of another host: no XRCETH on the wire yet.
        far = xrc.send_qp(self.ctx, self.pd, self.cq)
        a = QPAttr(qp_state=e.IBV_QPS_INIT)
        a.pkey_index, a.port_num = 0, base.PORT
        far.modify(a, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT)
        a = QPAttr(qp_state=e.IBV_QPS_RTR)
        a.ah_attr = base.AHAttr(port_num=base.PORT, is_global=1,
                                gr=base.GlobalRoute(dgid=GID('0000:0000:0000:0000:0000:ffff:c000:0201'),  # 192.0.2.1
                                                    sgid_index=1, hop_limit=64))
        a.path_mtu, a.dest_qp_num = e.IBV_MTU_1024, tgt.qp_num
        self.assertRDMAError(errno.EOPNOTSUPP, far.modify, a,
                             e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN)

    def test_srq_numbers_are_distinct_and_stable(self):
        nums = {self.srqn(self.srq_a), self.srqn(self.srq_b)}
        self.assertEqual(len(nums), 2)
        self.assertEqual(self.srqn(self.srq_a), self.srqn(self.srq_a))


class XrcdTest(base.SoftverbsTestCase):
    """ibv_open_xrcd(3): the same file is the same domain; O_CREAT and O_EXCL as the kernel."""

    def setUp(self):
        super().setUp()
        fd, self.path = tempfile.mkstemp(prefix='softverbs-xrcd-')
        os.close(fd)

    def tearDown(self):
        super().tearDown()
        os.unlink(self.path)

    def test_open_flags(self):
        fd = os.open(self.path, os.O_RDONLY)
        try:
            # No domain for this file yet: without O_CREAT, EAGAIN (ib_uverbs_open_xrcd).
            self.assertRDMAError(errno.EAGAIN, xrc.open_xrcd, self.ctx, fd, 0)
            first = xrc.open_xrcd(self.ctx, fd, os.O_CREAT | os.O_EXCL)
            # Now it exists: O_EXCL is EINVAL; plain open and O_CREAT both find it.
            self.assertRDMAError(errno.EINVAL, xrc.open_xrcd, self.ctx, fd, os.O_CREAT | os.O_EXCL)
            again = xrc.open_xrcd(self.ctx, fd, 0)
            also = xrc.open_xrcd(self.ctx, fd, os.O_CREAT)
            for x in (also, again, first):
                x.close()
            # All closed: the domain is gone.
            self.assertRDMAError(errno.EAGAIN, xrc.open_xrcd, self.ctx, fd, 0)
        finally:
            os.close(fd)

    def test_bad_fd_and_comp_mask(self):
        self.assertRDMAError(errno.EBADF, xrc.open_xrcd, self.ctx, 987654, os.O_CREAT)
        from pyverbs.xrcd import XRCD, XRCDInitAttr
        self.assertRDMAError(errno.EINVAL, XRCD, self.ctx, XRCDInitAttr(e.IBV_XRCD_INIT_ATTR_FD, 0, -1))
        self.assertRDMAError(errno.EOPNOTSUPP, XRCD, self.ctx,
                             XRCDInitAttr(xrc.XRCD_MASK | e.IBV_XRCD_INIT_ATTR_RESERVED, os.O_CREAT, -1))

    def test_same_file_same_domain_across_processes(self):
        # A target QP in this process's domain; another process opens the domain through the same
        # file without O_CREAT (it exists because we hold it), then opens the target QP.
        fd = os.open(self.path, os.O_RDONLY)
        xrcd = xrc.open_xrcd(self.ctx, fd)
        tgt = xrc.recv_qp(self.ctx, xrcd)
        rc_qp, _ = base.create_qp(base.CREATE_QP, self.ctx, self.pd, self.cq, e.IBV_QPT_RC)
        xrc.connect_recv(self.ctx, tgt, 0x123)
        other = tempfile.NamedTemporaryFile(prefix='softverbs-xrcd-')
        code = textwrap.dedent(f'''
            import os, errno
            import base  # (it clears SOFTVERBS_LOG for the tests' own processes: this child logs)
            os.environ['SOFTVERBS_LOG'] = 'error'
            import raw, xrc
            import pyverbs.enums as e
            r = raw.RawContext()
            fd = os.open({self.path!r}, os.O_RDONLY)
            x, err = xrc.raw_open_xrcd(r, fd, 0)
            print('open_shared', bool(x), err)
            qp, err = xrc.raw_open_qp(r, x, {tgt.qp_num})
            print('open_qp', bool(qp), err, qp and qp.contents.qp_num, qp and qp.contents.qp_type)
            print('state', qp and xrc.raw_qp_state(qp))
            print('modify_other_process', xrc.raw_modify_state(qp, e.IBV_QPS_ERR))
            _, err = xrc.raw_open_qp(r, x, 0xfffff0)
            print('unknown_qpn', err)
            _, err = xrc.raw_open_qp(r, x, {rc_qp.qp_num})
            print('rc_qpn', err)
            _, err = xrc.raw_open_qp(r, x, {tgt.qp_num}, qp_type=e.IBV_QPT_RC)
            print('wrong_type', err)
            fd2 = os.open({other.name!r}, os.O_RDONLY)
            _, err = xrc.raw_open_xrcd(r, fd2, 0)
            print('unshared_file', err)
            y, err = xrc.raw_open_xrcd(r, fd2, os.O_CREAT)
            _, err = xrc.raw_open_qp(r, y, {tgt.qp_num})
            print('other_domain', err)
            raw.lib.ibv_destroy_qp(qp)
            print('close', xrc.raw_close_xrcd(r, y), xrc.raw_close_xrcd(r, x))
        ''')
        out = base.run_python(code, SOFTVERBS_LOG='error')
        other.close()
        lines = dict(l.split(' ', 1) for l in out.stdout.splitlines() if ' ' in l)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(lines.get('open_shared'), 'True 0', out.stdout)
        self.assertEqual(lines.get('open_qp'), f'True 0 {tgt.qp_num} {e.IBV_QPT_XRC_RECV}', out.stdout)
        self.assertEqual(lines.get('state'), str(e.IBV_QPS_RTR))
        # The other process's handle modifies the same QP (RTR -> ERR).
        self.assertEqual(lines.get('modify_other_process'), '0')
        self.assertEqual(tgt.query(e.IBV_QP_STATE)[0].qp_state, e.IBV_QPS_ERR)
        # ib_open_qp: a number that is no target QP of the domain is EINVAL.
        for key in ('unknown_qpn', 'rc_qpn', 'wrong_type', 'other_domain'):
            self.assertEqual(lines.get(key), str(errno.EINVAL), (key, out.stdout))
        self.assertEqual(lines.get('unshared_file'), str(errno.EAGAIN))
        self.assertEqual(lines.get('close'), '0 0')
        # Each refusal explained on one log line naming its verb.
        self.assertGreaterEqual(out.stderr.count('ibv_open_qp'), 4, out.stderr)
        self.assertIn('ibv_open_xrcd', out.stderr)
        self.assertIn('O_CREAT', out.stderr)
        os.close(fd)

    def test_errors_reach_every_handle(self):
        # The kernel reports a shared QP's events to each of its handles: a failure at the
        # XRC_RECV QP is IBV_EVENT_QP_ACCESS_ERR for its creator and for another process's
        # ibv_open_qp handle, which then reads the QP in ERR.
        fd = os.open(self.path, os.O_RDONLY)
        self.addCleanup(os.close, fd)
        xrcd = xrc.open_xrcd(self.ctx, fd)
        srq_cq = CQ(self.ctx, 16, None, None, 0)
        tgt = xrc.recv_qp(self.ctx, xrcd)
        ini = xrc.send_qp(self.ctx, self.pd, self.cq)
        xrc.connect_recv(self.ctx, tgt, ini.qp_num)
        xrc.connect_send(self.ctx, ini, tgt.qp_num)
        code = textwrap.dedent(f'''
            import ctypes, os, signal, sys
            import raw, xrc
            r = raw.RawContext()
            x, err = xrc.raw_open_xrcd(r, os.open({self.path!r}, os.O_RDONLY), 0)
            qp, err = xrc.raw_open_qp(r, x, {tgt.qp_num})
            print('ready', bool(qp), err, flush=True)
            signal.alarm(5)
            ev = raw.IbvAsyncEvent()
            rc = raw.lib.ibv_get_async_event(r.ctx, ctypes.byref(ev))
            mine = ev.element == ctypes.cast(qp, ctypes.c_void_p).value
            print('event', rc, ev.event_type, mine, xrc.raw_qp_state(qp), flush=True)
            raw.lib.ibv_ack_async_event(ctypes.byref(ev))
        ''')
        child = base.start_python(code)
        self.addCleanup(base.stop_child, child)
        lines = base.LineReader(child)
        self.addCleanup(lines.close)
        self.assertEqual(lines.readline(), 'ready True 0')
        other = xrc.open_xrcd(self.ctx)
        foreign = xrc.xrc_srq(self.ctx, self.pd, other, srq_cq)
        src = base.Buffer(self.pd, 16)
        ini.post_send(xrc.xrc_wr(foreign.get_srq_num(), sges=[src.sge()], wr_id=1))
        (wc,) = base.poll(self.cq)
        self.assertEqual(wc.status, e.IBV_WC_REM_INV_REQ_ERR, base.wc_str(wc))
        self.assertEqual(lines.readline(), f'event 0 {e.IBV_EVENT_QP_ACCESS_ERR} True {e.IBV_QPS_ERR}')
        self.assertEqual(async_event(self.ctx), e.IBV_EVENT_QP_ACCESS_ERR)

    def test_open_qp_in_the_same_process_modifies_the_qp(self):
        import raw
        fd = os.open(self.path, os.O_RDONLY)
        xrcd = xrc.open_xrcd(self.ctx, fd)
        tgt = xrc.recv_qp(self.ctx, xrcd)
        xrc.connect_recv(self.ctx, tgt, 0x321)
        with raw.RawContext() as r:
            x, err = xrc.raw_open_xrcd(r, fd, 0)
            self.assertTrue(x, err)
            qp, err = xrc.raw_open_qp(r, x, tgt.qp_num)
            self.assertTrue(qp, err)
            self.assertEqual(xrc.raw_qp_state(qp), e.IBV_QPS_RTR)
            self.assertEqual(xrc.raw_modify_state(qp, e.IBV_QPS_ERR), 0)
            self.assertEqual(tgt.query(e.IBV_QP_STATE)[0].qp_state, e.IBV_QPS_ERR)
            self.assertEqual(raw.lib.ibv_destroy_qp(qp), 0)
            # The creator's QP lives on after the opened handle is gone.
            self.assertEqual(tgt.query(e.IBV_QP_STATE)[0].qp_state, e.IBV_QPS_ERR)
            self.assertEqual(xrc.raw_close_xrcd(r, x), 0)
        os.close(fd)

    def test_close_domain_in_use(self):
        # The kernel's ib_uverbs_dealloc_xrcd: a domain without a file ends with its handle, so
        # one still used by a QP is EBUSY; a file's domain only loses a use (the QP keeps it).
        import raw
        fd = os.open(self.path, os.O_RDONLY)
        with raw.RawContext() as r:
            for file_fd, expected in ((-1, errno.EBUSY), (fd, 0)):
                with self.subTest(fd=file_fd):
                    x, err = xrc.raw_open_xrcd(r, file_fd)
                    self.assertTrue(x, err)
                    qp, err = xrc.raw_create_recv_qp(r, x)
                    self.assertTrue(qp, err)
                    rc = xrc.raw_close_xrcd(r, x)
                    self.assertEqual(rc, expected)
                    if file_fd != -1:
                        # Closed, yet the domain exists while its QP does: another open finds it.
                        y, err = xrc.raw_open_xrcd(r, fd, 0)
                        self.assertTrue(y, err)
                        self.assertEqual(xrc.raw_close_xrcd(r, y), 0)
                    self.assertEqual(raw.lib.ibv_destroy_qp(qp), 0)
                    if rc != 0:
                        self.assertEqual(xrc.raw_close_xrcd(r, x), 0)
            # The last user gone, the file's domain is gone too.
            _, err = xrc.raw_open_xrcd(r, fd, 0)
            self.assertEqual(err, errno.EAGAIN)
        os.close(fd)


if __name__ == '__main__':
    unittest.main()
