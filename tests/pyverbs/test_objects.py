"""PD, MR, CQ/CQEX, completion channels, AH, SRQ and XRCD on softverbs0."""
import ctypes
import errno
import json
import os
import select
import unittest

import base
import pyverbs.enums as e
import raw
from pyverbs.addr import AH, AHAttr, GlobalRoute
from pyverbs.cq import CQ, CQEX, CompChannel, CqInitAttrEx
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.srq import SRQ, SrqAttr, SrqInitAttr
from pyverbs.xrcd import XRCD, XRCDInitAttr

tearDownModule = base.tear_down_module

LW = e.IBV_ACCESS_LOCAL_WRITE
RW = e.IBV_ACCESS_REMOTE_WRITE
RR = e.IBV_ACCESS_REMOTE_READ
RA = e.IBV_ACCESS_REMOTE_ATOMIC

libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                      ctypes.c_long]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]


def unmapped_address(length=1 << 16):
    """An address range that was mapped a moment ago and is not any more."""
    prot_rw, map_private_anon = 0x3, 0x22
    addr = libc.mmap(None, length, prot_rw, map_private_anon, -1, 0)
    assert addr not in (None, ctypes.c_void_p(-1).value), 'mmap failed'
    assert libc.munmap(addr, length) == 0
    return addr


class PdTest(base.SoftverbsTestCase):

    def test_alloc_dealloc(self):
        pds = [PD(self.ctx) for _ in range(8)]
        self.assertEqual(len({p.handle for p in pds}), 8, 'PD handles are not distinct')
        for p in pds:
            p.close()

    def test_dealloc_pd_in_use_by_mr_is_ebusy(self):
        with raw.RawContext() as rc:
            pd = rc.alloc_pd()
            buf = ctypes.create_string_buffer(4096)
            mr = rc.reg_mr(pd, buf, LW)
            self.assertEqual(rc.destroy(raw.lib.ibv_dealloc_pd, pd), errno.EBUSY)
            self.assertEqual(rc.destroy(raw.lib.ibv_dereg_mr, mr), 0)
            self.assertEqual(rc.destroy(raw.lib.ibv_dealloc_pd, pd), 0)

    def test_dealloc_pd_in_use_by_qp_is_ebusy(self):
        with raw.RawContext() as rc:
            pd = rc.alloc_pd()
            cq = rc.create_cq()
            qp = rc.create_qp(pd, cq, e.IBV_QPT_RC)
            self.assertEqual(rc.destroy(raw.lib.ibv_dealloc_pd, pd), errno.EBUSY)
            self.assertEqual(rc.destroy(raw.lib.ibv_destroy_qp, qp), 0)
            self.assertEqual(rc.destroy(raw.lib.ibv_dealloc_pd, pd), 0)


