"""ECE, enhanced connection establishment (issue 13 item 7): ibv_set_ece(3), ibv_query_ece(3),
rdma_set_local_ece(3), rdma_get_remote_ece(3), rdma_reject_ece.

As mlx5 (rdma-core providers/mlx5 mlx5_set_ece / mlx5_query_ece): comp_mask != 0 and another
vendor's ID are EINVAL, vendor_id 0 is EOPNOTSUPP (libibverbs' own check); the options are not
checked by ibv_set_ece, the next ibv_modify_qp applies what the device supports and
ibv_query_ece reports it. softverbs supports no option (it has no optional wire behaviour), so a
QP reports the device's vendor ID with options 0. ibv_set_ece has no QP-state rule on mlx5 either
(the kernel applies it at whichever modify comes next): accepted in any state.

librdmacm as rdma-core's cma.c: an identifier without QP sends the ECE of rdma_set_local_ece in
its REQ / REP and reads the peer's with rdma_get_remote_ece; both are EINVAL on an identifier
with a QP (the CM runs the handshake itself: the QP's own ECE goes in the REQ)."""
import ctypes
import errno
import re
import textwrap
import unittest

import base
import cm_ctypes as c
import raw
import pyverbs.enums as e
from pyverbs.qp import ECE
from test_cm_events import CmTestCase

tearDownModule = base.tear_down_module

REJ_VENDOR_OPTION_NOT_SUPPORTED = 35  # IBA ch. 12 REJ reason; rdma-core's rdma_reject_ece


class IbvEce(ctypes.Structure):
    _fields_ = [('vendor_id', ctypes.c_uint32), ('options', ctypes.c_uint32),
                ('comp_mask', ctypes.c_uint32)]


for _name in ('rdma_set_local_ece', 'rdma_get_remote_ece'):
    getattr(c.cm, _name).restype = ctypes.c_int
    getattr(c.cm, _name).argtypes = [ctypes.c_void_p, ctypes.POINTER(IbvEce)]
c.cm.rdma_reject_ece.restype = ctypes.c_int
c.cm.rdma_reject_ece.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint8]
for _name in ('ibv_query_ece', 'ibv_set_ece'):
    getattr(c.verbs, _name).restype = ctypes.c_int
    getattr(c.verbs, _name).argtypes = [ctypes.c_void_p, ctypes.POINTER(IbvEce)]


def device_vendor_id():
    ctx = base.open_context()
    try:
        return ctx.query_device().vendor_id
    finally:
        ctx.close()


