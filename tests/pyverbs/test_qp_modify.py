"""ibv_modify_qp(3) (seed 004): the RESET->INIT->RTR->RTS walks of RC, UC and UD with exactly the
required attributes, the other transitions, and refusals that change nothing."""
import errno
import unittest

import base
import pyverbs.enums as e
from base import CREATE_CALLS
from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.qp import QPAttr

tearDownModule = base.tear_down_module

RC, UC, UD = e.IBV_QPT_RC, e.IBV_QPT_UC, e.IBV_QPT_UD
RESET, INIT, RTR, RTS = e.IBV_QPS_RESET, e.IBV_QPS_INIT, e.IBV_QPS_RTR, e.IBV_QPS_RTS
SQD, ERR = e.IBV_QPS_SQD, e.IBV_QPS_ERR

# The tables of ibv_modify_qp(3), beyond IBV_QP_STATE.
REQUIRED = {
    RC: {INIT: e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS,
         RTR: e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN | e.IBV_QP_RQ_PSN |
         e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER,
         RTS: e.IBV_QP_SQ_PSN | e.IBV_QP_MAX_QP_RD_ATOMIC | e.IBV_QP_RETRY_CNT |
         e.IBV_QP_RNR_RETRY | e.IBV_QP_TIMEOUT},
    UC: {INIT: e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS,
         RTR: e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN | e.IBV_QP_RQ_PSN,
         RTS: e.IBV_QP_SQ_PSN},
    UD: {INIT: e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_QKEY,
         RTR: 0,
         RTS: e.IBV_QP_SQ_PSN},
}
PREVIOUS = {INIT: RESET, RTR: INIT, RTS: RTR}

MASK_NAMES = {getattr(e, n): n for n in dir(e)
              if n.startswith('IBV_QP_') and isinstance(getattr(e, n), int)
              and n[7:] in ('STATE', 'CUR_STATE', 'EN_SQD_ASYNC_NOTIFY', 'ACCESS_FLAGS',
                            'PKEY_INDEX', 'PORT', 'QKEY', 'AV', 'PATH_MTU', 'TIMEOUT',
                            'RETRY_CNT', 'RNR_RETRY', 'RQ_PSN', 'MAX_QP_RD_ATOMIC', 'ALT_PATH',
                            'MIN_RNR_TIMER', 'SQ_PSN', 'MAX_DEST_RD_ATOMIC', 'PATH_MIG_STATE',
                            'CAP', 'DEST_QPN', 'RATE_LIMIT')}


def bits(mask):
    return [b for b in sorted(MASK_NAMES) if mask & b]


class ModifyTestCase(base.SoftverbsTestCase):

    def setUp(self):
        super().setUp()
        self.gid1 = self.ctx.query_gid(base.PORT, 1)
        # The remote end of connected QPs: another QP of this context.
        self.peer = base.create_qp(base.CREATE_QP, self.ctx, self.pd, self.cq, RC)[0]

    def new_qp(self, qpt, call=base.CREATE_QP):
        return base.create_qp(call, self.ctx, self.pd, self.cq, qpt)[0]

    def attrs(self, qpt, state):
        """Valid values for the required attributes of <-> `state`, distinct from defaults."""
        a = QPAttr(qp_state=state)
        if state == INIT:
            a.pkey_index = 0
            a.port_num = base.PORT
            a.qkey = 0x11111111
            a.qp_access_flags = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE |
                                 (e.IBV_ACCESS_REMOTE_READ | e.IBV_ACCESS_REMOTE_ATOMIC
                                  if qpt == RC else 0))
        elif state == RTR:
            a.ah_attr = base.global_ah_attr(self.ctx, sgid_index=1, dgid_index=1)
            a.path_mtu = e.IBV_MTU_2048
            a.dest_qp_num = self.peer.qp_num
            a.rq_psn = 0x123456
            a.max_dest_rd_atomic = 8
            a.min_rnr_timer = 12
        elif state == RTS:
            a.sq_psn = 0x654321
            a.max_rd_atomic = 4
            a.retry_cnt = 6
            a.rnr_retry = 7
            a.timeout = 14
        return a

    def mask(self, qpt, state):
        return e.IBV_QP_STATE | REQUIRED[qpt][state]

    def step(self, qp, qpt, state):
        qp.modify(self.attrs(qpt, state), self.mask(qpt, state))

    def walk(self, qp, qpt, to):
        for state in (INIT, RTR, RTS):
            self.step(qp, qpt, state)
            if state == to:
                return qp
        return qp

    def qp_in(self, qpt, state, call=base.CREATE_QP):
        qp = self.new_qp(qpt, call)
        if state != RESET:
            self.walk(qp, qpt, state)
        self.assertEqual(qp.qp_state, state)
        return qp

    def assertRefused(self, code, qp, attr, mask):
        """modify must fail with `code` and leave every attribute, the state included, as it was."""
        before = base.qp_snapshot(qp)
        state = qp.qp_state
        self.assertRDMAError(code, qp.modify, attr, mask)
        self.assertEqual(base.qp_snapshot(qp), before)
        self.assertEqual(qp.qp_state, state)