class MrTest(base.SoftverbsTestCase):

    def test_valid_access_flags(self):
        for access in (0, LW, RR, LW | RW, LW | RR, LW | RA, LW | RW | RR | RA,
                       LW | e.IBV_ACCESS_RELAXED_ORDERING):
            with self.subTest(access=hex(access)):
                mr = MR(self.pd, 4096, access)
                self.assertEqual(mr.lkey, mr.rkey)
                self.assertNotEqual(mr.lkey, 0)
                self.assertEqual(mr.length, 4096)
                mr.close()

    def test_invalid_access_flags(self):
        cases = [(RW, errno.EINVAL, 'REMOTE_WRITE without LOCAL_WRITE'),
                 (RA, errno.EINVAL, 'REMOTE_ATOMIC without LOCAL_WRITE'),
                 (RW | RR, errno.EINVAL, 'REMOTE_WRITE|READ without LOCAL_WRITE'),
                 (RW | e.IBV_ACCESS_ON_DEMAND, errno.EINVAL, 'ON_DEMAND, REMOTE_WRITE without LOCAL_WRITE')]
        for access, code, why in cases:
            with self.subTest(why):
                self.assertRDMAError(code, MR, self.pd, 4096, access)

    def test_keys_unique_across_many_mrs(self):
        mrs = [MR(self.pd, 64, LW) for _ in range(300)]
        keys = [m.lkey for m in mrs]
        self.assertEqual(len(set(keys)), len(keys))
        self.assertEqual(keys, [m.rkey for m in mrs])

    def test_keys_unique_across_two_contexts(self):
        ctx2 = base.open_context()
        try:
            pd2 = PD(ctx2)
            mrs = [MR(self.pd, 64, LW) for _ in range(50)] + [MR(pd2, 64, LW) for _ in range(50)]
            keys = [m.lkey for m in mrs]
            self.assertEqual(len(set(keys)), len(keys))
        finally:
            ctx2.close()

    def test_rereg_keeps_keys(self):
        mr = MR(self.pd, 4096, LW)
        lkey, rkey = mr.lkey, mr.rkey
        mr.rereg(e.IBV_REREG_MR_CHANGE_ACCESS, None, 0, 0, LW | RW | RR)
        self.assertEqual((mr.lkey, mr.rkey), (lkey, rkey))
        pd2 = PD(self.ctx)
        mr.rereg(e.IBV_REREG_MR_CHANGE_PD, pd2, 0, 0, 0)
        self.assertEqual((mr.lkey, mr.rkey), (lkey, rkey))
        other = ctypes.create_string_buffer(8192)
        mr.rereg(e.IBV_REREG_MR_CHANGE_TRANSLATION | e.IBV_REREG_MR_CHANGE_PD, self.pd,
                 ctypes.addressof(other), 8192, 0)
        self.assertEqual((mr.lkey, mr.rkey), (lkey, rkey))
        mr.close()
        # pd2 no longer has users.
        pd2.close()

    def test_failed_rereg_keeps_the_mr(self):
        mr = MR(self.pd, 4096, LW)
        lkey = mr.lkey
        self.assertRDMAError(errno.EINVAL, mr.rereg, e.IBV_REREG_MR_CHANGE_ACCESS, None, 0, 0, RW)
        with self.assertRaises(PyverbsRDMAError):
            mr.rereg(e.IBV_REREG_MR_CHANGE_TRANSLATION, None, unmapped_address(), 4096, 0)
        with self.assertRaises(PyverbsRDMAError):
            mr.rereg(0, None, 0, 0, 0)
        self.assertEqual((mr.lkey, mr.rkey), (lkey, lkey))
        # Still registered with its original access: a legal rereg works.
        mr.rereg(e.IBV_REREG_MR_CHANGE_ACCESS, None, 0, 0, LW | RR)
        mr.close()

    def test_mr_over_unmapped_memory_fails(self):
        self.assertRDMAError(errno.EFAULT, MR, self.pd, 4096, LW, address=unmapped_address())

    def test_mr_partly_unmapped_fails(self):
        # A mapped page followed by an unmapped one.
        addr = libc.mmap(None, 8192, 0x3, 0x22, -1, 0)
        try:
            self.assertEqual(libc.munmap(addr + 4096, 4096), 0)
            MR(self.pd, 4096, LW, address=addr).close()
            self.assertRDMAError(errno.EFAULT, MR, self.pd, 8192, LW, address=addr)
        finally:
            libc.munmap(addr, 4096)


    def test_mr_length_zero_or_wrapping_is_einval(self):
        self.assertRDMAError(errno.EINVAL, MR, self.pd, 0, LW)
        addr = libc.mmap(None, 4096, 0x3, 0x22, -1, 0)
        try:
            self.assertRDMAError(errno.EINVAL, MR, self.pd, (1 << 64) - 2048, LW, address=addr)
        finally:
            libc.munmap(addr, 4096)

    def test_read_only_mr_over_read_only_memory_works(self):
        addr = libc.mmap(None, 4096, 0x1, 0x22, -1, 0)  # PROT_READ
        try:
            for access in (0, RR):
                with self.subTest(access=hex(access)):
                    MR(self.pd, 4096, access, address=addr).close()
        finally:
            libc.munmap(addr, 4096)

    # On hardware ibv_reg_mr pins the pages for writing and fails with EFAULT: code that passes
    # here must not fail on a real NIC (DESIGN.md section 3).
    def test_writable_mr_over_unwritable_memory_is_efault(self):
        for prot, name in ((0x1, 'PROT_READ'), (0x0, 'PROT_NONE')):
            addr = libc.mmap(None, 4096, prot, 0x22, -1, 0)
            try:
                for access in (LW, LW | RW, LW | RA):
                    with self.subTest(prot=name, access=hex(access)):
                        self.assertRDMAError(errno.EFAULT, MR, self.pd, 4096, access,
                                             address=addr)
            finally:
                libc.munmap(addr, 4096)


