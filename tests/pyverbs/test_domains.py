"""Thread domains and parent domains (issue 13 item 4; ibv_alloc_td(3), ibv_alloc_parent_domain(3)):
a parent domain is usable wherever its PD is (MRs, QPs, AHs, SRQs, CQs through
IBV_CQ_INIT_ATTR_MASK_PD), its allocator callbacks are called for the ring memory of the QPs, CQs
and SRQs created on it, with pd_context and the mlx5 resource types, and deallocating a TD, PD or
parent domain still in use is EBUSY, as mlx5 does."""
import ctypes
import errno

import base
import pyverbs.enums as e
import raw
import xrc
from base import Buffer
from pyverbs.addr import AH
from pyverbs.cq import CQEX, CqInitAttrEx
from pyverbs.pd import ParentDomain, ParentDomainContext, ParentDomainInitAttr
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.srq import SRQ, SrqAttr, SrqInitAttr

tearDownModule = base.tear_down_module

RC = e.IBV_QPT_RC
OK = e.IBV_WC_SUCCESS
USE_DEFAULT = e._IBV_ALLOCATOR_USE_DEFAULT
RDMA_DRIVER_MLX5 = 1  # enum rdma_driver_id
RES_QP, RES_SRQ, RES_CQ = (RDMA_DRIVER_MLX5 << 32 | 1, RDMA_DRIVER_MLX5 << 32 | 4, RDMA_DRIVER_MLX5 << 32 | 5)


class Allocator:
    """Callbacks recording every call; `answer` is what alloc returns (USE_DEFAULT, 0 or a buffer)."""

    def __init__(self, answer=USE_DEFAULT):
        self.answer = answer
        self.allocs, self.frees, self.buffers = [], [], []

    def alloc(self, pd, context, size, alignment, resource_type):
        self.allocs.append((context.user_data, size, alignment, resource_type))
        if self.answer == 'buffer':
            buf = ctypes.create_string_buffer(size + alignment)
            self.buffers.append(buf)
            return (ctypes.addressof(buf) + alignment - 1) // alignment * alignment
        return self.answer

    def free(self, pd, context, ptr, resource_type):
        self.frees.append((context.user_data, ptr, resource_type))


def parent_domain(ctx, pd, allocator=None, user_data='ctx-1'):
    if allocator is None:
        return ParentDomain(ctx, attr=ParentDomainInitAttr(pd=pd))
    # pyverbs hands the ParentDomainContext to C without a reference of its own: keep it alive.
    allocator.pdc = ParentDomainContext(pd, allocator.alloc, allocator.free, user_data)
    return ParentDomain(ctx, attr=ParentDomainInitAttr(pd=pd, pd_context=allocator.pdc))


def cq_on(ctx, parent, cqe=64):
    attr = CqInitAttrEx(cqe=cqe, wc_flags=e.IBV_WC_STANDARD_FLAGS,
                        comp_mask=e.IBV_CQ_INIT_ATTR_MASK_PD, parent_domain=parent)
    return CQEX(ctx, attr)


class ParentDomainTest(base.DataTestCase):

    def test_objects_on_a_parent_domain_and_data_byte_for_byte(self):
        alloc = Allocator()
        pdom = parent_domain(self.ctx, self.pd, alloc)
        cq = cq_on(self.ctx, pdom)
        self.assertEqual(alloc.allocs[-1][0], 'ctx-1')  # pd_context reaches the callback
        self.assertEqual(alloc.allocs[-1][3], RES_CQ)
        self.assertGreaterEqual(alloc.allocs[-1][1], 64 * 32)  # at least the CQEs
        # A QP on the parent domain, connected to a QP on the plain PD: the same protection domain.
        a = base.Peer(self.ctx, pdom, RC)
        self.assertEqual(alloc.allocs[-1][3], RES_QP)
        b = base.Peer(self.ctx, self.pd, RC)
        a.connect(b.qpn)
        b.connect(a.qpn)
        src = Buffer(pdom, 4096)        # an MR on the parent domain ...
        dst = Buffer(self.pd, 4096)     # ... and one on its PD, used by a QP of the other
        data = bytes(range(256)) * 16
        src.write(data)
        a.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [src.sge()], wr_id=1, rdma=(dst.rkey, dst.addr)))
        self.assertWC(a.poll()[0], wr_id=1, status=OK)
        self.assertEqual(dst.read(), data)
        b.post_recv(dst.sge(0, 100), wr_id=2)
        a.post_send(base.send_wr(e.IBV_WR_SEND, [src.sge(50, 100)], wr_id=3))
        self.assertWC(a.poll()[0], status=OK)
        self.assertWC(b.poll()[0], wr_id=2, status=OK, byte_len=100)
        self.assertEqual(dst.read(0, 100), data[50:150])
        self.assertTrue(src.guards_intact() and dst.guards_intact())
        # SRQ and AH on the parent domain.
        srq = SRQ(pdom, SrqInitAttr(SrqAttr(max_wr=16)))
        self.assertEqual(alloc.allocs[-1][3], RES_SRQ)
        AH(pdom, attr=base.global_ah_attr(self.ctx)).close()
        self.assertEqual(alloc.frees, [])  # USE_DEFAULT: nothing of the callbacks' to free
        srq.close()
        cq.close()
        base.stop_retries(a, b)

    def test_allocator_answers(self):
        with self.subTest('NULL: ENOMEM'):
            pdom = parent_domain(self.ctx, self.pd, Allocator(0))
            with self.assertRaises(PyverbsRDMAError) as c:
                cq_on(self.ctx, pdom)
            self.assertEqual(c.exception.error_code, errno.ENOMEM)
            pdom.close()
        with self.subTest('its own buffer: refused and given back'):
            alloc = Allocator('buffer')
            pdom = parent_domain(self.ctx, self.pd, alloc, user_data='mine')
            with self.assertRaises(PyverbsRDMAError) as c:
                cq_on(self.ctx, pdom)
            self.assertEqual(c.exception.error_code, errno.EOPNOTSUPP)
            self.assertEqual(len(alloc.frees), 1)
            self.assertEqual(alloc.frees[0][0], 'mine')
            self.assertEqual(alloc.frees[0][2], RES_CQ)
            pdom.close()