class WalkTest(ModifyTestCase):

    def check_common(self, qp, qpt, state):
        a, _ = qp.query(base.QUERY_ALL)
        self.assertEqual(a.qp_state, state)
        self.assertEqual(qp.qp_state, state)  # struct ibv_qp.state tracks too
        self.assertEqual(a.port_num, base.PORT)
        self.assertEqual(a.pkey_index, 0)
        return a

    def test_walks_with_exactly_the_required_attributes(self):
        for call in CREATE_CALLS:
            for qpt in (RC, UC, UD):
                with self.subTest(call=call, qp_type=base.QPT_NAMES[qpt]):
                    self.walk_and_check(qpt, call)

    def walk_and_check(self, qpt, call):
        qp = self.new_qp(qpt, call)
        i, r, s = self.attrs(qpt, INIT), self.attrs(qpt, RTR), self.attrs(qpt, RTS)

        self.step(qp, qpt, INIT)
        a = self.check_common(qp, qpt, INIT)
        if qpt == UD:
            self.assertEqual(a.qkey, i.qkey)
        else:
            self.assertEqual(a.qp_access_flags, i.qp_access_flags)

        self.step(qp, qpt, RTR)
        a = self.check_common(qp, qpt, RTR)
        if qpt != UD:
            self.assertEqual(a.path_mtu, r.path_mtu)
            self.assertEqual(a.dest_qp_num, self.peer.qp_num)
            self.assertEqual(a.rq_psn, r.rq_psn)
            self.assertEqual(a.ah_attr.is_global, 1)
            self.assertEqual(a.ah_attr.sgid_index, 1)
            self.assertEqual(base.gid_address(a.ah_attr.dgid), base.gid_address(self.gid1))
            self.assertEqual(a.ah_attr.hop_limit, 64)
            self.assertEqual(a.ah_attr.port_num, base.PORT)
        if qpt == RC:
            self.assertEqual(a.max_dest_rd_atomic, r.max_dest_rd_atomic)
            self.assertEqual(a.min_rnr_timer, r.min_rnr_timer)

        self.step(qp, qpt, RTS)
        a = self.check_common(qp, qpt, RTS)
        self.assertEqual(a.sq_psn, s.sq_psn)
        if qpt == RC:
            self.assertEqual(a.max_rd_atomic, s.max_rd_atomic)
            self.assertEqual(a.retry_cnt, s.retry_cnt)
            self.assertEqual(a.rnr_retry, s.rnr_retry)
            self.assertEqual(a.timeout, s.timeout)
            self.assertEqual(a.max_dest_rd_atomic, r.max_dest_rd_atomic)
            self.assertEqual(a.min_rnr_timer, r.min_rnr_timer)
        # Earlier attributes survive later transitions.
        if qpt == UD:
            self.assertEqual(a.qkey, i.qkey)
        else:
            self.assertEqual(a.qp_access_flags, i.qp_access_flags)
            self.assertEqual(a.rq_psn, r.rq_psn)
            self.assertEqual(a.dest_qp_num, self.peer.qp_num)
            self.assertEqual(a.path_mtu, r.path_mtu)
            self.assertEqual(base.gid_address(a.ah_attr.dgid), base.gid_address(self.gid1))

    def test_device_maxima_are_accepted(self):
        qp = self.qp_in(RC, INIT)
        r = self.attrs(RC, RTR)
        r.max_dest_rd_atomic, r.min_rnr_timer, r.path_mtu = 16, 31, e.IBV_MTU_4096
        r.rq_psn = 0xffffff
        qp.modify(r, self.mask(RC, RTR))
        s = self.attrs(RC, RTS)
        s.max_rd_atomic, s.timeout, s.retry_cnt, s.rnr_retry, s.sq_psn = 16, 31, 7, 7, 0xffffff
        qp.modify(s, self.mask(RC, RTS))
        a, _ = qp.query(base.QUERY_ALL)
        self.assertEqual((a.max_dest_rd_atomic, a.min_rnr_timer, a.path_mtu, a.rq_psn),
                         (16, 31, e.IBV_MTU_4096, 0xffffff))
        self.assertEqual((a.max_rd_atomic, a.timeout, a.retry_cnt, a.rnr_retry, a.sq_psn),
                         (16, 31, 7, 7, 0xffffff))

    def test_rts_sqd_rts(self):
        for qpt in (RC, UC, UD):
            with self.subTest(qp_type=base.QPT_NAMES[qpt]):
                qp = self.qp_in(qpt, RTS)
                before = base.qp_snapshot(qp)
                qp.modify(QPAttr(qp_state=SQD), e.IBV_QP_STATE)
                self.assertEqual(qp.qp_state, SQD)
                self.assertEqual(qp.query(e.IBV_QP_STATE)[0].qp_state, SQD)
                qp.modify(QPAttr(qp_state=RTS), e.IBV_QP_STATE)
                self.assertEqual(qp.qp_state, RTS)
                self.assertEqual(base.qp_snapshot(qp), before)

    def test_any_state_to_err_and_back_to_reset(self):
        for qpt in (RC, UC, UD):
            for state in (INIT, RTR, RTS, SQD):
                with self.subTest(qp_type=base.QPT_NAMES[qpt], state=base.STATE_NAMES[state]):
                    qp = self.qp_in(qpt, RTS if state == SQD else state)
                    if state == SQD:
                        qp.modify(QPAttr(qp_state=SQD), e.IBV_QP_STATE)
                    qp.modify(QPAttr(qp_state=ERR), e.IBV_QP_STATE)
                    self.assertEqual(qp.qp_state, ERR)
                    self.assertEqual(qp.query(e.IBV_QP_STATE)[0].qp_state, ERR)
                    qp.modify(QPAttr(qp_state=RESET), e.IBV_QP_STATE)
                    self.assertEqual(qp.qp_state, RESET)

    def test_reset_to_err_is_refused_as_on_hcas(self):
        # IBA allows ERR from every state; HCAs (and Linux's ib_modify_qp_is_ok) refuse it from
        # RESET, where the QP holds nothing to fail. Code that passes here must pass there.
        for qpt in (RC, UC, UD):
            with self.subTest(qp_type=base.QPT_NAMES[qpt]):
                qp = self.new_qp(qpt)
                self.assertRDMAError(errno.EINVAL, qp.modify, QPAttr(qp_state=ERR), e.IBV_QP_STATE)
                self.assertEqual(qp.query(e.IBV_QP_STATE)[0].qp_state, RESET)

    def test_any_state_to_reset(self):
        for state in (INIT, RTR, RTS):
            with self.subTest(state=base.STATE_NAMES[state]):
                qp = self.qp_in(RC, state)
                qp.modify(QPAttr(qp_state=RESET), e.IBV_QP_STATE)
                self.assertEqual(qp.qp_state, RESET)

    def test_reset_resets_attributes(self):
        for qpt in (RC, UC, UD):
            with self.subTest(qp_type=base.QPT_NAMES[qpt]):
                qp = self.new_qp(qpt)
                fresh = base.qp_snapshot(qp)
                self.walk(qp, qpt, RTS)
                self.assertNotEqual(base.qp_snapshot(qp), fresh)
                qp.modify(QPAttr(qp_state=ERR), e.IBV_QP_STATE)
                qp.modify(QPAttr(qp_state=RESET), e.IBV_QP_STATE)
                self.assertEqual(base.qp_snapshot(qp), fresh)
                # The QP is usable again.
                self.walk(qp, qpt, RTS)
                self.assertEqual(qp.qp_state, RTS)

    def test_cur_qp_state_matching_is_accepted(self):
        qp = self.qp_in(RC, RTR)
        s = self.attrs(RC, RTS)
        s.cur_qp_state = RTR
        qp.modify(s, self.mask(RC, RTS) | e.IBV_QP_CUR_STATE)
        self.assertEqual(qp.qp_state, RTS)

    def test_optional_attributes_apply(self):
        # RTS->RTS may change the access flags and min_rnr_timer of an RC QP (IBA 11.2.4.2).
        qp = self.qp_in(RC, RTS)
        a = QPAttr(qp_state=RTS)
        a.qp_access_flags = e.IBV_ACCESS_LOCAL_WRITE
        a.min_rnr_timer = 3
        qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_ACCESS_FLAGS | e.IBV_QP_MIN_RNR_TIMER)
        q, _ = qp.query(base.QUERY_ALL)
        self.assertEqual((q.qp_access_flags, q.min_rnr_timer), (e.IBV_ACCESS_LOCAL_WRITE, 3))
        # A UD QP may change its Q_Key on the way to RTS.
        ud = self.qp_in(UD, RTR)
        s = self.attrs(UD, RTS)
        s.qkey = 0x2222
        ud.modify(s, self.mask(UD, RTS) | e.IBV_QP_QKEY)
        self.assertEqual(ud.query(e.IBV_QP_QKEY)[0].qkey, 0x2222)


