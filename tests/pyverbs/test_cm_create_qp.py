"""rdma_create_qp(3), a seed of the product: "If a protection domain is not given ... One default
protection domain is allocated per RDMA device"; NULL send_cq/recv_cq → CQs and completion
channels made by the CM and exposed in the rdma_cm_id; "The actual capabilities ... will be
returned to the user through the qp_init_attr parameter"; "An rdma_cm_id may only be associated
with a single QP"; "ready to handle posting of receives. If the QP is unconnected, it will be
ready to post sends"."""
import ctypes
import errno
import unittest

import base
import cm_ctypes as c
from test_cm_events import CmTestCase

import pyverbs.cm_enums as ce  # noqa: E402
import pyverbs.cmid as cmid  # noqa: E402
import pyverbs.enums as e  # noqa: E402
from pyverbs.pyverbs_error import PyverbsRDMAError  # noqa: E402
from pyverbs.qp import QPCap, QPInitAttr  # noqa: E402

tearDownModule = base.tear_down_module
IBV_QPS_INIT, IBV_QPS_RTS = 1, 3
IBV_QPT_RC, IBV_QPT_UD = 2, 4


class CreateQpTest(CmTestCase):

    def bound_id(self, ps=c.RDMA_PS_TCP):
        ch = self.channel()
        i = self.new_id(ch, ps)
        i.resolve_addr('127.0.0.1', 4791)
        self.expect(ch, 'ADDR_RESOLVED')
        return i

    def test_default_pd_is_one_per_device(self):
        a, b = self.bound_id(), self.bound_id()
        a.create_qp()
        b.create_qp()
        self.assertIsNotNone(a.fields.pd)
        self.assertEqual(a.fields.pd, b.fields.pd)

    def test_a_bound_id_carries_the_device_pd(self):
        # rdma-core's ucma_get_device sets id->pd with id->verbs (cma.c); UCX's rdmacm CM creates
        # its placeholder QP with ibv_create_qp(id->pd, ...) before any rdma_create_qp.
        a, b = self.bound_id(), self.bound_id()
        self.assertIsNotNone(a.fields.pd)
        self.assertEqual(a.fields.pd, b.fields.pd)
        a.create_qp()  # the default PD rdma_create_qp(3) uses is that one
        self.assertEqual(a.fields.pd, b.fields.pd)

    def test_null_cqs_are_made_with_channels_and_exposed(self):
        i = self.bound_id()
        attr = i.create_qp(wr=16)
        f = i.fields
        for name in ('send_cq', 'recv_cq', 'send_cq_channel', 'recv_cq_channel', 'qp'):
            self.assertIsNotNone(getattr(f, name), name)
        self.assertNotEqual(f.send_cq, f.recv_cq)
        self.assertNotEqual(f.send_cq_channel, f.recv_cq_channel)
        # Caps written back: at least what was asked (ibv_create_qp(3)).
        self.assertGreaterEqual(attr.cap.max_send_wr, 16)
        self.assertGreaterEqual(attr.cap.max_recv_wr, 16)
        self.assertEqual((attr.send_cq, attr.recv_cq), (f.send_cq, f.recv_cq))

    def test_given_pd_and_cqs_are_used(self):
        i = self.bound_id()
        ctx = ctypes.c_void_p(i.fields.verbs)
        c.verbs.ibv_alloc_pd.restype = ctypes.c_void_p
        c.verbs.ibv_alloc_pd.argtypes = [ctypes.c_void_p]
        c.verbs.ibv_create_cq.restype = ctypes.c_void_p
        c.verbs.ibv_create_cq.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                                          ctypes.c_void_p, ctypes.c_int]
        pd = c.verbs.ibv_alloc_pd(ctx)
        cq = c.verbs.ibv_create_cq(ctx, 16, None, None, 0)
        i.create_qp(pd=pd, send_cq=cq, recv_cq=cq)
        f = i.fields
        self.assertEqual((f.pd, f.send_cq, f.recv_cq), (pd, cq, cq))
        self.assertIsNone(f.send_cq_channel)
        i.destroy()
        c.verbs.ibv_destroy_cq.argtypes = [ctypes.c_void_p]
        c.verbs.ibv_dealloc_pd.argtypes = [ctypes.c_void_p]
        self.assertEqual(c.verbs.ibv_destroy_cq(cq), 0)
        self.assertEqual(c.verbs.ibv_dealloc_pd(pd), 0)

    def test_connected_qp_is_in_init_and_ud_qp_in_rts(self):
        rc = self.bound_id()
        rc.create_qp()
        self.assertEqual(c.qp_state(rc.fields.qp), IBV_QPS_INIT)
        ud = self.bound_id(c.RDMA_PS_UDP)
        ud.create_qp(qp_type=IBV_QPT_UD)
        self.assertEqual(c.qp_state(ud.fields.qp), IBV_QPS_RTS)

    def test_second_qp_is_refused(self):
        i = self.bound_id()
        i.create_qp()
        with self.assertRaises(c.CmError) as cm:
            i.create_qp()
        self.assertEqual(cm.exception.errno, errno.EINVAL)

    def test_unbound_id_is_refused(self):
        i = self.new_id(self.channel())
        with self.assertRaises(c.CmError) as cm:
            i.create_qp()
        self.assertEqual(cm.exception.errno, errno.EINVAL)

    def test_srq_on_the_id_serves_its_qp(self):
        i = self.bound_id()
        attr = ctypes.create_string_buffer(24)  # struct ibv_srq_init_attr: context, {wr, sge, limit}
        ctypes.memmove(ctypes.addressof(attr) + 8, (ctypes.c_uint32 * 3)(16, 1, 0), 12)
        c.cm.rdma_create_srq.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        c.check(c.cm.rdma_create_srq(i.ptr, None, attr), 'rdma_create_srq')
        self.assertIsNotNone(i.fields.srq)
        i.create_qp()
        # struct ibv_qp: context, qp_context, pd, send_cq, recv_cq, srq, ...
        qp_srq = ctypes.cast(i.fields.qp + 40, ctypes.POINTER(ctypes.c_void_p)).contents.value
        self.assertEqual(qp_srq, i.fields.srq)
        c.cm.rdma_destroy_qp(i.ptr)
        c.cm.rdma_destroy_srq.argtypes = [ctypes.c_void_p]
        c.cm.rdma_destroy_srq(i.ptr)
        self.assertIsNone(i.fields.srq)

    def test_qp_type_must_match_the_port_space(self):
        i = self.bound_id(c.RDMA_PS_UDP)
        with self.assertRaises(c.CmError) as cm:
            i.create_qp(qp_type=IBV_QPT_RC)
        self.assertEqual(cm.exception.errno, errno.EINVAL)