# --- thread domains: pyverbs does not wrap ibv_alloc_td -------------------------------------------
VCTX_ALLOC_TD, VCTX_DEALLOC_TD, VCTX_ALLOC_PARENT_DOMAIN, VCTX_CREATE_CQ_EX = 128, 120, 112, 200


class CqInitAttrExC(ctypes.Structure):
    _fields_ = [('cqe', ctypes.c_uint32), ('cq_context', ctypes.c_void_p), ('channel', ctypes.c_void_p),
                ('comp_vector', ctypes.c_uint32), ('wc_flags', ctypes.c_uint64), ('comp_mask', ctypes.c_uint32),
                ('flags', ctypes.c_uint32), ('parent_domain', ctypes.c_void_p)]


class IbvParentDomainInitAttr(ctypes.Structure):
    _fields_ = [('pd', ctypes.c_void_p), ('td', ctypes.c_void_p), ('comp_mask', ctypes.c_uint32),
                ('alloc', ctypes.c_void_p), ('free', ctypes.c_void_p), ('pd_context', ctypes.c_void_p)]


class IbvTdInitAttr(ctypes.Structure):
    _fields_ = [('comp_mask', ctypes.c_uint32)]


class ThreadDomainTest(base.SoftverbsTestCase):

    def setUp(self):
        super().setUp()
        self.raw = raw.RawContext()
        self.addCleanup(self.raw.close)

    def alloc_td(self, comp_mask=0):
        ctypes.set_errno(0)
        td = xrc._op(self.raw.ctx, VCTX_ALLOC_TD, ctypes.c_void_p, ctypes.c_void_p,
                     ctypes.POINTER(IbvTdInitAttr))(self.raw.ctx, ctypes.byref(IbvTdInitAttr(comp_mask)))
        return td, ctypes.get_errno()

    def dealloc_td(self, td):
        return xrc._op(self.raw.ctx, VCTX_DEALLOC_TD, ctypes.c_int, ctypes.c_void_p)(td)

    def alloc_parent_domain(self, pd, td):
        ctypes.set_errno(0)
        attr = IbvParentDomainInitAttr(pd=pd, td=td)
        p = xrc._op(self.raw.ctx, VCTX_ALLOC_PARENT_DOMAIN, ctypes.c_void_p, ctypes.c_void_p,
                    ctypes.POINTER(IbvParentDomainInitAttr))(self.raw.ctx, ctypes.byref(attr))
        return p, ctypes.get_errno()

    def test_td_in_a_parent_domain_and_ebusy(self):
        td, err = self.alloc_td()
        self.assertTrue(td, err)
        pd = self.raw.alloc_pd()
        pdom, err = self.alloc_parent_domain(pd, td)
        self.assertTrue(pdom, err)
        # A QP on the parent domain with its TD works as on the PD.
        cq = self.raw.create_cq()
        qp = raw.lib.ibv_create_qp(pdom, ctypes.byref(raw.IbvQpInitAttr(
            send_cq=cq, recv_cq=cq, qp_type=RC, cap=raw.IbvQpCap(max_send_wr=4, max_recv_wr=4,
                                                                  max_send_sge=1, max_recv_sge=1))))
        self.assertTrue(qp)
        self.assertEqual(raw.lib.ibv_dealloc_pd(pdom), errno.EBUSY)  # the QP holds it
        self.assertEqual(raw.lib.ibv_destroy_qp(qp), 0)
        # A CQ on it (single-threaded under the TD) holds it too.
        create_cq_ex = xrc._op(self.raw.ctx, VCTX_CREATE_CQ_EX, ctypes.c_void_p, ctypes.c_void_p,
                               ctypes.POINTER(CqInitAttrExC))
        cqx = create_cq_ex(self.raw.ctx, ctypes.byref(CqInitAttrExC(
            cqe=8, wc_flags=e.IBV_WC_STANDARD_FLAGS, comp_mask=e.IBV_CQ_INIT_ATTR_MASK_PD, parent_domain=pdom)))
        self.assertTrue(cqx)
        self.assertEqual(raw.lib.ibv_dealloc_pd(pdom), errno.EBUSY)
        self.assertEqual(raw.lib.ibv_destroy_cq(cqx), 0)
        self.assertEqual(self.dealloc_td(td), errno.EBUSY)  # the parent domain holds it
        self.assertEqual(raw.lib.ibv_dealloc_pd(pd), errno.EBUSY)
        # An MR registered on the parent domain is its PD's (mlx5: the kernel knows only the PD).
        buf = ctypes.create_string_buffer(64)
        mr = raw.lib.ibv_reg_mr(pdom, ctypes.cast(buf, ctypes.c_void_p), 64, e.IBV_ACCESS_LOCAL_WRITE)
        self.assertTrue(mr)
        self.assertEqual(raw.lib.ibv_dealloc_pd(pdom), 0)
        self.assertEqual(self.dealloc_td(td), 0)
        self.assertEqual(raw.lib.ibv_dealloc_pd(pd), errno.EBUSY)  # the MR
        self.assertEqual(raw.lib.ibv_dereg_mr(mr), 0)

    def test_cq_on_a_parent_domain_holds_it(self):
        # pyverbs closes dependents first and rejects a plain PD itself: raw create_cq_ex here.
        create_cq_ex = xrc._op(self.raw.ctx, VCTX_CREATE_CQ_EX, ctypes.c_void_p, ctypes.c_void_p,
                               ctypes.POINTER(CqInitAttrExC))
        pd = self.raw.alloc_pd()
        attr = CqInitAttrExC(cqe=16, wc_flags=e.IBV_WC_STANDARD_FLAGS, comp_mask=e.IBV_CQ_INIT_ATTR_MASK_PD,
                             parent_domain=pd)
        ctypes.set_errno(0)
        self.assertEqual((create_cq_ex(self.raw.ctx, ctypes.byref(attr)), ctypes.get_errno()),
                         (None, errno.EINVAL))  # a plain PD (mlx5_create_cq: EINVAL)
        pdom, err = self.alloc_parent_domain(pd, None)
        self.assertTrue(pdom, err)
        attr.parent_domain = pdom
        cq = create_cq_ex(self.raw.ctx, ctypes.byref(attr))
        self.assertTrue(cq)
        self.assertEqual(raw.lib.ibv_dealloc_pd(pdom), errno.EBUSY)
        self.assertEqual(raw.lib.ibv_destroy_cq(cq), 0)
        self.assertEqual(raw.lib.ibv_dealloc_pd(pdom), 0)

    def test_bad_input(self):
        td, err = self.alloc_td(comp_mask=1)
        self.assertEqual((td, err), (None, errno.EINVAL))
        pdom, err = self.alloc_parent_domain(None, None)
        self.assertEqual((pdom, err), (None, errno.EINVAL))
        pd = self.raw.alloc_pd()
        pdom, _ = self.alloc_parent_domain(pd, None)
        nested, err = self.alloc_parent_domain(pdom, None)
        self.assertEqual((nested, err), (None, errno.EINVAL))
        self.assertEqual(raw.lib.ibv_dealloc_pd(pdom), 0)

    def test_refusal_log_line(self):
        code = ('import os, ctypes, raw, test_domains as t\nos.environ["SOFTVERBS_LOG"] = "error"\n'
                'class T(t.ThreadDomainTest):\n    def runTest(self): pass\n'
                'x = T(); x.raw = raw.RawContext()\n'
                'td, _ = x.alloc_td(); pd = x.raw.alloc_pd(); x.alloc_parent_domain(pd, td)\n'
                'print("rc", x.dealloc_td(td))\n')
        r = base.run_python(code, SOFTVERBS_LOG='error')
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f'rc {errno.EBUSY}', r.stdout)
        self.assertRegex(r.stderr, r'ibv_dealloc_td\(td 0x[0-9a-f]+\): 1 parent domain\(s\) still use this '
                                   r'thread domain')
