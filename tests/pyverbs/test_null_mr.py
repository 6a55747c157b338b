"""Null MRs (issue 13 item 7; ibv_alloc_null_mr(3)): "A null MR discards all data written to it,
and always returns 0 on read. It has the maximum length and only the lkey is valid, the MR is not
exposed as an rkey." As mlx5_alloc_null_mr: addr NULL, length SIZE_MAX, rkey 0; ibv_dereg_mr
frees it. Its lkey in a send SGE sends zeros (SEND, RDMA WRITE), in a receive SGE or as the
buffer of an RDMA READ / atomic swallows the bytes; as an R_Key it is a remote access error.
Every byte of the real buffers around it is checked, guards included.

pyverbs does not wrap ibv_alloc_null_mr: it is called through its verbs_context slot, with the
struct ibv_pd * that pyverbs keeps inside its PD object (raw.pyverbs_pointer)."""
import ctypes
import errno
import os

import base
import pyverbs.enums as e
import raw
from base import Buffer
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.wr import SGE

tearDownModule = base.tear_down_module

RC = e.IBV_QPT_RC
OK = e.IBV_WC_SUCCESS
SIZE_MAX = 2 ** 64 - 1
VCTX_ALLOC_NULL_MR = 16  # offsetof(struct verbs_context, alloc_null_mr), rdma-core 44 x86-64


class IbvMr(ctypes.Structure):
    _fields_ = [('context', ctypes.c_void_p), ('pd', ctypes.c_void_p), ('addr', ctypes.c_void_p),
                ('length', ctypes.c_size_t), ('handle', ctypes.c_uint32), ('lkey', ctypes.c_uint32),
                ('rkey', ctypes.c_uint32)]


def pd_pointer(pd):
    return raw.pyverbs_pointer(pd, 8, pd.handle)  # struct ibv_pd { context; handle; }


def alloc_null_mr(pd_ptr):
    """ibv_alloc_null_mr(pd) through the verbs_context slot: (struct ibv_mr * or None, errno)."""
    ctx = ctypes.c_void_p.from_address(pd_ptr).value
    ctypes.set_errno(0)
    mr = raw.verbs_op(ctx, VCTX_ALLOC_NULL_MR, ctypes.POINTER(IbvMr), ctypes.c_void_p)(pd_ptr)
    return (mr if mr else None), ctypes.get_errno()


class NullMrTestCase(base.DataTestCase):

    def setUp(self):
        super().setUp()
        self.null_mrs = []
        self.pd_ptr = pd_pointer(self.pd)
        self.null = self.null_mr()
        self.lkey = self.null.contents.lkey

    def tearDown(self):
        # Before pyverbs closes the context and its PD (EBUSY while an MR uses it); deregistration
        # frees each null MR.
        try:
            for mr in self.null_mrs:
                self.assertEqual(raw.lib.ibv_dereg_mr(ctypes.cast(mr, ctypes.c_void_p)), 0)
        finally:
            super().tearDown()

    def null_mr(self):
        mr, err = alloc_null_mr(self.pd_ptr)
        self.assertIsNotNone(mr, os.strerror(err))
        self.null_mrs.append(mr)
        return mr


class NullMrObjectTest(NullMrTestCase):

    def test_fields_as_mlx5(self):
        m = self.null.contents
        self.assertEqual(m.pd, self.pd_ptr)
        self.assertEqual(m.context, ctypes.c_void_p.from_address(self.pd_ptr).value)
        self.assertIsNone(m.addr)
        self.assertEqual(m.length, SIZE_MAX)
        self.assertEqual(m.rkey, 0)
        self.assertNotEqual(m.lkey, 0)
        # Each null MR has a key of its own; deregistration frees it (the cleanup checks 0).
        self.assertNotEqual(self.null_mr().contents.lkey, m.lkey)

    def test_rereg_refused(self):
        # There is no memory to re-register: EINVAL, the MR stays usable.
        lib = raw.lib
        lib.ibv_rereg_mr.restype = ctypes.c_int
        lib.ibv_rereg_mr.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                     ctypes.c_size_t, ctypes.c_int]
        ctypes.set_errno(0)
        rc = lib.ibv_rereg_mr(ctypes.cast(self.null, ctypes.c_void_p), e.IBV_REREG_MR_CHANGE_ACCESS, None,
                              None, 0, e.IBV_ACCESS_LOCAL_WRITE)
        self.assertEqual(rc, e.IBV_REREG_MR_ERR_INPUT)
        self.assertEqual(ctypes.get_errno(), errno.EINVAL)

    def test_advise_refused(self):
        # Not an ODP MR: EINVAL, as for any MR that is not (mlx5_ib_advise_mr).
        with self.assertRaises(PyverbsRDMAError) as c:
            self.pd.advise_mr(e._IBV_ADVISE_MR_ADVICE_PREFETCH, 0, [SGE(0, 8, self.lkey)])
        self.assertEqual(c.exception.error_code, errno.EINVAL)


