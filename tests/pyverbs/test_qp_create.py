"""QP creation through ibv_create_qp(3) (QP(pd, QPInitAttr)) and ibv_create_qp_ex(3)
(QP(ctx, QPInitAttrEx)): seeds 003 and 000."""
import errno
import unittest

import base
import raw
import pyverbs.enums as e
from base import CREATE_CALLS, CREATE_QP, CREATE_QP_EX, EX_MASK
from pyverbs.cq import CQ
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPEx, QPInitAttr, QPInitAttrEx
from pyverbs.srq import SRQ, SrqAttr, SrqInitAttr

tearDownModule = base.tear_down_module

TYPES = (e.IBV_QPT_RC, e.IBV_QPT_UC, e.IBV_QPT_UD)

RC_OPS = (e.IBV_QP_EX_WITH_RDMA_WRITE | e.IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
          e.IBV_QP_EX_WITH_SEND | e.IBV_QP_EX_WITH_SEND_WITH_IMM | e.IBV_QP_EX_WITH_RDMA_READ |
          e.IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | e.IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD)
OPS_MASK = e.IBV_QP_INIT_ATTR_PD | e.IBV_QP_INIT_ATTR_SEND_OPS_FLAGS
FLAGS_MASK = e.IBV_QP_INIT_ATTR_PD | e.IBV_QP_INIT_ATTR_CREATE_FLAGS


def caps_of(attr):
    return dict(max_send_wr=attr.max_send_wr, max_recv_wr=attr.max_recv_wr,
                max_send_sge=attr.max_send_sge, max_recv_sge=attr.max_recv_sge,
                max_inline_data=attr.max_inline_data)


