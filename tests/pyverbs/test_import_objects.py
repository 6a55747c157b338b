"""Imports (ibv_import_device(3), ibv_import_pd(3), ibv_import_mr(3)): a context's cmd_fd, dup'ed
in this process or passed to another one over a unix socket (SCM_RIGHTS), opens a context that
shares its PDs and MRs; the imported MR carries the same keys and writes through it land in the
exporter's memory byte for byte. Bad handles and fds that are no cmd_fd: the errno rdma-core and
the kernel give, and a log line."""
import errno
import json
import os
import random
import socket
import subprocess
import textwrap
import unittest

import base
import pyverbs.enums as e
from base import Buffer
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.wr import SGE

tearDownModule = base.tear_down_module

RC = e.IBV_QPT_RC
OK = e.IBV_WC_SUCCESS


def payload(n, seed):
    return random.Random(seed).randbytes(n)


class SameProcessImportTest(base.DataTestCase):

    def imported_context(self):
        ctx = Context(cmd_fd=os.dup(self.ctx.cmd_fd))
        self.addCleanup(ctx.close)
        return ctx

    def test_imported_pd_and_mr_are_the_exporters(self):
        buf = Buffer(self.pd, 4096)
        ctx2 = self.imported_context()
        ipd = PD(ctx2, handle=self.pd.handle)
        self.assertEqual(ipd.handle, self.pd.handle)
        imr = MR(ipd, handle=buf.mr.handle)
        self.assertEqual((imr.handle, imr.lkey, imr.rkey, imr.length),
                         (buf.mr.handle, buf.lkey, buf.rkey, 4096))

        # A QP of the imported context, on the imported PD, gathers through the imported lkey;
        # the exporter's QP receives the RDMA WRITE into an MR of its PD.
        dst = Buffer(self.pd, 4096)
        mine, theirs = base.connected_pair(ctx2, ipd, RC, b_ctx=self.ctx, b_pd=self.pd)
        data = payload(3000, 1)
        buf.write(data)
        mine.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [SGE(buf.addr, 3000, imr.lkey)], wr_id=1,
                                    rdma=(dst.rkey, dst.addr + 100)))
        self.assertWC(mine.poll()[0], wr_id=1, status=OK, opcode=e.IBV_WC_RDMA_WRITE)
        self.assertEqual(dst.read(100, 3000), data)
        self.assertEqual(dst.read(0, 100), bytes(100))
        self.assertTrue(dst.guards_intact())

        # Memory registered through the imported PD serves the exporter's QPs: one PD.
        src2 = Buffer(ipd, 512)
        data2 = payload(512, 2)
        src2.write(data2)
        theirs.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [src2.sge()], wr_id=2,
                                      rdma=(imr.rkey, buf.addr + 3500)))
        self.assertWC(theirs.poll()[0], wr_id=2, status=OK, opcode=e.IBV_WC_RDMA_WRITE)
        self.assertEqual(buf.read(3500, 512), data2)

        # Unimporting frees the handles only: the exporter's MR and PD keep working.
        imr.unimport()
        data3 = payload(256, 3)
        buf.write(data3)
        theirs2, mine2 = base.connected_pair(self.ctx, self.pd, RC, b_ctx=ctx2, b_pd=ipd)
        theirs2.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [buf.sge(0, 256)], wr_id=3,
                                       rdma=(dst.rkey, dst.addr)))
        self.assertWC(theirs2.poll()[0], wr_id=3, status=OK)
        self.assertEqual(dst.read(0, 256), data3)
        # A new import of the same handle still finds the MR.
        self.assertEqual(MR(ipd, handle=buf.mr.handle).lkey, buf.lkey)

    def test_unknown_handles_are_enoent(self):
        ctx2 = self.imported_context()
        buf = Buffer(self.pd, 64)
        self.assertRDMAError(errno.ENOENT, PD, ctx2, handle=self.pd.handle + 1000)
        ipd = PD(ctx2, handle=self.pd.handle)
        self.assertRDMAError(errno.ENOENT, MR, ipd, handle=buf.mr.handle + 1)
        # A deregistered MR and a deallocated PD are unknown too.
        h = buf.mr.handle
        buf.mr.close()
        self.assertRDMAError(errno.ENOENT, MR, ipd, handle=h)
        pd2 = PD(self.ctx)
        h = pd2.handle
        pd2.close()
        self.assertRDMAError(errno.ENOENT, PD, ctx2, handle=h)

    def test_fds_that_are_no_cmd_fd(self):
        # rdma-core's ibv_import_device: not a command fd -> EINVAL; a character device that
        # is none of the devices -> ENODEV. The fd stays the caller's.
        r, w = os.pipe()
        self.addCleanup(os.close, r)
        self.addCleanup(os.close, w)
        self.assertRDMAError(errno.EINVAL, Context, cmd_fd=r)
        null = os.open('/dev/null', os.O_RDWR)
        self.addCleanup(os.close, null)
        self.assertRDMAError(errno.ENODEV, Context, cmd_fd=null)
        os.fstat(null)  # still open

    def test_refusals_are_logged(self):
        code = textwrap.dedent('''
            import os
            from pyverbs.device import Context
            from pyverbs.pd import PD
            from pyverbs.pyverbs_error import PyverbsRDMAError
            ctx = Context(name='softverbs0')
            for fn, kw in ((Context, dict(cmd_fd=os.open('/dev/null', os.O_RDWR))),
                           (PD, dict(creator=ctx, handle=4242))):
                try:
                    fn(**kw)
                except PyverbsRDMAError as ex:
                    print('refused', abs(ex.error_code))
        ''')
        r = base.run_python(code, SOFTVERBS_LOG='error')
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.split(), ['refused', str(errno.ENODEV), 'refused', str(errno.ENOENT)])
        lines = r.stderr.splitlines()
        self.assertEqual(len(lines), 2, r.stderr)
        self.assertRegex(lines[0], r'ibv_import_device\(fd \d+\).*character device')
        self.assertRegex(lines[1], r'ibv_import_pd\(pd 0x1092\).*no PD with handle 4242')