class NoStateBitTest(ModifyTestCase):
    """ibv_modify_qp(3): attr_mask "is either 0 or the bitwise OR" of the flags; without
    IBV_QP_STATE the QP keeps its state and only the attributes change."""

    def test_optional_attribute_without_state_bit(self):
        qp = self.qp_in(RC, RTS)
        a = QPAttr()
        a.min_rnr_timer = 5
        qp.modify(a, e.IBV_QP_MIN_RNR_TIMER)
        self.assertEqual(qp.query(base.QUERY_ALL)[0].min_rnr_timer, 5)
        self.assertEqual(qp.qp_state, RTS)

    def test_mask_0_changes_nothing(self):
        for state in (RESET, INIT, RTS):
            with self.subTest(state=base.STATE_NAMES[state]):
                qp = self.qp_in(RC, state)
                before = base.qp_snapshot(qp)
                a = self.attrs(RC, RTS)
                a.qp_state = ERR
                qp.modify(a, 0)
                self.assertEqual(base.qp_snapshot(qp), before)


class PyverbsHelpersTest(ModifyTestCase):
    """pyverbs' own QP.to_rts (its masks are rdma-core's test masks) reaches RTS."""

    def test_to_rts(self):
        for qpt in (RC, UC):
            with self.subTest(qp_type=base.QPT_NAMES[qpt]):
                qp = self.new_qp(qpt)
                a = QPAttr(port_num=base.PORT)
                a.path_mtu, a.max_dest_rd_atomic, a.min_rnr_timer = e.IBV_MTU_1024, 1, 12
                a.max_rd_atomic, a.timeout, a.retry_cnt, a.rnr_retry = 1, 14, 7, 7
                a.ah_attr = base.global_ah_attr(self.ctx)
                a.dest_qp_num = self.peer.qp_num
                qp.to_rts(a)
                self.assertEqual(qp.qp_state, RTS)
                self.assertEqual(qp.query(e.IBV_QP_DEST_QPN)[0].dest_qp_num, self.peer.qp_num)