class QpCreateTest(base.SoftverbsTestCase):

    def create(self, call, qpt, **kw):
        return base.create_qp(call, self.ctx, self.pd, self.cq, qpt, **kw)

    def test_create_rc_uc_ud_through_both_calls(self):
        want = dict(max_send_wr=17, max_recv_wr=33, max_send_sge=3, max_recv_sge=5,
                    max_inline_data=100)
        for call in CREATE_CALLS:
            for qpt in TYPES:
                with self.subTest(call=call, qp_type=base.QPT_NAMES[qpt]):
                    qp, attr = self.create(call, qpt, cap=QPCap(**want))
                    self.assertEqual(qp.qp_type, qpt)
                    self.assertEqual(qp.qp_state, e.IBV_QPS_RESET)
                    # The seeds: the actual values are written back, >= the request.
                    got = caps_of(attr)
                    for k, v in want.items():
                        self.assertGreaterEqual(got[k], v, k)
                    # ... and they are what ibv_query_qp reports.
                    qattr, qinit = qp.query(e.IBV_QP_CAP)
                    self.assertEqual(caps_of(qinit), got)
                    self.assertEqual(qinit.qp_type, qpt)
                    c = qattr.cap
                    self.assertEqual(caps_of(c), got)
                    qp.close()

    def test_limits_are_accepted(self):
        cap = QPCap(max_send_wr=base.MAX_QP_WR, max_recv_wr=base.MAX_QP_WR,
                    max_send_sge=base.MAX_SGE, max_recv_sge=base.MAX_SGE,
                    max_inline_data=base.MAX_INLINE)
        for call in CREATE_CALLS:
            with self.subTest(call=call):
                qp, attr = self.create(call, e.IBV_QPT_RC, cap=cap)
                self.assertEqual(caps_of(attr), caps_of(cap))
                qp.close()

    def test_qp_numbers_unique_and_above_0x100(self):
        qps = []
        for call in CREATE_CALLS:
            for qpt in TYPES:
                qps += [self.create(call, qpt)[0] for _ in range(10)]
        nums = [qp.qp_num for qp in qps]
        self.assertEqual(len(set(nums)), len(nums))
        for n in nums:
            self.assertGreaterEqual(n, 0x100)
            self.assertLess(n, 1 << 24)

    def test_qp_numbers_unique_across_two_contexts(self):
        ctx2 = base.open_context()
        try:
            pd2, cq2 = PD(ctx2), CQ(ctx2, 16, None, None, 0)
            qps = [self.create(CREATE_QP, e.IBV_QPT_RC)[0] for _ in range(20)]
            qps += [base.create_qp(CREATE_QP_EX, ctx2, pd2, cq2, e.IBV_QPT_UD)[0]
                    for _ in range(20)]
            nums = [qp.qp_num for qp in qps]
            self.assertEqual(len(set(nums)), len(nums))
        finally:
            ctx2.close()

    def test_sq_sig_all_round_trips(self):
        for call in CREATE_CALLS:
            for sig in (0, 1):
                with self.subTest(call=call, sq_sig_all=sig):
                    qp, _ = self.create(call, e.IBV_QPT_RC, sq_sig_all=sig)
                    self.assertEqual(qp.query(e.IBV_QP_CAP)[1].sq_sig_all, sig)
                    qp.close()

    def test_srq_makes_recv_caps_zero(self):
        srq = SRQ(self.pd, SrqInitAttr(SrqAttr(max_wr=64, max_sge=2)))
        # The receive caps are ignored with an SRQ, even when above the device limits.
        for recv_wr, recv_sge in ((16, 2), (base.MAX_QP_WR + 1, base.MAX_SGE + 1)):
            for call in CREATE_CALLS:
                for qpt in (e.IBV_QPT_RC, e.IBV_QPT_UD):
                    with self.subTest(call=call, qp_type=base.QPT_NAMES[qpt], recv_wr=recv_wr):
                        cap = base.default_cap(max_recv_wr=recv_wr, max_recv_sge=recv_sge)
                        qp, attr = self.create(call, qpt, srq=srq, cap=cap)
                        self.assertEqual((attr.max_recv_wr, attr.max_recv_sge), (0, 0))
                        qinit = qp.query(e.IBV_QP_CAP)[1]
                        self.assertEqual((qinit.max_recv_wr, qinit.max_recv_sge), (0, 0))
                        self.assertGreaterEqual(qinit.max_send_wr, 16)
                        qp.close()

    def test_uc_with_srq_fails(self):
        srq = SRQ(self.pd, SrqInitAttr(SrqAttr(max_wr=64, max_sge=2)))
        for call in CREATE_CALLS:
            with self.subTest(call=call):
                self.assertRDMAError(errno.EINVAL, self.create, call, e.IBV_QPT_UC, srq=srq)

    def test_caps_over_the_limits_are_einval(self):
        over = {'max_send_wr': base.MAX_QP_WR + 1, 'max_recv_wr': base.MAX_QP_WR + 1,
                'max_send_sge': base.MAX_SGE + 1, 'max_recv_sge': base.MAX_SGE + 1,
                'max_inline_data': base.MAX_INLINE + 1}
        for call in CREATE_CALLS:
            for qpt in TYPES:
                for field, value in over.items():
                    with self.subTest(call=call, qp_type=base.QPT_NAMES[qpt], field=field):
                        cap = base.default_cap(**{field: value})
                        self.assertRDMAError(errno.EINVAL, self.create, call, qpt, cap=cap)

    def test_unsupported_types_are_eopnotsupp(self):
        for call in CREATE_CALLS:
            # XRC types: test_xrc.py; RAW_PACKET QPs are offered: test_raw_packet.py. A driver
            # QP is created through its provider (mlx5dv_create_qp), never by these calls.
            for qpt in (e.IBV_QPT_DRIVER,):
                with self.subTest(call=call, qp_type=qpt):
                    self.assertRDMAError(errno.EOPNOTSUPP, self.create, call, qpt)

    def test_the_ex_call_reaches_create_qp_ex(self):
        # EX_MASK carries more than IBV_QP_INIT_ATTR_PD, so verbs.h's ibv_create_qp_ex() calls the
        # provider's create_qp_ex op instead of forwarding to ibv_create_qp. An unknown bit next
        # to it proves the op sees comp_mask (see test_unknown_comp_mask_is_einval).
        self.assertEqual(EX_MASK & ~e.IBV_QP_INIT_ATTR_PD, e.IBV_QP_INIT_ATTR_CREATE_FLAGS)
        qp, _ = self.create(CREATE_QP_EX, e.IBV_QPT_RC, comp_mask=EX_MASK, create_flags=0)
        self.assertGreaterEqual(qp.qp_num, 0x100)

    def test_unknown_comp_mask_is_einval(self):
        for bit in (1 << 12, 1 << 20, 1 << 31):
            with self.subTest(bit=hex(bit)):
                self.assertRDMAError(errno.EINVAL, self.create, CREATE_QP_EX, e.IBV_QPT_RC,
                                     comp_mask=e.IBV_QP_INIT_ATTR_PD | bit)

    def test_missing_cq_or_bad_type_is_einval(self):
        for call in CREATE_CALLS:
            with self.subTest(call=call, case='qp_type 100'):
                self.assertRDMAError(errno.EINVAL, self.create, call, 100)
        for scq, rcq, why in ((None, self.cq, 'no send_cq'), (self.cq, None, 'no recv_cq')):
            with self.subTest(why):
                attr = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=scq, rcq=rcq, cap=base.default_cap())
                self.assertRDMAError(errno.EINVAL, QP, self.pd, attr)

    def test_driver_type_is_eopnotsupp(self):
        # IBV_QPT_DRIVER QPs are created through their provider (mlx5dv_create_qp).
        for call in CREATE_CALLS:
            with self.subTest(call=call):
                self.assertRDMAError(errno.EOPNOTSUPP, self.create, call, e.IBV_QPT_DRIVER)

    def test_pyverbs_state_hint(self):
        # QP(creator, init_attr, QPAttr) moves the QP "as far as possible towards RTS" with
        # pyverbs' own masks: connected QPs stop in INIT, UD reaches RTS.
        expected = {e.IBV_QPT_RC: e.IBV_QPS_INIT, e.IBV_QPT_UC: e.IBV_QPS_INIT,
                    e.IBV_QPT_UD: e.IBV_QPS_RTS}
        for call in CREATE_CALLS:
            for qpt, state in expected.items():
                with self.subTest(call=call, qp_type=base.QPT_NAMES[qpt]):
                    if call == CREATE_QP:
                        qp = QP(self.pd, base.init_attr(qpt, self.cq), QPAttr(port_num=base.PORT))
                    else:
                        qp = QP(self.ctx, base.init_attr_ex(qpt, self.cq, self.pd),
                                QPAttr(port_num=base.PORT))
                    self.assertEqual(qp.qp_state, state)
                    self.assertEqual(qp.query(e.IBV_QP_STATE)[0].qp_state, state)

    def test_missing_pd_is_einval(self):
        attr = QPInitAttrEx(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq,
                            cap=base.default_cap(), comp_mask=e.IBV_QP_INIT_ATTR_CREATE_FLAGS)
        self.assertRDMAError(errno.EINVAL, QP, self.ctx, attr)