class NullMrDataTest(NullMrTestCase):

    def setUp(self):
        super().setUp()
        self.a, self.b = base.connected_pair(self.ctx, self.pd, RC)

    def test_send_gathers_zeros(self):
        src = Buffer(self.pd, 64, fill=0x11)
        dst = Buffer(self.pd, 5000 + 64, fill=0xee)
        self.b.post_recv(dst.sge(), wr_id=7)
        # Any address and length: the MR has the maximum length.
        self.a.post_send(base.send_wr(e.IBV_WR_SEND, [SGE(0xdead0000, 5000, self.lkey), src.sge()], wr_id=1))
        self.assertWC(self.a.poll()[0], wr_id=1, status=OK)
        self.assertWC(self.b.poll()[0], wr_id=7, status=OK, byte_len=5064)
        self.assertEqual(dst.read(), b'\0' * 5000 + b'\x11' * 64)
        self.assertTrue(dst.guards_intact())

    def test_large_send_of_zeros(self):
        # More than the null region's 1 MiB chunk: several pieces, all zeros.
        n = 3 * 1024 * 1024 + 17
        dst = Buffer(self.pd, n, fill=0x5c)
        self.b.post_recv(dst.sge(), wr_id=2)
        self.a.post_send(base.send_wr(e.IBV_WR_SEND, [SGE(0, n, self.lkey)], wr_id=3))
        self.assertWC(self.a.poll()[0], wr_id=3, status=OK)
        self.assertWC(self.b.poll()[0], wr_id=2, status=OK, byte_len=n)
        self.assertEqual(dst.read(), b'\0' * n)
        self.assertTrue(dst.guards_intact())

    def test_receive_discards(self):
        # The first 3000 bytes go to the null MR, the rest to a real buffer; both receives of a
        # small (landed) and a large (copied) message.
        for size in (40, 6000):
            with self.subTest(size=size):
                data = bytes((i * 7 + 3) & 0xff for i in range(size))
                src = Buffer(self.pd, size)
                src.write(data)
                keep = min(size, 3000)
                dst = Buffer(self.pd, size, fill=0xcc)
                self.b.qp.post_recv(base.recv_wr([SGE(0x1000, keep, self.lkey), dst.sge(0, size - keep or 1)],
                                                 wr_id=size))
                self.a.post_send(base.send_wr(e.IBV_WR_SEND, [src.sge()], wr_id=size))
                self.assertWC(self.a.poll()[0], wr_id=size, status=OK)
                self.assertWC(self.b.poll()[0], wr_id=size, status=OK, byte_len=size)
                self.assertEqual(dst.read(0, size - keep), data[keep:])
                self.assertEqual(dst.read(size - keep), b'\xcc' * keep)
                self.assertTrue(dst.guards_intact())

    def test_write_sends_zeros(self):
        remote = Buffer(self.pd, 4096, fill=0x77)
        self.a.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [SGE(0, 1000, self.lkey)], wr_id=4,
                                      rdma=(remote.rkey, remote.addr + 96)))
        self.assertWC(self.a.poll()[0], wr_id=4, status=OK)
        self.assertEqual(remote.read(), b'\x77' * 96 + b'\0' * 1000 + b'\x77' * 3000)
        self.assertTrue(remote.guards_intact())

    def test_read_and_atomic_results_discarded(self):
        remote = Buffer(self.pd, 4096)
        remote.write(bytes(range(256)) * 16)
        before = remote.snapshot()
        self.a.post_send(base.send_wr(e.IBV_WR_RDMA_READ, [SGE(0x2000, 4096, self.lkey)], wr_id=5,
                                      rdma=(remote.rkey, remote.addr)))
        self.assertWC(self.a.poll()[0], wr_id=5, status=OK)
        self.assertEqual(remote.snapshot(), before)
        remote.set_u64(41)
        self.a.post_send(base.send_wr(e.IBV_WR_ATOMIC_FETCH_AND_ADD, [SGE(8, 8, self.lkey)], wr_id=6,
                                      atomic=(remote.rkey, remote.addr, 1, 0)))
        self.assertWC(self.a.poll()[0], wr_id=6, status=OK)
        self.assertEqual(remote.u64(), 42)  # the add happened; its original value was discarded

    def test_lkey_as_rkey_is_remote_access_error(self):
        # "only the lkey is valid": as an R_Key (either of its keys) nothing is reached.
        src = Buffer(self.pd, 8, fill=0x31)
        for rkey in (self.lkey, self.null.contents.rkey):
            with self.subTest(rkey=rkey):
                a, b = base.connected_pair(self.ctx, self.pd, RC)
                a.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [src.sge()], wr_id=8, rdma=(rkey, 0x3000)))
                self.assertWC(a.poll()[0], wr_id=8, status=e.IBV_WC_REM_ACCESS_ERR)
        self.assertTrue(src.guards_intact())

    def test_refusal_log_line(self):
        code = ('import base, os, ctypes, raw, test_null_mr as t\nos.environ["SOFTVERBS_LOG"] = "error"\n'
                'ctx = base.open_context(); pd = base.PD(ctx)\n'
                'mr, err = t.alloc_null_mr(t.pd_pointer(pd))\n'
                'lib = raw.lib\nlib.ibv_rereg_mr.argtypes = [ctypes.c_void_p, ctypes.c_int] + [ctypes.c_void_p] * 2'
                ' + [ctypes.c_size_t, ctypes.c_int]\n'
                'print("rc", lib.ibv_rereg_mr(ctypes.cast(mr, ctypes.c_void_p), 4, None, None, 0, 1))\n'
                'print("dereg", lib.ibv_dereg_mr(ctypes.cast(mr, ctypes.c_void_p)))\n')
        r = base.run_python(code, SOFTVERBS_LOG='error')
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn('rc -1', r.stdout)
        self.assertIn('dereg 0', r.stdout)
        self.assertRegex(r.stderr, r'ibv_rereg_mr\(mr lkey 0x[0-9a-f]+\): a null MR has no memory to re-register')