# The importer: receives the exporter's cmd_fd and handles over the socket `argv[1]`, imports the
# PD and MR, and uses both as on hardware: memory of its own registered on the imported PD is the
# source of an RDMA WRITE into the exporter's MR (imported rkey) and the target of one from the
# exporter; a local SGE through the imported lkey gathers the exporter's bytes. What stays
# refused: a READ scattering into the imported lkey.
IMPORTER = textwrap.dedent("""
    import json, os, socket, sys
    import base
    os.environ['SOFTVERBS_LOG'] = 'error'  # base clears it for the test process; read at first use
    import pyverbs.enums as e
    from pyverbs.device import Context
    from pyverbs.mr import MR
    from pyverbs.pd import PD
    from pyverbs.wr import SGE

    sock = socket.socket(fileno=int(sys.argv[1]))
    msg, fds, _, _ = socket.recv_fds(sock, 65536, 1)
    req = json.loads(msg)
    ctx = Context(cmd_fd=fds[0])
    ipd = PD(ctx, handle=req['pd'])
    imr = MR(ipd, handle=req['mr'])
    out = dict(handle=imr.handle, lkey=imr.lkey, rkey=imr.rkey, length=imr.length)

    # Memory of this process registered on the PD of the other one.
    src = base.Buffer(ipd, len(req['data']) // 2)
    src.write(bytes.fromhex(req['data']))
    land = base.Buffer(ipd, 4096)
    me = base.Peer(ctx, ipd, e.IBV_QPT_RC).connect(req['qpn'])
    sock.sendall(json.dumps(dict(qpn=me.qpn, rkey=land.rkey, addr=land.addr)).encode())
    sock.recv(16)  # the exporter's QP is connected and has written into `land`
    out['landed'] = land.read().hex()
    me.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [src.sge()], wr_id=1,
                              rdma=(imr.rkey, req['addr'] + req['offset'])))
    out['write'] = me.poll()[0].status

    # A local SGE through the imported lkey gathers the exporter's memory (what was just written).
    own_pd = PD(ctx)
    b, c = base.connected_pair(ctx, ipd, e.IBV_QPT_RC, b_pd=own_pd)
    dst = base.Buffer(own_pd, 4096)
    b.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [SGE(req['addr'] + req['offset'] + 100, 3000, imr.lkey)],
                             wr_id=2, rdma=(dst.rkey, dst.addr + 8)))
    out['local_sge'] = b.poll()[0].status
    out['gathered'] = dst.read(8, 3000).hex()
    out['gather_bounds'] = dst.read(0, 8) + dst.read(3008) == bytes(4096 - 3000)
    # A READ would scatter into the exporter's memory: refused, the buffer untouched.
    b.post_send(base.send_wr(e.IBV_WR_RDMA_READ, [SGE(req['addr'], 64, imr.lkey)], wr_id=3,
                             rdma=(dst.rkey, dst.addr)))
    out['read_into_import'] = b.poll()[0].status
    # Bad input: an SGE that leaves the imported MR is a local protection error, nothing sent.
    b2, c2 = base.connected_pair(ctx, ipd, e.IBV_QPT_RC, b_pd=own_pd)
    before = dst.read()
    b2.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [SGE(req['addr'] + imr.length - 10, 64, imr.lkey)], wr_id=4,
                              rdma=(dst.rkey, dst.addr)))
    out['beyond_import'] = b2.poll()[0].status
    out['dst_kept'] = dst.read() == before
    b.qp.close()
    b2.qp.close()
    me.qp.close()
    src.mr.close()
    land.mr.close()
    imr.unimport()
    ipd.unimport()
    sock.sendall(json.dumps(out).encode())
""")