class DestroyQpTest(unittest.TestCase):

    def test_destroy_qp_attached_to_multicast_is_ebusy(self):
        # Seeds 003/000: "ibv_destroy_qp() fails if the QP is attached to a multicast group".
        mgid = bytes.fromhex('ff0e0000000000000000000000001234')
        with raw.RawContext() as rc:
            pd = rc.alloc_pd()
            cq = rc.create_cq()
            qp = rc.create_qp(pd, cq, e.IBV_QPT_UD)
            self.assertGreaterEqual(qp.contents.qp_num, 0x100)
            ret = raw.lib.ibv_attach_mcast(qp, mgid, 0)
            if ret == errno.EOPNOTSUPP:
                self.skipTest('ibv_attach_mcast is not offered yet (EOPNOTSUPP)')
            self.assertEqual(ret, 0)
            self.assertEqual(rc.destroy(raw.lib.ibv_destroy_qp, qp), errno.EBUSY)
            self.assertEqual(raw.lib.ibv_detach_mcast(qp, mgid, 0), 0)
            self.assertEqual(rc.destroy(raw.lib.ibv_destroy_qp, qp), 0)


class SendOpsTest(base.SoftverbsTestCase):

    def create_ex(self, qpt, ops, cls=QP):
        attr = base.init_attr_ex(qpt, self.cq, self.pd, comp_mask=OPS_MASK, send_ops_flags=ops)
        return cls(self.ctx, attr)

    def test_rc_send_ops_and_qp_ex(self):
        qp = self.create_ex(e.IBV_QPT_RC, RC_OPS, cls=QPEx)  # QPEx: ibv_qp_to_qp_ex
        self.assertGreaterEqual(qp.qp_num, 0x100)
        self.assertEqual(qp.qp_state, e.IBV_QPS_RESET)

    def test_valid_ops_per_type(self):
        cases = {e.IBV_QPT_RC: e.IBV_QP_EX_WITH_SEND | e.IBV_QP_EX_WITH_BIND_MW |
                 e.IBV_QP_EX_WITH_LOCAL_INV | e.IBV_QP_EX_WITH_SEND_WITH_INV,
                 e.IBV_QPT_UC: e.IBV_QP_EX_WITH_RDMA_WRITE | e.IBV_QP_EX_WITH_SEND |
                 e.IBV_QP_EX_WITH_SEND_WITH_IMM | e.IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
                 e.IBV_QP_EX_WITH_BIND_MW | e.IBV_QP_EX_WITH_LOCAL_INV,
                 e.IBV_QPT_UD: e.IBV_QP_EX_WITH_SEND | e.IBV_QP_EX_WITH_SEND_WITH_IMM}
        for qpt, ops in cases.items():
            with self.subTest(qp_type=base.QPT_NAMES[qpt]):
                self.create_ex(qpt, ops, cls=QPEx).close()

    def test_refused_ops(self):
        cases = [
            (e.IBV_QPT_RC, e.IBV_QP_EX_WITH_SEND | e.IBV_QP_EX_WITH_TSO, errno.EINVAL, 'TSO'),
            (e.IBV_QPT_UC, e.IBV_QP_EX_WITH_SEND | e.IBV_QP_EX_WITH_SEND_WITH_INV, errno.EINVAL,
             'UC SEND_WITH_INV'),
            (e.IBV_QPT_UD, e.IBV_QP_EX_WITH_SEND | e.IBV_QP_EX_WITH_BIND_MW, errno.EINVAL,
             'UD BIND_MW'),
            (e.IBV_QPT_UD, e.IBV_QP_EX_WITH_SEND | e.IBV_QP_EX_WITH_LOCAL_INV, errno.EINVAL,
             'UD LOCAL_INV'),
            (e.IBV_QPT_UD, e.IBV_QP_EX_WITH_SEND | e.IBV_QP_EX_WITH_RDMA_WRITE, errno.EINVAL,
             'UD RDMA_WRITE'),
            (e.IBV_QPT_UD, e.IBV_QP_EX_WITH_RDMA_READ, errno.EINVAL, 'UD RDMA_READ'),
            (e.IBV_QPT_UC, e.IBV_QP_EX_WITH_RDMA_READ, errno.EINVAL, 'UC RDMA_READ'),
            (e.IBV_QPT_UC, e.IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD, errno.EINVAL, 'UC atomics'),
        ]
        for qpt, ops, code, why in cases:
            with self.subTest(why):
                self.assertRDMAError(code, self.create_ex, qpt, ops)