class CqTest(base.SoftverbsTestCase):

    def test_create_sizes(self):
        for cqe in (1, 100, 4096):
            with self.subTest(cqe=cqe):
                cq = CQ(self.ctx, cqe, None, None, 0)
                self.assertGreaterEqual(cq.cqe, cqe)
                cq.close()

    def test_create_refusals(self):
        self.assertRDMAError(errno.EINVAL, CQ, self.ctx, 0, None, None, 0)
        self.assertRDMAError(errno.EINVAL, CQ, self.ctx, -1, None, None, 0)
        self.assertRDMAError(errno.EINVAL, CQ, self.ctx, base.MAX_CQE + 1, None, None, 0)
        self.assertRDMAError(errno.EINVAL, CQ, self.ctx, 16, None, None, 1)

    def test_resize(self):
        cq = CQ(self.ctx, 16, None, None, 0)
        cq.resize(500)
        self.assertGreaterEqual(cq.cqe, 500)
        cq.resize(8)
        self.assertGreaterEqual(cq.cqe, 8)
        self.assertRDMAError(errno.EINVAL, cq.resize, 0)
        self.assertRDMAError(errno.EINVAL, cq.resize, base.MAX_CQE + 1)
        self.assertGreaterEqual(cq.cqe, 8)

    def test_cq_ex_standard_flags(self):
        flags = (e.IBV_WC_EX_WITH_BYTE_LEN | e.IBV_WC_EX_WITH_IMM | e.IBV_WC_EX_WITH_QP_NUM |
                 e.IBV_WC_EX_WITH_SRC_QP | e.IBV_WC_EX_WITH_SLID | e.IBV_WC_EX_WITH_SL |
                 e.IBV_WC_EX_WITH_DLID_PATH_BITS)
        cq = CQEX(self.ctx, CqInitAttrEx(cqe=64, wc_flags=flags))
        cq.close()

    def test_cq_ex_refusals(self):
        # A field no device knows (mlx5_create_cq: ENOTSUP). CVLAN and the flow tag come with
        # raw packet QPs and flow steering (test_raw_packet.py), TM info with tag matching
        # (test_tag_matching.py).
        self.assertRDMAError(errno.EOPNOTSUPP, CQEX, self.ctx,
                             CqInitAttrEx(cqe=64, wc_flags=e.IBV_WC_EX_WITH_BYTE_LEN | (1 << 20)))
        for flag in (e.IBV_WC_EX_WITH_CVLAN, e.IBV_WC_EX_WITH_FLOW_TAG, e.IBV_WC_EX_WITH_TM_INFO):
            CQEX(self.ctx, CqInitAttrEx(cqe=64, wc_flags=e.IBV_WC_EX_WITH_BYTE_LEN | flag)).close()
        self.assertRDMAError(errno.EINVAL, CQEX, self.ctx,
                             CqInitAttrEx(cqe=0, wc_flags=e.IBV_WC_EX_WITH_BYTE_LEN))

    def test_comp_channel_and_req_notify(self):
        ch = CompChannel(self.ctx)
        cq = CQ(self.ctx, 16, None, ch, 0)
        cq.req_notify(0)
        cq.req_notify(1)
        cq.req_notify(0)
        cq.close()
        ch.close()

    def test_destroy_cq_in_use_by_qp_is_ebusy(self):
        with raw.RawContext() as rc:
            pd = rc.alloc_pd()
            cq = rc.create_cq()
            qp = rc.create_qp(pd, cq, e.IBV_QPT_UD)
            self.assertEqual(rc.destroy(raw.lib.ibv_destroy_cq, cq), errno.EBUSY)
            self.assertEqual(rc.destroy(raw.lib.ibv_destroy_qp, qp), 0)
            self.assertEqual(rc.destroy(raw.lib.ibv_destroy_cq, cq), 0)


class MrIovaRawTest(unittest.TestCase):

    def test_iova_must_keep_the_page_offset_of_the_address(self):
        # ib_uverbs_reg_mr: "(start & ~PAGE_MASK) != (hca_va & ~PAGE_MASK)" -> EINVAL.
        page = os.sysconf('SC_PAGE_SIZE')
        buf = (ctypes.c_uint8 * 256)()
        offset = ctypes.addressof(buf) % page
        with raw.RawContext() as rc:
            pd = rc.alloc_pd()
            mr = rc.reg_mr_iova(pd, buf, 0x40000000 + offset, LW)
            self.assertTrue(mr)
            with self.assertRaises(raw.RawError) as cm:
                rc.reg_mr_iova(pd, buf, 0x40000000 + (offset + 8) % page, LW)
            self.assertEqual(cm.exception.error_code, errno.EINVAL)