class PyverbsCmidTest(unittest.TestCase):
    """The same through pyverbs.cmid, synchronous (rdma_create_ep) as rdma-core's tests use it."""

    def test_create_ep_with_qp_and_auto_cqs(self):
        ai = cmid.AddrInfo(src='127.0.0.1', dst='127.0.0.1', dst_service='4791',
                           port_space=ce.RDMA_PS_TCP)
        cap = QPCap(max_send_wr=4, max_recv_wr=4, max_send_sge=1, max_recv_sge=1)
        i = cmid.CMID(creator=ai, qp_init_attr=QPInitAttr(cap=cap))
        self.assertTrue(i.qpn > 0)
        mr = i.reg_msgs(64)
        i.post_recv(mr, 64)  # "ready to handle posting of receives"
        i.close()

    def test_create_qp_twice_through_pyverbs(self):
        ai = cmid.AddrInfo(src='127.0.0.1', dst='127.0.0.1', dst_service='4791',
                           port_space=ce.RDMA_PS_TCP)
        cap = QPCap(max_send_wr=4, max_recv_wr=4, max_send_sge=1, max_recv_sge=1)
        i = cmid.CMID(creator=ai, qp_init_attr=QPInitAttr(cap=cap))
        with self.assertRaises(PyverbsRDMAError) as cm:
            i.create_qp(QPInitAttr(qp_type=e.IBV_QPT_RC, cap=cap))
        self.assertEqual(abs(cm.exception.error_code), errno.EINVAL)
        i.close()


if __name__ == '__main__':
    unittest.main()
