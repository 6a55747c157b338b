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
# PD and MRs, and uses them as on hardware: memory of its own registered on the imported PD is the
# source of an RDMA WRITE into the exporter's MR (imported rkey) and the target of one from the
# exporter; a local SGE through the imported lkey gathers the exporter's bytes (SEND / WRITE) and
# is written in the exporter's memory: an RDMA READ's response, an atomic's original value, a
# receive through an RQ or an SRQ (of a message from this process, and of one from the exporter
# itself). Bad input: no LOCAL_WRITE, a range leaving the MR, an MR its exporter deregistered.
IMPORTER = textwrap.dedent("""
    import json, os, socket, sys
    import base
    os.environ['SOFTVERBS_LOG'] = 'error'  # base clears it for the test process; read at first use
    import pyverbs.enums as e
    from pyverbs.device import Context
    from pyverbs.mr import MR
    from pyverbs.pd import PD
    from pyverbs.srq import SRQ, SrqAttr, SrqInitAttr
    from pyverbs.wr import SGE

    sock = socket.socket(fileno=int(sys.argv[1]))
    msg, fds, _, _ = socket.recv_fds(sock, 65536, 1)
    req = json.loads(msg)
    ctx = Context(cmd_fd=fds[0])
    ipd = PD(ctx, handle=req['pd'])
    imr = MR(ipd, handle=req['mr'])
    ro = MR(ipd, handle=req['ro'])      # registered without IBV_ACCESS_LOCAL_WRITE
    gone = MR(ipd, handle=req['gone'])  # deregistered by the exporter before it is used
    out = dict(handle=imr.handle, lkey=imr.lkey, rkey=imr.rkey, length=imr.length)
    base_addr = req['addr']

    # Memory of this process registered on the PD of the other one.
    src = base.Buffer(ipd, len(req['data']) // 2)
    src.write(bytes.fromhex(req['data']))
    land = base.Buffer(ipd, 4096)
    me = base.Peer(ctx, ipd, e.IBV_QPT_RC).connect(req['qpn'])
    # A receive from the exporter's QP lands in the exporter's memory through the imported lkey.
    me.post_recv(SGE(base_addr + 7900, 100, imr.lkey), wr_id=7)
    sock.sendall(json.dumps(dict(qpn=me.qpn, rkey=land.rkey, addr=land.addr)).encode())
    sock.recv(16)  # the exporter's QP is connected and has written into `land` and sent
    out['landed'] = land.read().hex()
    wc = me.poll()[0]
    out['recv_from_exporter'] = [wc.status, wc.wr_id, wc.byte_len]
    me.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [src.sge()], wr_id=1,
                              rdma=(imr.rkey, base_addr + req['offset'])))
    out['write'] = me.poll()[0].status

    # A local SGE through the imported lkey gathers the exporter's memory (what was just written).
    own_pd = PD(ctx)
    b, c = base.connected_pair(ctx, ipd, e.IBV_QPT_RC, b_pd=own_pd)
    dst = base.Buffer(own_pd, 4096)
    b.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [SGE(base_addr + req['offset'] + 100, 3000, imr.lkey)],
                             wr_id=2, rdma=(dst.rkey, dst.addr + 8)))
    out['local_sge'] = b.poll()[0].status
    out['gathered'] = dst.read(8, 3000).hex()
    out['gather_bounds'] = dst.read(0, 8) + dst.read(3008) == bytes(4096 - 3000)

    # An RDMA READ's response lands in the exporter's memory: 1000 bytes of `dst` at 6500.
    dst.write(bytes.fromhex(req['pattern']))
    b.post_send(base.send_wr(e.IBV_WR_RDMA_READ, [SGE(base_addr + 6500, 1000, imr.lkey)], wr_id=3,
                             rdma=(dst.rkey, dst.addr + 16)))
    wc = b.poll()[0]
    out['read'] = [wc.status, wc.byte_len]
    # Atomics: the 8-byte original value lands there too (7600, 7608); the word is dst's at 4000.
    dst.write((0x1122334455667788).to_bytes(8, 'little'), 4000)
    b.post_send(base.send_wr(e.IBV_WR_ATOMIC_FETCH_AND_ADD, [SGE(base_addr + 7600, 8, imr.lkey)], wr_id=4,
                             atomic=(dst.rkey, dst.addr + 4000, 5, 0)))
    out['fetch_add'] = b.poll()[0].status
    b.post_send(base.send_wr(e.IBV_WR_ATOMIC_CMP_AND_SWP, [SGE(base_addr + 7608, 8, imr.lkey)], wr_id=5,
                             atomic=(dst.rkey, dst.addr + 4000, 0x1122334455667788 + 5, 0xdeadbeef)))
    out['cmp_swp'] = b.poll()[0].status
    out['word'] = int.from_bytes(dst.read(4000, 8), 'little')
    # A receive WQE: the first 200 bytes of the message to the exporter, the rest to `tail`.
    tail = base.Buffer(ipd, 256)
    b.post_recv(SGE(base_addr + 7700, 200, imr.lkey), tail.sge(0, 256), wr_id=6)
    c.post_send(base.send_wr(e.IBV_WR_SEND, [dst.sge(0, 300)], wr_id=6))
    out['send'] = c.poll()[0].status
    wc = b.poll()[0]
    out['recv'] = [wc.status, wc.wr_id, wc.byte_len]
    out['tail'] = tail.read(0, 100).hex()
    out['tail_bounds'] = tail.read(100) == bytes(156) and tail.guards_intact()
    # The same through an SRQ: 64 bytes at 8100.
    srq = SRQ(ipd, SrqInitAttr(SrqAttr(max_wr=4, max_sge=1)))
    srq.post_recv(base.recv_wr([SGE(base_addr + 8100, 64, imr.lkey)], wr_id=8))
    s1 = base.Peer(ctx, ipd, e.IBV_QPT_RC, srq=srq)
    s2 = base.Peer(ctx, own_pd, e.IBV_QPT_RC)
    s1.connect(s2.qpn)
    s2.connect(s1.qpn)
    s2.post_send(base.send_wr(e.IBV_WR_SEND, [dst.sge(1000, 64)], wr_id=8))
    out['srq_send'] = s2.poll()[0].status
    wc = s1.poll()[0]
    out['srq_recv'] = [wc.status, wc.wr_id, wc.byte_len]
    s1.qp.close()
    s2.qp.close()
    srq.close()

    # Bad input, each on a fresh pair (a local protection error takes the QP to ERR), nothing
    # written: no LOCAL_WRITE, a range leaving the MR, an MR its exporter deregistered.
    bad = {}
    for name, sge, opcode in (('no_local_write', SGE(req['ro_addr'], 64, ro.lkey), e.IBV_WR_RDMA_READ),
                              ('read_beyond', SGE(base_addr + imr.length - 10, 64, imr.lkey), e.IBV_WR_RDMA_READ),
                              ('atomic_beyond', SGE(base_addr + imr.length - 4, 8, imr.lkey),
                               e.IBV_WR_ATOMIC_FETCH_AND_ADD),
                              ('deregistered', SGE(req['gone_addr'], 64, gone.lkey), e.IBV_WR_RDMA_READ),
                              ('write_beyond', SGE(base_addr + imr.length - 10, 64, imr.lkey), e.IBV_WR_RDMA_WRITE)):
        x, y = base.connected_pair(ctx, ipd, e.IBV_QPT_RC, b_pd=own_pd)
        before = dst.read()
        if opcode == e.IBV_WR_ATOMIC_FETCH_AND_ADD:
            x.post_send(base.send_wr(opcode, [sge], wr_id=9, atomic=(dst.rkey, dst.addr + 4000, 1, 0)))
        else:
            x.post_send(base.send_wr(opcode, [sge], wr_id=9, rdma=(dst.rkey, dst.addr)))
        bad[name] = [x.poll()[0].status, dst.read() == before]
        x.qp.close()
        y.qp.close()
    # A receive into the MR without LOCAL_WRITE: a protection error at the receiver.
    x, y = base.connected_pair(ctx, ipd, e.IBV_QPT_RC, b_pd=own_pd)
    x.post_recv(SGE(req['ro_addr'], 64, ro.lkey), wr_id=10)
    y.post_send(base.send_wr(e.IBV_WR_SEND, [dst.sge(0, 64)], wr_id=10))
    bad['recv_no_local_write'] = [x.poll()[0].status, y.poll()[0].status]
    x.qp.close()
    y.qp.close()
    out['bad'] = bad
    for qp in (b, c, me):
        qp.qp.close()
    for buf in (src, land, tail, dst):
        buf.mr.close()
    for m in (imr, ro, gone):
        m.unimport()
    ipd.unimport()
    sock.sendall(json.dumps(out).encode())
""")


