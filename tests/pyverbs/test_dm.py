"""Device memory (issue 13 item 3; ibv_alloc_dm(3), ibv_reg_dm_mr, ibv_import_dm(3)): memory the
device owns, copied with ibv_memcpy_to_dm / ibv_memcpy_from_dm (bounds checked: EFAULT, as
mlx5), registered zero-based (IBV_ACCESS_ZERO_BASED required, as the kernel's reg_dm_mr) and
reached by RDMA WRITE / READ / atomics from this process and from another one, every byte
checked through ibv_memcpy_from_dm."""
import errno

import base
import pyverbs.enums as e
from agent import Agent
from base import Buffer
from pyverbs.device import DM, AllocDmAttr
from pyverbs.mr import DMMR
from pyverbs.pyverbs_error import PyverbsRDMAError

tearDownModule = base.tear_down_module

RC = e.IBV_QPT_RC
OK = e.IBV_WC_SUCCESS
MAX_DM = 256 * 1024
DM_ACCESS = (e.IBV_ACCESS_ZERO_BASED | e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE |
             e.IBV_ACCESS_REMOTE_READ | e.IBV_ACCESS_REMOTE_ATOMIC)


class DmTestCase(base.DataTestCase):

    def dm(self, length=8192, log_align=0):
        d = DM(self.ctx, AllocDmAttr(length, log_align, 0))
        self.addCleanup(d.close)
        return d

    def assertErrno(self, err, fn, *args):
        with self.assertRaises(PyverbsRDMAError) as c:
            fn(*args)
        self.assertEqual(c.exception.error_code, err)


class DmCopyTest(DmTestCase):

    def test_copy_both_ways_and_bounds(self):
        self.assertEqual(self.ctx.query_device_ex().max_dm_size, MAX_DM)
        dm = self.dm(4096)
        self.assertEqual(dm.copy_from_dm(0, 4096), bytes(4096))  # new device memory is zeroed
        data = bytes(range(256)) * 4
        dm.copy_to_dm(1000, data, len(data))
        self.assertEqual(dm.copy_from_dm(1000, len(data)), data)
        self.assertEqual(dm.copy_from_dm(0, 1000), bytes(1000))
        self.assertEqual(dm.copy_from_dm(2024, 2072), bytes(2072))
        self.assertErrno(errno.EFAULT, dm.copy_to_dm, 4090, b'x' * 8, 8)
        self.assertErrno(errno.EFAULT, dm.copy_from_dm, 4096, 1)
        self.assertEqual(dm.copy_from_dm(4088, 8), bytes(8))  # nothing written by the refused copy

    def test_alloc_bad_input(self):
        self.assertErrno(errno.EINVAL, DM, self.ctx, AllocDmAttr(MAX_DM + 1, 0, 0))
        self.assertErrno(errno.EINVAL, DM, self.ctx, AllocDmAttr(0, 0, 0))
        self.assertErrno(errno.EINVAL, DM, self.ctx, AllocDmAttr(4096, 0, 1))
        self.assertErrno(errno.EINVAL, DM, self.ctx, AllocDmAttr(4096, 20, 0))
        self.dm(MAX_DM, 12)