# A child that allocates PDs and then CQs until the verb fails; prints how many and the errno.
FILL_LIMITS = '''
import ctypes, json
import raw
out = {}
with raw.RawContext() as rc:
    for name, make in (('pd', rc.alloc_pd), ('cq', lambda: rc.create_cq(1))):
        n, err = 0, 0
        while n < 70000:
            try:
                make()
            except raw.RawError as ex:
                err = ex.error_code
                break
            n += 1
        out[name] = (n, err)
print(json.dumps(out))
'''


class DeviceLimitsTest(unittest.TestCase):

    def test_max_pd_and_max_cq_are_enforced(self):
        # Issue 17 item 7: one process gets exactly max_pd PDs and max_cq CQs, then ENOMEM.
        r = base.run_python(FILL_LIMITS, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        out = json.loads(r.stdout)
        self.assertEqual(out['pd'], [65536, errno.ENOMEM])
        self.assertEqual(out['cq'], [65536, errno.ENOMEM])


class CompChannelRawTest(unittest.TestCase):

    def test_channel_fd_is_pollable(self):
        with raw.RawContext() as rc:
            ch = rc.create_comp_channel()
            rc.create_cq(16, ch)
            fd = ch.contents.fd
            os.fstat(fd)
            readable, _, _ = select.select([fd], [], [], 0)
            self.assertEqual(readable, [], 'no completion happened, yet the channel is readable')
            # ibv_get_cq_event(3) on a non-blocking channel without events: -1, EAGAIN.
            os.set_blocking(fd, False)
            cq_out, ctx_out = ctypes.c_void_p(), ctypes.c_void_p()
            rc_ = raw.lib.ibv_get_cq_event(ch, ctypes.byref(cq_out), ctypes.byref(ctx_out))
            self.assertEqual(rc_, -1)
            self.assertEqual(ctypes.get_errno(), errno.EAGAIN)

    def test_channel_of_another_context_is_ebadf(self):
        # Issue 17 item 12: the kernel looks the channel's fd up among the objects of the CQ's own
        # context (rdma_core.c lookup_get_fd_uobject) and answers EBADF for another context's.
        with raw.RawContext() as rc, raw.RawContext() as other:
            foreign = other.create_comp_channel()
            with self.assertRaises(raw.RawError) as cm:
                rc.create_cq(16, foreign)
            self.assertEqual(cm.exception.error_code, errno.EBADF)
            rc.create_cq(16, rc.create_comp_channel())  # its own context's channel works
            # Nothing of the refused CQ holds the foreign channel.
            self.assertEqual(other.destroy(raw.lib.ibv_destroy_comp_channel, foreign), 0)

    def test_destroy_channel_in_use_is_ebusy(self):
        with raw.RawContext() as rc:
            ch = rc.create_comp_channel()
            cq = rc.create_cq(16, ch)
            self.assertEqual(rc.destroy(raw.lib.ibv_destroy_comp_channel, ch), errno.EBUSY)
            self.assertEqual(rc.destroy(raw.lib.ibv_destroy_cq, cq), 0)
            self.assertEqual(rc.destroy(raw.lib.ibv_destroy_comp_channel, ch), 0)


class AhTest(base.SoftverbsTestCase):

    def test_global_ah_on_gid_1(self):
        AH(self.pd, attr=base.global_ah_attr(self.ctx, sgid_index=1, dgid_index=1)).close()
        AH(self.pd, attr=base.global_ah_attr(self.ctx, sgid_index=0, dgid_index=0)).close()

    def test_ah_without_grh_is_einval(self):
        self.assertRDMAError(errno.EINVAL, AH, self.pd,
                             attr=AHAttr(port_num=base.PORT, is_global=0, dlid=1))

    def test_ah_refusals(self):
        gid = self.ctx.query_gid(base.PORT, 1)
        n = len(self.ctx.query_gid_table(64))
        cases = {
            'empty sgid_index': AHAttr(port_num=1, is_global=1,
                                       gr=GlobalRoute(dgid=gid, sgid_index=63)),
            'sgid_index outside the table': AHAttr(port_num=1, is_global=1,
                                                   gr=GlobalRoute(dgid=gid, sgid_index=64)),
            'port 2': AHAttr(port_num=2, is_global=1, gr=GlobalRoute(dgid=gid, sgid_index=1)),
            'port 0': AHAttr(port_num=0, is_global=1, gr=GlobalRoute(dgid=gid, sgid_index=1)),
        }
        self.assertLess(n, 64)
        for why, attr in cases.items():
            with self.subTest(why):
                self.assertRDMAError(errno.EINVAL, AH, self.pd, attr=attr)


class SrqTest(base.SoftverbsTestCase):

    def test_create_query_modify(self):
        srq = SRQ(self.pd, SrqInitAttr(SrqAttr(max_wr=100, max_sge=4)))
        a = srq.query()
        self.assertGreaterEqual(a.max_wr, 100)
        self.assertGreaterEqual(a.max_sge, 4)
        self.assertEqual(a.srq_limit, 0)
        srq.modify(SrqAttr(srq_limit=10), e.IBV_SRQ_LIMIT)
        self.assertEqual(srq.query().srq_limit, 10)
        srq.modify(SrqAttr(max_wr=400), e.IBV_SRQ_MAX_WR)
        self.assertGreaterEqual(srq.query().max_wr, 400)
        self.assertEqual(srq.query().srq_limit, 10)

    def test_srq_limit_above_max_wr_is_einval(self):
        srq = SRQ(self.pd, SrqInitAttr(SrqAttr(max_wr=100, max_sge=1)))
        srq.modify(SrqAttr(srq_limit=7), e.IBV_SRQ_LIMIT)
        max_wr = srq.query().max_wr
        self.assertRDMAError(errno.EINVAL, srq.modify, SrqAttr(srq_limit=max_wr + 1),
                             e.IBV_SRQ_LIMIT)
        # ibv_modify_srq(3): if any attribute is invalid, none is modified.
        self.assertRDMAError(errno.EINVAL, srq.modify, SrqAttr(max_wr=max_wr + 50,
                                                               srq_limit=max_wr + 51),
                             e.IBV_SRQ_LIMIT | e.IBV_SRQ_MAX_WR)
        a = srq.query()
        self.assertEqual((a.max_wr, a.srq_limit), (max_wr, 7))

    def test_modify_with_mask_0_is_a_no_op(self):
        srq = SRQ(self.pd, SrqInitAttr(SrqAttr(max_wr=100, max_sge=1)))
        srq.modify(SrqAttr(srq_limit=3), e.IBV_SRQ_LIMIT)
        before = srq.query()
        srq.modify(SrqAttr(max_wr=500, srq_limit=9), 0)
        after = srq.query()
        self.assertEqual((after.max_wr, after.srq_limit), (before.max_wr, 3))

    def test_modify_unknown_mask_bit_is_einval(self):
        srq = SRQ(self.pd, SrqInitAttr(SrqAttr(max_wr=100, max_sge=1)))
        self.assertRDMAError(errno.EINVAL, srq.modify, SrqAttr(srq_limit=3), e.IBV_SRQ_LIMIT | 1 << 7)
        self.assertEqual(srq.query().srq_limit, 0)

    def test_create_refusals(self):
        for why, (wr, sge) in {'max_wr 0': (0, 1), 'max_wr above max_srq_wr': (32769, 1),
                               'max_sge above max_srq_sge': (16, 33)}.items():
            with self.subTest(why):
                self.assertRDMAError(errno.EINVAL, SRQ, self.pd,
                                     SrqInitAttr(SrqAttr(max_wr=wr, max_sge=sge)))

    def test_get_srq_num(self):
        srqs = [SRQ(self.pd, SrqInitAttr(SrqAttr(max_wr=8, max_sge=1))) for _ in range(4)]
        nums = [s.get_srq_num() for s in srqs]
        self.assertEqual(len(set(nums)), 4, nums)


class XrcdTest(base.SoftverbsTestCase):
    # The XRC domain rules (files, O_CREAT / O_EXCL, processes, ibv_open_qp): test_xrc.py.

    def test_open_and_close_xrcd_without_a_file(self):
        attr = XRCDInitAttr(e.IBV_XRCD_INIT_ATTR_FD | e.IBV_XRCD_INIT_ATTR_OFLAGS, os.O_CREAT, -1)
        xrcds = [XRCD(self.ctx, attr) for _ in range(3)]
        for x in xrcds:
            x.close()


if __name__ == '__main__':
    unittest.main()