# The SQD.drained affiliated event: a child moves an idle UD QP to SQD with
# en_sqd_async_notify=1 and waits (at most 2 s, SIGALRM ends it) in ibv_get_async_event.
SQD_NOTIFY = '''
import signal
import pyverbs.enums as e
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
ctx = Context(name='softverbs0')
pd = PD(ctx)
cq = CQ(ctx, 16, None, None, 0)
qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_UD, scq=cq, rcq=cq, cap=QPCap(max_send_wr=4, max_recv_wr=4)),
        QPAttr(port_num=1))
assert qp.qp_state == e.IBV_QPS_RTS
a = QPAttr(qp_state=e.IBV_QPS_SQD)
a.en_sqd_async_notify = 1
qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_EN_SQD_ASYNC_NOTIFY)
print('in SQD', flush=True)
signal.alarm(2)  # default action: the process ends if no event comes
ev = ctx.get_async_event()
print('event', ev.event_type, flush=True)
ev.ack()
'''


class SqdNotifyTest(unittest.TestCase):

    def test_sq_drained_event_is_delivered(self):
        r = base.run_python(SQD_NOTIFY, timeout=20)
        self.assertIn('in SQD', r.stdout, r.stderr)
        self.assertEqual(r.returncode, 0, 'no async event within 2 s')
        self.assertIn(f'event {e.IBV_EVENT_SQ_DRAINED}', r.stdout)