class VerbsEceTest(base.SoftverbsTestCase):

    def setUp(self):
        super().setUp()
        self.vendor = self.ctx.query_device().vendor_id
        self.qp, _ = base.create_qp(base.CREATE_QP, self.ctx, self.pd, self.cq, e.IBV_QPT_RC)

    def assertEce(self, qp, vendor, options):
        got = qp.query_ece()
        self.assertEqual((got.vendor_id, got.options, got.comp_mask), (vendor, options, 0))

    def test_a_new_qp_reports_the_device_vendor_and_no_option(self):
        self.assertNotEqual(self.vendor, 0)
        self.assertEce(self.qp, self.vendor, 0)

    def test_unsupported_options_are_dropped_at_the_next_modify(self):
        self.qp.set_ece(ECE(vendor_id=self.vendor, options=0xffffffff))
        self.assertEce(self.qp, self.vendor, 0)  # nothing agreed until a modify
        base.connect_qp(self.ctx, self.qp, remote_qpn=self.qp.qp_num)
        self.assertEqual(self.qp.qp_state, e.IBV_QPS_RTS)
        self.assertEce(self.qp, self.vendor, 0)  # the intersection with none supported

    def test_set_ece_is_accepted_in_any_state_as_on_mlx5(self):
        base.connect_qp(self.ctx, self.qp, remote_qpn=self.qp.qp_num)
        self.qp.set_ece(ECE(vendor_id=self.vendor, options=1))
        self.assertEce(self.qp, self.vendor, 0)

    def test_another_vendors_id_is_einval(self):
        self.assertRDMAError(errno.EINVAL, self.qp.set_ece, ECE(vendor_id=self.vendor ^ 0x1, options=0))
        self.assertRDMAError(errno.EINVAL, self.qp.set_ece, ECE(vendor_id=0x02c9 if self.vendor != 0x02c9
                                                                   else 0x5356))

    def test_comp_mask_is_einval(self):
        self.assertRDMAError(errno.EINVAL, self.qp.set_ece, ECE(vendor_id=self.vendor, comp_mask=1))

    def test_vendor_zero_is_eopnotsupp_as_libibverbs(self):
        # pyverbs' QP.set_ece skips vendor_id 0 without calling the verb: through C.
        qp = raw.pyverbs_pointer(self.qp, 52, self.qp.qp_num)  # struct ibv_qp.qp_num
        ece = IbvEce(0, 1, 0)
        ctypes.set_errno(0)
        self.assertEqual(c.verbs.ibv_set_ece(qp, ctypes.byref(ece)), errno.EOPNOTSUPP)
        self.assertEqual(ctypes.get_errno(), errno.EOPNOTSUPP)

    def test_a_refused_set_leaves_the_qp_as_it_was(self):
        self.assertRDMAError(errno.EINVAL, self.qp.set_ece, ECE(vendor_id=self.vendor, comp_mask=4))
        self.assertEce(self.qp, self.vendor, 0)

    def test_each_refusal_logs_one_line(self):
        code = textwrap.dedent('''
            import ctypes, os
            print('pid', os.getpid())
            import base, raw, test_ece
            import pyverbs.enums as e
            from pyverbs.pyverbs_error import PyverbsRDMAError
            from pyverbs.qp import ECE
            from pyverbs.pd import PD
            from pyverbs.cq import CQ
            # base drops a user's SOFTVERBS_LOG at import; the library reads it at its first log.
            os.environ['SOFTVERBS_LOG'] = 'error'
            ctx = base.open_context()
            pd, cq = PD(ctx), CQ(ctx, 4, None, None, 0)
            qp, _ = base.create_qp(base.CREATE_QP, ctx, pd, cq, e.IBV_QPT_RC)
            vendor = ctx.query_device().vendor_id
            print('qp_num', qp.qp_num, 'vendor', vendor)
            for ece in (ECE(vendor_id=0x123456), ECE(vendor_id=vendor, comp_mask=2)):
                try:
                    qp.set_ece(ece)
                    print('accepted')
                except PyverbsRDMAError as ex:
                    print('refused', abs(ex.error_code))
            # vendor 0: pyverbs' set_ece would not call the verb
            ptr = raw.pyverbs_pointer(qp, 52, qp.qp_num)
            print('refused', test_ece.c.verbs.ibv_set_ece(ptr, ctypes.byref(test_ece.IbvEce(0, 1, 0))))
        ''')
        r = base.run_python(code)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(re.findall(r'refused (\d+)', r.stdout),
                         [str(errno.EINVAL), str(errno.EINVAL), str(errno.EOPNOTSUPP)])
        qp = int(r.stdout.split('qp_num ')[1].split()[0])
        vendor = int(r.stdout.split('vendor ')[1].split()[0])
        lines = r.stderr.splitlines()
        self.assertEqual(len(lines), 3, r.stderr)
        prefix = r'softverbs\[\d+\] error: ibv_set_ece\(qp ' + hex(qp) + r'\): '
        self.assertRegex(lines[0], prefix + r'vendor_id 0x123456 is not the device.s ' + hex(vendor))
        self.assertRegex(lines[1], prefix + r'comp_mask 2 is not 0')
        self.assertRegex(lines[2], prefix + r'vendor_id 0: no vendor, no ECE')