class CreateFlagsTest(base.SoftverbsTestCase):

    def create_ex(self, qpt, flags, **kw):
        attr = base.init_attr_ex(qpt, self.cq, self.pd, comp_mask=FLAGS_MASK, create_flags=flags,
                                 **kw)
        return QP(self.ctx, attr)

    def test_source_qpn_on_ud(self):
        qp = self.create_ex(e.IBV_QPT_UD, e.IBV_QP_CREATE_SOURCE_QPN, source_qpn=0x1234)
        self.assertGreaterEqual(qp.qp_num, 0x100)

    def test_source_qpn_on_rc_is_einval(self):
        self.assertRDMAError(errno.EINVAL, self.create_ex, e.IBV_QPT_RC,
                             e.IBV_QP_CREATE_SOURCE_QPN, source_qpn=0x1234)

    def test_scatter_fcs_is_einval(self):
        for qpt in TYPES:
            with self.subTest(qp_type=base.QPT_NAMES[qpt]):
                self.assertRDMAError(errno.EINVAL, self.create_ex, qpt,
                                     e.IBV_QP_CREATE_SCATTER_FCS)

    def test_block_self_mcast_lb(self):
        self.create_ex(e.IBV_QPT_UD, e.IBV_QP_CREATE_BLOCK_SELF_MCAST_LB).close()
        for qpt in (e.IBV_QPT_RC, e.IBV_QPT_UC):
            with self.subTest(qp_type=base.QPT_NAMES[qpt]):
                self.assertRDMAError(errno.EINVAL, self.create_ex, qpt,
                                     e.IBV_QP_CREATE_BLOCK_SELF_MCAST_LB)

    def test_unknown_create_flag_is_einval(self):
        self.assertRDMAError(errno.EINVAL, self.create_ex, e.IBV_QPT_UD, 1 << 20)


if __name__ == '__main__':
    unittest.main()