class RefusalTest(ModifyTestCase):

    def test_missing_required_attribute_is_einval_and_changes_nothing(self):
        for qpt in (RC, UC, UD):
            for state in (INIT, RTR, RTS):
                full = self.mask(qpt, state)
                for bit in bits(full):
                    if full & ~bit == 0:
                        continue  # mask 0 is a valid no-op request
                    with self.subTest(qp_type=base.QPT_NAMES[qpt], to=base.STATE_NAMES[state],
                                      missing=MASK_NAMES[bit]):
                        qp = self.qp_in(qpt, PREVIOUS[state])
                        self.assertRefused(errno.EINVAL, qp, self.attrs(qpt, state), full & ~bit)
                        # The same request with the attribute works: only the omission was wrong.
                        qp.modify(self.attrs(qpt, state), full)
                        self.assertEqual(qp.qp_state, state)
                        qp.close()

    def test_partially_valid_mask_applies_nothing(self):
        # Everything of RC INIT->RTR except MIN_RNR_TIMER, plus a valid optional attribute.
        qp = self.qp_in(RC, INIT)
        a = self.attrs(RC, RTR)
        a.qp_access_flags = e.IBV_ACCESS_LOCAL_WRITE  # INIT set LW|RW|RR|RA
        mask = (self.mask(RC, RTR) & ~e.IBV_QP_MIN_RNR_TIMER) | e.IBV_QP_ACCESS_FLAGS
        self.assertRefused(errno.EINVAL, qp, a, mask)
        q, _ = qp.query(base.QUERY_ALL)
        self.assertEqual(q.qp_access_flags, self.attrs(RC, INIT).qp_access_flags)
        self.assertEqual((q.dest_qp_num, q.rq_psn, q.max_dest_rd_atomic), (0, 0, 0))
        self.assertEqual(q.qp_state, INIT)

    def test_attribute_not_allowed_is_einval(self):
        cases = [
            (RC, INIT, e.IBV_QP_QKEY, 'RC RESET->INIT with QKEY'),
            (UC, INIT, e.IBV_QP_MAX_DEST_RD_ATOMIC, 'UC RESET->INIT with MAX_DEST_RD_ATOMIC'),
            (UD, INIT, e.IBV_QP_ACCESS_FLAGS, 'UD RESET->INIT with ACCESS_FLAGS'),
            (RC, RTR, e.IBV_QP_SQ_PSN, 'RC INIT->RTR with SQ_PSN'),
            (RC, RTR, e.IBV_QP_TIMEOUT, 'RC INIT->RTR with TIMEOUT'),
            (UC, RTR, e.IBV_QP_MAX_DEST_RD_ATOMIC, 'UC INIT->RTR with MAX_DEST_RD_ATOMIC'),
            (UC, RTR, e.IBV_QP_MIN_RNR_TIMER, 'UC INIT->RTR with MIN_RNR_TIMER'),
            (UD, RTR, e.IBV_QP_AV, 'UD INIT->RTR with AV'),
            (UD, RTR, e.IBV_QP_DEST_QPN, 'UD INIT->RTR with DEST_QPN'),
            (RC, RTS, e.IBV_QP_DEST_QPN, 'RC RTR->RTS with DEST_QPN'),
            (RC, RTS, e.IBV_QP_PATH_MTU, 'RC RTR->RTS with PATH_MTU'),
            (UC, RTS, e.IBV_QP_TIMEOUT, 'UC RTR->RTS with TIMEOUT'),
            (UD, RTS, e.IBV_QP_MAX_QP_RD_ATOMIC, 'UD RTR->RTS with MAX_QP_RD_ATOMIC'),
            (RC, RTS, e.IBV_QP_CAP, 'RC RTR->RTS with CAP (no IBV_DEVICE_RESIZE_MAX_WR)'),
        ]
        for qpt, state, extra, why in cases:
            with self.subTest(why):
                qp = self.qp_in(qpt, PREVIOUS[state])
                a = self.attrs(qpt, state)
                # Give the extra attribute a valid value, so only its presence is wrong.
                a.qkey, a.max_dest_rd_atomic, a.qp_access_flags = 5, 1, e.IBV_ACCESS_LOCAL_WRITE
                a.sq_psn, a.timeout, a.min_rnr_timer = 1, 1, 1
                a.dest_qp_num, a.path_mtu, a.max_rd_atomic = self.peer.qp_num, e.IBV_MTU_1024, 1
                a.ah_attr = base.global_ah_attr(self.ctx)
                self.assertRefused(errno.EINVAL, qp, a, self.mask(qpt, state) | extra)
                qp.close()

    def test_values_out_of_range_are_einval(self):
        cases = [
            (RC, INIT, 'port_num', 2), (RC, INIT, 'port_num', 0), (UD, INIT, 'port_num', 2),
            (RC, INIT, 'pkey_index', 1), (UD, INIT, 'pkey_index', 1),
            (RC, INIT, 'qp_access_flags', 1 << 10),
            (RC, RTR, 'path_mtu', 6), (RC, RTR, 'path_mtu', 0), (UC, RTR, 'path_mtu', 6),
            (RC, RTR, 'max_dest_rd_atomic', 17),
            (RC, RTR, 'dest_qp_num', 0), (UC, RTR, 'dest_qp_num', 0),
            (RC, RTR, 'dest_qp_num', 1 << 24),  # masked to 0: a management QP
            (RC, RTS, 'max_rd_atomic', 17),
        ]
        for qpt, state, field, value in cases:
            with self.subTest(qp_type=base.QPT_NAMES[qpt], to=base.STATE_NAMES[state],
                              field=field, value=value):
                qp = self.qp_in(qpt, PREVIOUS[state])
                a = self.attrs(qpt, state)
                setattr(a, field, value)
                self.assertEqual(getattr(a, field), value, 'pyverbs truncated the value')
                self.assertRefused(errno.EINVAL, qp, a, self.mask(qpt, state))
                qp.close()

    def test_wide_values_are_masked_as_mlx5_does(self):
        # Issue 17 item 12: mlx5 stores PSNs and dest_qp_num in 24-bit QPC fields, timeout and
        # min_rnr_timer in 5-bit ones and the retry counts in 3-bit ones (MLX5_SET keeps the low
        # bits) and ibv_query_qp reads them back: a program passing lrand48() PSNs works.
        for qpt in (RC, UC):
            with self.subTest(qp_type=base.QPT_NAMES[qpt]):
                qp = self.qp_in(qpt, INIT)
                r = self.attrs(qpt, RTR)
                r.rq_psn = 0x7abcdef1
                r.dest_qp_num = (5 << 24) | self.peer.qp_num
                r.min_rnr_timer = 33
                qp.modify(r, self.mask(qpt, RTR))
                s = self.attrs(qpt, RTS)
                s.sq_psn, s.timeout, s.retry_cnt, s.rnr_retry = 0x1000002, 40, 9, 14
                qp.modify(s, self.mask(qpt, RTS))
                self.assertEqual(qp.qp_state, RTS)
                a, _ = qp.query(base.QUERY_ALL)
                self.assertEqual((a.rq_psn, a.dest_qp_num, a.sq_psn),
                                 (0xbcdef1, self.peer.qp_num, 2))
                if qpt == RC:
                    self.assertEqual((a.min_rnr_timer, a.timeout, a.retry_cnt, a.rnr_retry),
                                     (1, 8, 1, 6))
                qp.close()

    def test_address_vector_refusals(self):
        gid1 = self.ctx.query_gid(base.PORT, 1)
        cases = {
            'no GRH': AHAttr(port_num=base.PORT, is_global=0, dlid=1),
            'empty sgid_index': AHAttr(port_num=base.PORT, is_global=1,
                                       gr=GlobalRoute(dgid=gid1, sgid_index=63)),
            'port 2': AHAttr(port_num=2, is_global=1, gr=GlobalRoute(dgid=gid1, sgid_index=1)),
        }
        for qpt in (RC, UC):
            for why, ah in cases.items():
                with self.subTest(qp_type=base.QPT_NAMES[qpt], why=why):
                    qp = self.qp_in(qpt, INIT)
                    a = self.attrs(qpt, RTR)
                    a.ah_attr = ah
                    self.assertRefused(errno.EINVAL, qp, a, self.mask(qpt, RTR))
                    qp.close()

    def test_rate_limit_paces_rc_uc_ud_within_the_caps(self):
        # packet_pacing_caps: [1, 100000000] kbps on RC, UC and UD (test_rate_limit.py).
        for qpt in (RC, UC, UD):
            with self.subTest(qp_type=base.QPT_NAMES[qpt]):
                qp = self.qp_in(qpt, RTR)
                a = self.attrs(qpt, RTS)
                a.rate_limit = 100000001
                self.assertRefused(errno.EINVAL, qp, a, self.mask(qpt, RTS) | e.IBV_QP_RATE_LIMIT)
                a.rate_limit = 1000
                qp.modify(a, self.mask(qpt, RTS) | e.IBV_QP_RATE_LIMIT)
                self.assertEqual(qp.query(e.IBV_QP_RATE_LIMIT)[0].rate_limit, 1000)
                qp.close()

    def test_cur_qp_state_mismatch_is_einval(self):
        qp = self.qp_in(RC, RTR)
        a = self.attrs(RC, RTS)
        a.cur_qp_state = INIT
        self.assertRefused(errno.EINVAL, qp, a, self.mask(RC, RTS) | e.IBV_QP_CUR_STATE)

    def test_invalid_transitions_are_einval(self):
        cases = [(RC, RESET, RTR), (RC, RESET, RTS), (RC, INIT, RTS), (UD, RESET, RTS),
                 (UD, INIT, RTS), (RC, RTR, INIT), (RC, RTS, INIT), (RC, RESET, SQD),
                 (UC, INIT, SQD)]
        for qpt, start, target in cases:
            with self.subTest(qp_type=base.QPT_NAMES[qpt], start=base.STATE_NAMES[start],
                              to=base.STATE_NAMES[target]):
                qp = self.qp_in(qpt, start)
                # With every attribute the target could need: only the transition is wrong.
                a = self.attrs(qpt, target if target in (INIT, RTR, RTS) else RTS)
                a.qp_state = target
                self.assertRefused(errno.EINVAL, qp, a,
                                   self.mask(qpt, target) if target in (INIT, RTR, RTS)
                                   else e.IBV_QP_STATE)
                qp.close()

    def test_unknown_target_state_is_einval(self):
        qp = self.qp_in(RC, INIT)
        self.assertRefused(errno.EINVAL, qp, QPAttr(qp_state=e.IBV_QPS_UNKNOWN), e.IBV_QP_STATE)


if __name__ == '__main__':
    unittest.main()