class CmEceTest(CmTestCase):

    def set_local(self, cm_id, vendor, options, comp_mask=0):
        ece = IbvEce(vendor, options, comp_mask)
        ctypes.set_errno(0)
        rc = c.cm.rdma_set_local_ece(cm_id.ptr, ctypes.byref(ece))
        return rc, ctypes.get_errno()

    def remote(self, cm_id):
        ece = IbvEce(0xdead, 0xbeef, 7)
        ctypes.set_errno(0)
        rc = c.cm.rdma_get_remote_ece(cm_id.ptr, ctypes.byref(ece))
        return rc, ctypes.get_errno(), (ece.vendor_id, ece.options, ece.comp_mask)

    def test_ece_of_external_qps_crosses_in_req_and_rep(self):
        # rdma_set_local_ece(3)'s "usual flow": options the peers choose themselves cross as
        # they are (no QP of the CM masks them).
        sch, srv, port = self.listener()
        cch, cli = self.resolved_client('127.0.0.1', port)
        self.assertEqual(self.set_local(cli, 0x5356, 0xa5a5), (0, 0))
        cli.connect(qp_num=0x123)
        req = self.expect(sch, 'CONNECT_REQUEST')
        child = self.adopt(sch, req.id)
        self.assertEqual(self.remote(child), (0, 0, (0x5356, 0xa5a5, 0)))
        self.assertEqual(self.set_local(child, 0x5356, 0x00a5), (0, 0))
        child.accept(qp_num=0x456)
        self.expect(cch, 'CONNECT_RESPONSE')
        self.assertEqual(self.remote(cli), (0, 0, (0x5356, 0x00a5, 0)))
        c.check(c.cm.rdma_establish(cli.ptr), 'rdma_establish')
        self.expect(sch, 'ESTABLISHED')

    def test_the_req_of_a_cm_made_qp_carries_the_qps_ece(self):
        # rdma-core's init_ece: rdma_create_qp takes the QP's ibv_query_ece as the local ECE.
        sch, srv, port = self.listener()
        cch, cli = self.resolved_client('127.0.0.1', port)
        cli.create_qp()
        cli.connect()
        req = self.expect(sch, 'CONNECT_REQUEST')
        child = self.adopt(sch, req.id)
        self.assertEqual(self.remote(child), (0, 0, (device_vendor_id(), 0, 0)))
        child.create_qp()
        child.accept()
        self.expect(cch, 'ESTABLISHED')
        self.expect(sch, 'ESTABLISHED')
        for cm_id in (cli, child):
            ece = IbvEce()
            self.assertEqual(c.verbs.ibv_query_ece(cm_id.fields.qp, ctypes.byref(ece)), 0)
            self.assertEqual((ece.vendor_id, ece.options), (device_vendor_id(), 0))

    def test_an_id_with_a_qp_refuses_both_verbs(self):
        sch, srv, child, cch, cli = self.connect_pair()
        for cm_id in (cli, child):
            self.assertEqual(self.set_local(cm_id, 0x5356, 1), (-1, errno.EINVAL))
            self.assertEqual(self.remote(cm_id)[:2], (-1, errno.EINVAL))

    def test_bad_local_ece_is_einval(self):
        ch = self.channel()
        i = self.new_id(ch)
        self.assertEqual(self.set_local(i, 0, 1), (-1, errno.EINVAL))
        self.assertEqual(self.set_local(i, 0x5356, 1, comp_mask=1), (-1, errno.EINVAL))
        ctypes.set_errno(0)
        self.assertEqual(c.cm.rdma_set_local_ece(i.ptr, None), -1)
        self.assertEqual(ctypes.get_errno(), errno.EINVAL)
        # Nothing received yet: the remote ECE is empty.
        self.assertEqual(self.remote(i), (0, 0, (0, 0, 0)))

    def test_reject_ece_gives_reason_35(self):
        sch, srv, port = self.listener()
        cch, cli = self.resolved_client('127.0.0.1', port)
        cli.create_qp()
        cli.connect()
        req = self.expect(sch, 'CONNECT_REQUEST')
        child = self.adopt(sch, req.id)
        c.check(c.cm.rdma_reject_ece(child.ptr, None, 0), 'rdma_reject_ece')
        self.expect(cch, 'REJECTED', REJ_VENDOR_OPTION_NOT_SUPPORTED)


if __name__ == '__main__':
    unittest.main()