class CrossProcessImportTest(base.DataTestCase):
    """The importer is a child started by fork + exec (subprocess), so it joins the host registry
    as a process of its own; the cmd_fd reaches it only over the socket pair."""

    def test_import_in_a_child_that_received_the_fd(self):
        buf = Buffer(self.pd, 8192)
        me = base.Peer(self.ctx, self.pd, RC)
        parent_sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.addCleanup(parent_sock.close)
        proc = subprocess.Popen([base.PYTHON, '-u', '-c', IMPORTER, str(child_sock.fileno())],
                                env=base.child_env(), cwd=base.HERE,
                                pass_fds=[child_sock.fileno()], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        self.addCleanup(base.stop_child, proc)
        child_sock.close()
        parent_sock.settimeout(20)

        data = payload(5000, 7)
        req = dict(pd=self.pd.handle, mr=buf.mr.handle, qpn=me.qpn, addr=buf.addr, offset=1000,
                   data=data.hex())
        socket.send_fds(parent_sock, [json.dumps(req).encode()], [os.dup(self.ctx.cmd_fd)])
        child = json.loads(parent_sock.recv(65536))
        me.connect(child['qpn'])
        # The exporter writes into the importer's memory registered on the shared PD.
        mine = Buffer(self.pd, 4096)
        sent = payload(4096, 8)
        mine.write(sent)
        me.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [mine.sge()], wr_id=5,
                                  rdma=(child['rkey'], child['addr'])))
        self.assertWC(me.poll()[0], wr_id=5, status=OK)
        parent_sock.sendall(b'go')
        reply = parent_sock.recv(65536)
        self.assertTrue(reply, f'the importer ended early: {proc.communicate(timeout=10)[1]!r}')
        out = json.loads(reply)

        self.assertEqual((out['handle'], out['lkey'], out['rkey'], out['length']),
                         (buf.mr.handle, buf.lkey, buf.rkey, 8192))
        self.assertEqual(bytes.fromhex(out['landed']), sent)
        self.assertEqual(out['write'], OK)
        self.assertEqual(buf.read(1000, 5000), data)
        self.assertEqual(buf.read(0, 1000), bytes(1000))
        self.assertEqual(buf.read(6000), bytes(8192 - 6000))
        self.assertTrue(buf.guards_intact())
        self.assertEqual(out['local_sge'], OK)
        self.assertEqual(bytes.fromhex(out['gathered']), data[100:3100])
        self.assertTrue(out['gather_bounds'])
        self.assertEqual(out['read_into_import'], e.IBV_WC_LOC_PROT_ERR)
        self.assertEqual(buf.read(0, 64), bytes(64))
        self.assertEqual(out['beyond_import'], e.IBV_WC_LOC_PROT_ERR)
        self.assertTrue(out['dst_kept'])
        _, err = proc.communicate(timeout=20)
        self.assertEqual(proc.returncode, 0, err)
        err = err.decode()
        self.assertNotIn('not freed', err)
        self.assertRegex(err, r'lkey 0x[0-9a-f]+ is an MR of process slot \d+ \(imported, ibv_import_mr\): '
                              r'a READ or atomic writes this process')

        # The exporter's objects are untouched by the import and the unimport.
        dst = Buffer(self.pd, 64)
        a, b = base.connected_pair(self.ctx, self.pd, RC)
        a.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [buf.sge(1000, 64)], wr_id=9,
                                 rdma=(dst.rkey, dst.addr)))
        self.assertWC(a.poll()[0], wr_id=9, status=OK)
        self.assertEqual(dst.read(), data[:64])


if __name__ == '__main__':
    unittest.main()