class DmMrTest(DmTestCase):

    def setUp(self):
        super().setUp()
        self.a, self.b = base.connected_pair(self.ctx, self.pd, RC)
        self.buf = Buffer(self.pd, 4096)

    def test_traffic_and_atomics_on_a_dm_mr(self):
        dm = self.dm(8192)
        mr = DMMR(self.pd, 4096, DM_ACCESS, dm, 1024)  # bytes [1024, 5120) of the device memory
        data = bytes(range(1, 251)) * 8
        self.buf.write(data)
        # RDMA WRITE at offset 100 of the zero-based MR.
        self.a.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [self.buf.sge(0, 2000)], wr_id=1,
                                      rdma=(mr.rkey, 100)))
        self.assertWC(self.a.poll()[0], wr_id=1, status=OK)
        self.assertEqual(dm.copy_from_dm(1124, 2000), data)
        self.assertEqual(dm.copy_from_dm(0, 1124), bytes(1124))
        self.assertEqual(dm.copy_from_dm(3124, 5068), bytes(5068))
        # READ back, atomics, and a receive into the DM MR (its lkey, zero-based addresses).
        self.a.post_send(base.send_wr(e.IBV_WR_RDMA_READ, [self.buf.sge(2048, 500)], wr_id=2,
                                      rdma=(mr.rkey, 300)))
        self.assertWC(self.a.poll()[0], status=OK)
        self.assertEqual(self.buf.read(2048, 500), data[200:700])
        dm.copy_to_dm(1024 + 4000, (7).to_bytes(8, 'little'), 8)
        self.a.post_send(base.send_wr(e.IBV_WR_ATOMIC_CMP_AND_SWP, [self.buf.sge(0, 8)], wr_id=3,
                                      atomic=(mr.rkey, 4000, 7, 99)))
        self.assertWC(self.a.poll()[0], status=OK)
        self.assertEqual(self.buf.u64(0), 7)
        self.assertEqual(int.from_bytes(dm.copy_from_dm(5024, 8), 'little'), 99)
        self.b.post_recv(base.SGE(3000, 64, mr.lkey), wr_id=4)
        self.buf.write(b'R' * 64)
        self.a.post_send(base.send_wr(e.IBV_WR_SEND, [self.buf.sge(0, 64)], wr_id=5))
        self.assertWC(self.a.poll()[0], status=OK)
        self.assertWC(self.b.poll()[0], wr_id=4, status=OK, byte_len=64)
        self.assertEqual(dm.copy_from_dm(4024, 64), b'R' * 64)
        # Beyond the MR (not beyond the device memory): a remote access error, nothing written.
        self.a.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [self.buf.sge(0, 16)], wr_id=6,
                                      rdma=(mr.rkey, 4090)))
        self.assertWC(self.a.poll()[0], wr_id=6, status=e.IBV_WC_REM_ACCESS_ERR)
        self.assertEqual(dm.copy_from_dm(5120, 3072), bytes(3072))
        self.assertTrue(self.buf.guards_intact())

    def test_another_process_writes_reads_and_adds(self):
        dm = self.dm(4096)
        mr = DMMR(self.pd, 4096, DM_ACCESS, dm, 0)
        child = Agent()
        self.addCleanup(child.close)
        info = child.call('qp', qpt=RC, size=4096)
        me = base.Peer(self.ctx, self.pd, RC).connect(info['qpn'])
        child.call('connect', id=info['id'], remote_qpn=me.qpn)
        data = bytes(range(200))
        child.call('write', id=info['id'], offset=0, data=data.hex())
        child.call('post_send', id=info['id'], opcode=e.IBV_WR_RDMA_WRITE, wr_id=1, offset=0,
                   length=200, rkey=mr.rkey, raddr=64)
        self.assertEqual(child.call('poll', id=info['id'])[0]['status'], OK)
        self.assertEqual(dm.copy_from_dm(64, 200), data)
        dm.copy_to_dm(2048, b'from the device!', 16)
        child.call('post_send', id=info['id'], opcode=e.IBV_WR_RDMA_READ, wr_id=2, offset=1000,
                   length=16, rkey=mr.rkey, raddr=2048)
        self.assertEqual(child.call('poll', id=info['id'])[0]['status'], OK)
        self.assertEqual(bytes.fromhex(child.call('read', id=info['id'], offset=1000, length=16)),
                         b'from the device!')
        dm.copy_to_dm(8, (40).to_bytes(8, 'little'), 8)
        for _ in range(2):
            child.call('atomic', id=info['id'], opcode=e.IBV_WR_ATOMIC_FETCH_AND_ADD, rkey=mr.rkey,
                       raddr=8, compare_add=1, swap=0)
        self.assertEqual(int.from_bytes(dm.copy_from_dm(8, 8), 'little'), 42)

    def test_reg_dm_mr_bad_input_and_free_order(self):
        dm = self.dm(4096)
        self.assertErrno(errno.EINVAL, DMMR, self.pd, 4096, DM_ACCESS & ~e.IBV_ACCESS_ZERO_BASED, dm, 0)
        self.assertErrno(errno.EINVAL, DMMR, self.pd, 4096, DM_ACCESS, dm, 8)          # beyond the DM
        self.assertErrno(errno.EINVAL, DMMR, self.pd, 4096, DM_ACCESS | e.IBV_ACCESS_MW_BIND, dm, 0)
        # ibv_free_dm while an MR uses it: EBUSY (pyverbs closes MRs first, so through raw C).
        import ctypes
        import raw
        c = raw.RawContext()
        self.addCleanup(c.close)

        class AllocAttr(ctypes.Structure):
            _fields_ = [('length', ctypes.c_size_t), ('log_align_req', ctypes.c_uint32),
                        ('comp_mask', ctypes.c_uint32)]
        alloc = raw_op(c.ctx, 64, ctypes.c_void_p, [ctypes.c_void_p, ctypes.POINTER(AllocAttr)])
        free = raw_op(c.ctx, 72, ctypes.c_int, [ctypes.c_void_p])
        reg = raw_op(c.ctx, 56, ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64,
                                                  ctypes.c_size_t, ctypes.c_uint])
        raw_dm = alloc(c.ctx, ctypes.byref(AllocAttr(4096, 0, 0)))
        self.assertTrue(raw_dm)
        pd = c.alloc_pd()
        mr = reg(pd, raw_dm, 0, 4096, DM_ACCESS)
        self.assertTrue(mr)
        self.assertEqual(free(raw_dm), errno.EBUSY)
        self.assertEqual(raw.lib.ibv_dereg_mr(mr), 0)
        self.assertEqual(free(raw_dm), 0)

    def test_import_dm(self):
        dm = self.dm(4096)
        dm.copy_to_dm(0, b'shared', 6)
        imported = DM(self.ctx, AllocDmAttr(4096, 0, 0), handle=dm.handle)
        self.assertEqual(imported.copy_from_dm(0, 6), b'shared')
        imported.copy_to_dm(6, b'!', 1)
        self.assertEqual(dm.copy_from_dm(0, 7), b'shared!')
        imported.unimport()
        with self.assertRaises(PyverbsRDMAError) as c:
            DM(self.ctx, AllocDmAttr(4096, 0, 0), handle=0x7ffffff0)
        self.assertEqual(c.exception.error_code, errno.ENOENT)

    def test_import_dm_through_an_imported_context(self):
        # ibv_import_dm(3) through a context sharing the cmd_fd (ibv_import_device): the same
        # memory; a freed DM is unknown there (ENOENT, with a log line naming the handle).
        import os
        from pyverbs.device import Context
        ctx2 = Context(cmd_fd=os.dup(self.ctx.cmd_fd))
        self.addCleanup(ctx2.close)
        dm = self.dm(4096)
        dm.copy_to_dm(100, b'device', 6)
        imported = DM(ctx2, AllocDmAttr(4096, 0, 0), handle=dm.handle)
        self.assertEqual(imported.copy_from_dm(100, 6), b'device')
        imported.copy_to_dm(0, b'back', 4)
        self.assertEqual(dm.copy_from_dm(0, 4), b'back')
        self.assertErrno(errno.EFAULT, imported.copy_to_dm, 4093, b'xxxx', 4)
        imported.unimport()
        gone = DM(self.ctx, AllocDmAttr(64, 0, 0))
        handle = gone.handle
        gone.close()
        with self.assertRaises(PyverbsRDMAError) as c:
            DM(ctx2, AllocDmAttr(64, 0, 0), handle=handle)
        self.assertEqual(c.exception.error_code, errno.ENOENT)

    def test_import_dm_in_another_process(self):
        # The cmd_fd over SCM_RIGHTS: the child imports the context and the device memory, reads
        # it, and RDMA WRITEs into it through an MR of its own on the imported DM.
        import json
        import os
        import socket
        dm = self.dm(8192)
        data = bytes((i * 7 + 3) & 0xff for i in range(4096))
        dm.copy_to_dm(0, data, 4096)
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.addCleanup(parent.close)
        import subprocess
        proc = subprocess.Popen([base.PYTHON, '-u', '-c', DM_IMPORTER.replace('FD', str(child.fileno()))],
                                env=base.child_env(), cwd=base.HERE, pass_fds=[child.fileno()],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.addCleanup(base.stop_child, proc)
        child.close()
        parent.settimeout(20)
        socket.send_fds(parent, [json.dumps(dict(handle=dm.handle)).encode()], [os.dup(self.ctx.cmd_fd)])
        reply = parent.recv(65536)
        self.assertTrue(reply, f'the importer ended early: {proc.communicate(timeout=10)[1]!r}')
        out = json.loads(reply)
        self.assertEqual(bytes.fromhex(out['read']), data)
        self.assertEqual(out['write'], OK)
        self.assertEqual(dm.copy_from_dm(4096, 4096), bytes.fromhex(out['written']))
        self.assertEqual(out['unknown'], errno.ENOENT)
        _, err = proc.communicate(timeout=20)
        self.assertEqual(proc.returncode, 0, err)
        self.assertRegex(err.decode(), r'ibv_import_dm\(dm 0x[0-9a-f]+\).*no device memory with handle \d+')

    def test_refusal_log_line(self):
        code = ('import base, os\nos.environ["SOFTVERBS_LOG"] = "error"\nfrom pyverbs.device import DM, AllocDmAttr\n'
                'dm = DM(base.open_context(), AllocDmAttr(4096, 0, 0))\n'
                'try:\n    dm.copy_to_dm(4095, b"ab", 2)\n'
                'except base.PyverbsRDMAError as x:\n    print("errno", x.error_code)\n')
        r = base.run_python(code, SOFTVERBS_LOG='error')
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f'errno {errno.EFAULT}', r.stdout)
        self.assertRegex(r.stderr, r'ibv_memcpy_to_dm\(dm 0x[0-9a-f]+\): \[4095, \+2\) is outside the 4096 bytes '
                                   r'of device memory')