class CrossProcessImportTest(base.DataTestCase):
    """The importer is a child started by fork + exec (subprocess), so it joins the host registry
    as a process of its own; the cmd_fd reaches it only over the socket pair."""

    def test_import_in_a_child_that_received_the_fd(self):
        buf = Buffer(self.pd, 8192)
        ro = Buffer(self.pd, 4096, access=e.IBV_ACCESS_REMOTE_READ, fill=0x3c)
        gone = Buffer(self.pd, 4096)
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
        pattern = payload(4096, 9)
        req = dict(pd=self.pd.handle, mr=buf.mr.handle, qpn=me.qpn, addr=buf.addr, offset=1000,
                   data=data.hex(), pattern=pattern.hex(), ro=ro.mr.handle, ro_addr=ro.addr,
                   gone=gone.mr.handle, gone_addr=gone.addr)
        socket.send_fds(parent_sock, [json.dumps(req).encode()], [os.dup(self.ctx.cmd_fd)])
        child = json.loads(parent_sock.recv(65536))
        gone.mr.close()  # imported by the child already
        me.connect(child['qpn'])
        # The exporter writes into the importer's memory registered on the shared PD, and sends
        # to the importer's QP, whose receive names the imported lkey: its own memory again.
        mine = Buffer(self.pd, 4096)
        sent = payload(4096, 8)
        mine.write(sent)
        me.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [mine.sge()], wr_id=5,
                                  rdma=(child['rkey'], child['addr'])))
        self.assertWC(me.poll()[0], wr_id=5, status=OK)
        me.post_send(base.send_wr(e.IBV_WR_SEND, [mine.sge(500, 100)], wr_id=6))
        self.assertWC(me.poll()[0], wr_id=6, status=OK)
        parent_sock.sendall(b'go')
        reply = parent_sock.recv(65536)
        self.assertTrue(reply, f'the importer ended early: {proc.communicate(timeout=10)[1]!r}')
        out = json.loads(reply)

        self.assertEqual((out['handle'], out['lkey'], out['rkey'], out['length']),
                         (buf.mr.handle, buf.lkey, buf.rkey, 8192))
        self.assertEqual(bytes.fromhex(out['landed']), sent)
        self.assertEqual(out['recv_from_exporter'], [OK, 7, 100])
        self.assertEqual(buf.read(7900, 100), sent[500:600])
        self.assertEqual(out['write'], OK)
        self.assertEqual(buf.read(1000, 5000), data)
        self.assertEqual(buf.read(0, 1000), bytes(1000))
        self.assertEqual(buf.read(6000, 500), bytes(500))
        self.assertEqual(out['local_sge'], OK)
        self.assertEqual(bytes.fromhex(out['gathered']), data[100:3100])
        self.assertTrue(out['gather_bounds'])
        # Written through the imported lkey, byte for byte, nothing beside.
        self.assertEqual(out['read'], [OK, 1000])
        self.assertEqual(buf.read(6500, 1000), pattern[16:1016])
        self.assertEqual(buf.read(7500, 100), bytes(100))
        self.assertEqual((out['fetch_add'], out['cmp_swp']), (OK, OK))
        self.assertEqual(buf.read(7600, 8), (0x1122334455667788).to_bytes(8, 'little'))
        self.assertEqual(buf.read(7608, 8), (0x1122334455667788 + 5).to_bytes(8, 'little'))
        self.assertEqual(out['word'], 0xdeadbeef)
        self.assertEqual(buf.read(7616, 84), bytes(84))
        self.assertEqual((out['send'], out['recv']), (OK, [OK, 6, 300]))
        self.assertEqual(buf.read(7700, 200), pattern[:200])
        self.assertEqual(bytes.fromhex(out['tail']), pattern[200:300])
        self.assertTrue(out['tail_bounds'])
        self.assertEqual((out['srq_send'], out['srq_recv']), (OK, [OK, 8, 64]))
        self.assertEqual(buf.read(8100, 64), pattern[1000:1064])
        self.assertEqual(buf.read(8000, 100) + buf.read(8164), bytes(128))
        self.assertTrue(buf.guards_intact())
        prot = e.IBV_WC_LOC_PROT_ERR
        self.assertEqual(out['bad'], {'no_local_write': [prot, True], 'read_beyond': [prot, True],
                                      'atomic_beyond': [prot, True], 'deregistered': [prot, True],
                                      'write_beyond': [prot, True],
                                      'recv_no_local_write': [prot, e.IBV_WC_REM_OP_ERR]})
        self.assertEqual(ro.read(), bytes([0x3c]) * 4096)
        self.assertTrue(ro.guards_intact())
        _, err = proc.communicate(timeout=20)
        self.assertEqual(proc.returncode, 0, err)
        err = err.decode()
        self.assertNotIn('not freed', err)
        imported = (r'qp 0x[0-9a-f]+: local SGE \[0x[0-9a-f]+, \+\d+\) through lkey 0x[0-9a-f]+ '
                    r'\(imported, ibv_import_mr\) ')
        self.assertRegex(err, imported + r'written: the MR does not grant IBV_ACCESS_LOCAL_WRITE: '
                                         r'IBV_WC_LOC_PROT_ERR')
        self.assertRegex(err, imported + r'written: \[0x[0-9a-f]+, \+64\) leaves the MR')
        self.assertRegex(err, imported + r'written: \[0x[0-9a-f]+, \+8\) leaves the MR')
        self.assertRegex(err, imported + r'read: \[0x[0-9a-f]+, \+64\) leaves the MR')
        self.assertRegex(err, imported + r'written: no such key: the exporter deregistered the MR')
        self.assertEqual(err.count('does not grant IBV_ACCESS_LOCAL_WRITE'), 2, err)  # READ and receive

        # The exporter's objects are untouched by the import and the unimport.
        dst = Buffer(self.pd, 64)
        a, b = base.connected_pair(self.ctx, self.pd, RC)
        a.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [buf.sge(1000, 64)], wr_id=9,
                                 rdma=(dst.rkey, dst.addr)))
        self.assertWC(a.poll()[0], wr_id=9, status=OK)
        self.assertEqual(dst.read(), data[:64])


if __name__ == '__main__':
    unittest.main()