DM_IMPORTER = """
import json, os, socket
import base
os.environ['SOFTVERBS_LOG'] = 'error'  # base clears it for the test process; read at first use
import pyverbs.enums as e
from pyverbs.device import Context, DM, AllocDmAttr
from pyverbs.mr import DMMR
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError

sock = socket.socket(fileno=FD)
msg, fds, _, _ = socket.recv_fds(sock, 65536, 1)
req = json.loads(msg)
ctx = Context(cmd_fd=fds[0])
dm = DM(ctx, AllocDmAttr(8192, 0, 0), handle=req['handle'])
out = dict(read=dm.copy_from_dm(0, 4096).hex())
pd = PD(ctx)
mr = DMMR(pd, 4096, %d, dm, 4096)
src = base.Buffer(pd, 4096)
payload = bytes((i * 13 + 5) & 0xff for i in range(4096))
src.write(payload)
a, b = base.connected_pair(ctx, pd, e.IBV_QPT_RC)
a.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [src.sge()], wr_id=1, rdma=(mr.rkey, 0)))
out['write'] = a.poll()[0].status
out['written'] = payload.hex()
try:
    DM(ctx, AllocDmAttr(64, 0, 0), handle=req['handle'] + 100000)
    out['unknown'] = 0
except PyverbsRDMAError as ex:
    out['unknown'] = abs(ex.error_code)
a.qp.close(); b.qp.close(); mr.close(); dm.unimport()
sock.sendall(json.dumps(out).encode())
""" % DM_ACCESS


def raw_op(ctx, offset, restype, argtypes):
    import ctypes
    vctx = ctypes.cast(ctx, ctypes.c_void_p).value - 320
    fn = ctypes.c_void_p.from_address(vctx + offset).value
    return ctypes.CFUNCTYPE(restype, *argtypes, use_errno=True)(fn)
