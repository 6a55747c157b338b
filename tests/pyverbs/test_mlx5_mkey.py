"""Indirect mkeys (mlx5dv_create_mkey) configured by UMR work requests (mlx5dv_wr_mr_list,
mlx5dv_wr_mr_interleaved) through pyverbs.providers.mlx5: the mkey's lkey and rkey address the
layout zero-based, and every access walks it byte for byte -- RDMA WRITE and READ into and out of
the mkey, SEND from it, a receive into it -- from a QP in this process and from one in another
process (agent.py). Each check compares every byte of the underlying buffers (guards included)
with a model of the layout. Then the errors (beyond the layout's end, an atomic across pieces)
and each refusal, with its log line.
"""
import errno
import random
import textwrap
import unittest

import base
import dc
import pyverbs.enums as e
import pyverbs.providers.mlx5.mlx5_enums as dve
from agent import Agent
from base import Buffer
from pyverbs.providers.mlx5.mlx5dv import Mlx5QP
from pyverbs.providers.mlx5.mlx5dv_mkey import Mlx5Mkey, Mlx5MrInterleaved
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QPCap
from pyverbs.wr import SGE

tearDownModule = base.tear_down_module

OK = e.IBV_WC_SUCCESS
UMR = dve.MLX5DV_WC_UMR  # IBV_WC_DRIVER1
MR_OPS = dve.MLX5DV_QP_EX_WITH_MR_LIST | dve.MLX5DV_QP_EX_WITH_MR_INTERLEAVED
QP_OPS = (e.IBV_QP_EX_WITH_SEND | e.IBV_QP_EX_WITH_RDMA_WRITE | e.IBV_QP_EX_WITH_RDMA_READ |
          e.IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD)
LOCAL_ALL = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_READ | e.IBV_ACCESS_REMOTE_WRITE
SIZE = 256  # each underlying buffer


def payload(n, seed):
    return random.Random(seed).randbytes(n)


class Layout:
    """The model: which (buffer, offset) each byte of the mkey's zero-based range is."""

    def __init__(self, bufs, entries, repeat=1):
        # entries: (buffer index, offset, bytes_count, bytes_skip); mlx5dv_wr_post(3): repetition
        # r of an entry starts bytes_count + bytes_skip after repetition r - 1.
        self.bufs, self.entries, self.repeat = bufs, entries, repeat
        self.where = [(b, off + r * (count + skip) + i)
                      for r in range(repeat) for b, off, count, skip in entries for i in range(count)]

    def __len__(self):
        return len(self.where)

    def sges(self):
        return [SGE(self.bufs[b].addr + off, count, self.bufs[b].lkey) for b, off, count, _ in self.entries]

    def interleaved(self):
        return [Mlx5MrInterleaved(self.bufs[b].addr + off, count, skip, self.bufs[b].lkey)
                for b, off, count, skip in self.entries]

    def read(self, offset, length):
        return bytes(self.bufs[b].read(o, 1)[0] for b, o in self.where[offset:offset + length])

    def expect_written(self, before, offset, data):
        """`before` (the buffers' snapshots) with `data` written at layout `offset`."""
        after = [bytearray(s) for s in before]
        for (b, o), byte in zip(self.where[offset:offset + len(data)], data):
            after[b][Buffer.GUARD + o] = byte
        return [bytes(a) for a in after]


def refusal_child(send_ops_flag, max_entries, post,
                  mkey_flags='MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT'):
    """The code of a child process for base.refused_once: it opens softverbs0, makes a PD, a CQ,
    an MR of 64 bytes, an RC QP with the mlx5 send op `send_ops_flag` (a name in mlx5_enums) and
    an mkey of `max_entries` (`mkey_flags`: names in mlx5_enums joined by |), starts an inline
    WR, runs `post` (code using qp, mkey, mr) and prints the refusal of wr_complete. It does not
    import base: base clears SOFTVERBS_LOG (test_refusals_log does the same)."""
    setup = textwrap.dedent('''
        import pyverbs.enums as e
        import pyverbs.providers.mlx5.mlx5_enums as dve
        from pyverbs.cq import CQ
        from pyverbs.device import Context
        from pyverbs.mr import MR
        from pyverbs.pd import PD
        from pyverbs.providers.mlx5.mlx5dv import Mlx5DVQPInitAttr, Mlx5QP
        from pyverbs.providers.mlx5.mlx5dv_mkey import (Mlx5Mkey, Mlx5MkeyConfAttr, Mlx5SigBlockAttr,
                                                        Mlx5SigBlockDomain, Mlx5SigCrc)
        from pyverbs.qp import QPCap, QPInitAttrEx
        from pyverbs.wr import SGE
        ctx = Context(name='softverbs0')
        pd = PD(ctx)
        cq = CQ(ctx, 16, None, None, 0)
        mr = MR(pd, 64, e.IBV_ACCESS_LOCAL_WRITE)
        attr = QPInitAttrEx(qp_type=e.IBV_QPT_RC, pd=pd, scq=cq, rcq=cq, cap=QPCap(),
                            comp_mask=e.IBV_QP_INIT_ATTR_PD | e.IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
                            send_ops_flags=e.IBV_QP_EX_WITH_SEND)
        qp = Mlx5QP(ctx, attr, Mlx5DVQPInitAttr(comp_mask=dve.MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS,
                                                send_ops_flags=dve.{send_ops}))
        mkey = Mlx5Mkey(pd, {mkey_flags}, {max_entries})
        qp.wr_start()
        qp.wr_flags = e.IBV_SEND_INLINE
    ''').format(send_ops=send_ops_flag, max_entries=max_entries,
                mkey_flags=' | '.join('dve.' + f.strip() for f in mkey_flags.split('|')))
    finish = textwrap.dedent('''
        try:
            qp.wr_complete()
        except Exception as ex:
            print('refused', ex)
    ''')
    return setup + textwrap.dedent(post).strip() + '\n' + finish


class MkeyTestCase(base.DataTestCase):

    def setUp(self):
        super().setUp()
        self.bufs = [Buffer(self.pd, SIZE, fill=0x11 * (i + 1)) for i in range(3)]
        for i, b in enumerate(self.bufs):
            b.write(payload(SIZE, 100 + i))
        self.qp = self.mlx5_qp()

    def mlx5_qp(self, mr_ops=MR_OPS):
        cap = QPCap(max_send_wr=64, max_recv_wr=64, max_send_sge=4, max_recv_sge=4)
        return Mlx5QP(self.ctx, dc.qp_attr(e.IBV_QPT_RC, self.pd, self.cq, send_ops=QP_OPS, cap=cap),
                      dc.dv_attr(send_ops_flags=mr_ops))

    def connected_peer(self, qp=None):
        """A peer RC QP in this process, connected both ways with `qp` (the test's QP by default)."""
        qp = qp or self.qp
        peer = base.Peer(self.ctx, self.pd, e.IBV_QPT_RC).connect(qp.qp_num)
        base.connect_qp(self.ctx, qp, peer.qpn)
        return peer

    def mkey(self, max_entries=4):
        return Mlx5Mkey(self.pd, dve.MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT, max_entries)

    def umr(self, mkey, layout, access=LOCAL_ALL, interleaved=False, qp=None,
            flags=e.IBV_SEND_INLINE | e.IBV_SEND_SIGNALED):
        """Posts one UMR configuring `mkey` as `layout` and returns its completion."""
        qp = qp or self.qp
        qp.wr_start()
        qp.wr_id, qp.wr_flags = 0x77, flags
        if interleaved:
            qp.wr_mr_interleaved(mkey, access, layout.repeat, layout.interleaved())
        else:
            qp.wr_mr_list(mkey, access, layout.sges())
        qp.wr_complete()
        [wc] = base.poll(self.cq)
        return wc

    def snapshot(self):
        return [b.snapshot() for b in self.bufs]

    def list_layout(self):
        # 40 bytes of buffer 0, 24 of buffer 1, 36 of buffer 2, 10 more of buffer 0: 110 bytes.
        return Layout(self.bufs, [(0, 16, 40, 0), (1, 0, 24, 0), (2, 100, 36, 0), (0, 200, 10, 0)])

    def interleaved_layout(self):
        # 8 bytes of buffer 0 every 24, 4 of buffer 1 every 16, 5 times: 60 bytes.
        return Layout(self.bufs, [(0, 0, 8, 16), (1, 4, 4, 12)], repeat=5)

    def configured(self, interleaved):
        mkey = self.mkey()
        layout = self.interleaved_layout() if interleaved else self.list_layout()
        self.assertWC(self.umr(mkey, layout, interleaved=interleaved), status=OK, opcode=UMR, wr_id=0x77)
        return mkey, layout


class LocalTest(MkeyTestCase):
    """The mkey's owner and its peer QP in this process."""

    def peer(self):
        return self.peer_of(self.qp)

    def peer_of(self, qp):
        return self.connected_peer(qp), Buffer(self.pd, 512)

    def check_all_ops(self, interleaved):
        peer, pbuf = self.peer()  # a UMR is posted in RTS, like any work request
        mkey, layout = self.configured(interleaved)
        n = len(layout)

        with self.subTest('remote RDMA WRITE into the mkey'):
            data, before = payload(n - 7, 1), self.snapshot()
            pbuf.write(data)
            peer.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [pbuf.sge(0, len(data))], rdma=(mkey.rkey, 5)))
            self.assertWC(peer.poll()[0], status=OK)
            self.assertEqual(self.snapshot(), layout.expect_written(before, 5, data))

        with self.subTest('remote RDMA READ from the mkey'):
            peer.post_send(base.send_wr(e.IBV_WR_RDMA_READ, [pbuf.sge(0, n - 3)], rdma=(mkey.rkey, 3)))
            self.assertWC(peer.poll()[0], status=OK)
            self.assertEqual(pbuf.read(0, n - 3), layout.read(3, n - 3))

        with self.subTest('SEND from the mkey (local SGE through its lkey)'):
            peer.post_recv(pbuf.sge(0, 512), wr_id=1)
            self.qp.post_send(base.send_wr(e.IBV_WR_SEND, [SGE(2, n - 2, mkey.lkey)]))
            self.assertWC(base.poll(self.cq)[0], status=OK, opcode=e.IBV_WC_SEND)
            self.assertWC(peer.poll()[0], status=OK, byte_len=n - 2)
            self.assertEqual(pbuf.read(0, n - 2), layout.read(2, n - 2))

        with self.subTest('receive into the mkey'):
            data, before = payload(n - 1, 2), self.snapshot()
            pbuf.write(data)
            self.qp.post_recv(base.recv_wr([SGE(1, n - 1, mkey.lkey)], wr_id=2))
            peer.post_send(base.send_wr(e.IBV_WR_SEND, [pbuf.sge(0, len(data))]))
            self.assertWC(peer.poll()[0], status=OK)
            self.assertWC(base.poll(self.cq)[0], status=OK, opcode=e.IBV_WC_RECV, byte_len=n - 1)
            self.assertEqual(self.snapshot(), layout.expect_written(before, 1, data))

        with self.subTest('RDMA WRITE from and RDMA READ into the mkey (local SGEs)'):
            self.qp.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [SGE(0, n, mkey.lkey)],
                                           rdma=(pbuf.rkey, pbuf.addr)))
            self.assertWC(base.poll(self.cq)[0], status=OK)
            self.assertEqual(pbuf.read(0, n), layout.read(0, n))
            data, before = payload(n, 3), self.snapshot()
            pbuf.write(data)
            self.qp.post_send(base.send_wr(e.IBV_WR_RDMA_READ, [SGE(0, n, mkey.lkey)],
                                           rdma=(pbuf.rkey, pbuf.addr)))
            self.assertWC(base.poll(self.cq)[0], status=OK)
            self.assertEqual(self.snapshot(), layout.expect_written(before, 0, data))
        self.assertTrue(all(b.guards_intact() for b in self.bufs + [pbuf]))

    def test_mr_list_every_operation(self):
        self.check_all_ops(interleaved=False)

    def test_mr_interleaved_every_operation(self):
        self.check_all_ops(interleaved=True)

    def test_reconfiguring_changes_the_layout(self):
        peer, pbuf = self.peer()
        mkey, first = self.configured(interleaved=False)
        second = self.interleaved_layout()
        self.assertWC(self.umr(mkey, second, interleaved=True), status=OK, opcode=UMR)
        peer.post_send(base.send_wr(e.IBV_WR_RDMA_READ, [pbuf.sge(0, len(second))], rdma=(mkey.rkey, 0)))
        self.assertWC(peer.poll()[0], status=OK)
        self.assertEqual(pbuf.read(0, len(second)), second.read(0, len(second)))
        self.assertNotEqual(second.read(0, len(second)), first.read(0, len(second)))

    def test_local_inv_invalidates_until_the_next_umr(self):
        peer, pbuf = self.peer()
        mkey, layout = self.configured(interleaved=False)
        self.qp.post_send(base.send_wr(e.IBV_WR_LOCAL_INV, wr_id=0x55, imm_data=mkey.rkey))
        self.assertWC(base.poll(self.cq)[0], wr_id=0x55, status=OK, opcode=e.IBV_WC_LOCAL_INV)
        peer.post_send(base.send_wr(e.IBV_WR_RDMA_READ, [pbuf.sge(0, 8)], rdma=(mkey.rkey, 0)))
        self.assertWC(peer.poll()[0], status=e.IBV_WC_REM_ACCESS_ERR)
        # A new UMR configures it again (posted on a fresh QP: the access error moved the first
        # one, the target, to ERR).
        qp = self.mlx5_qp()
        peer, pbuf = self.peer_of(qp)
        self.assertWC(self.umr(mkey, layout, qp=qp), status=OK, opcode=UMR)
        peer.post_send(base.send_wr(e.IBV_WR_RDMA_READ, [pbuf.sge(0, 8)], rdma=(mkey.rkey, 0)))
        self.assertWC(peer.poll()[0], status=OK)
        self.assertEqual(pbuf.read(0, 8), layout.read(0, 8))

    def test_remote_access_beyond_the_layout_is_an_access_error(self):
        peer, pbuf = self.peer()
        mkey, layout = self.configured(interleaved=True)
        before = self.snapshot()
        peer.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [pbuf.sge(0, 8)], rdma=(mkey.rkey, len(layout) - 7)))
        self.assertWC(peer.poll()[0], status=e.IBV_WC_REM_ACCESS_ERR)
        self.assertEqual(self.snapshot(), before)

    def test_local_sge_beyond_the_layout_is_a_protection_error(self):
        peer, pbuf = self.peer()
        mkey, layout = self.configured(interleaved=False)
        self.qp.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [SGE(1, len(layout), mkey.lkey)],
                                       rdma=(pbuf.rkey, pbuf.addr)))
        self.assertWC(base.poll(self.cq)[0], status=e.IBV_WC_LOC_PROT_ERR)

    def test_remote_access_needs_the_mkeys_access_flags(self):
        peer, pbuf = self.peer()
        mkey = self.mkey()
        layout = self.list_layout()
        self.assertWC(self.umr(mkey, layout, access=e.IBV_ACCESS_LOCAL_WRITE), status=OK)
        peer.post_send(base.send_wr(e.IBV_WR_RDMA_READ, [pbuf.sge(0, 8)], rdma=(mkey.rkey, 0)))
        self.assertWC(peer.poll()[0], status=e.IBV_WC_REM_ACCESS_ERR)

    def test_atomics_need_one_aligned_word_of_one_piece(self):
        peer, pbuf = self.peer()
        mkey = self.mkey()
        # 12 bytes of buffer 0 at offset 8, then 12 of buffer 1: layout [8, 16) spans both.
        layout = Layout(self.bufs, [(0, 8, 12, 0), (1, 0, 12, 0)])
        self.assertWC(self.umr(mkey, layout, access=LOCAL_ALL | e.IBV_ACCESS_REMOTE_ATOMIC), status=OK)
        self.bufs[0].set_u64(41, 8)
        peer.post_send(base.send_wr(e.IBV_WR_ATOMIC_FETCH_AND_ADD, [pbuf.sge(0, 8)],
                                    atomic=(mkey.rkey, 0, 1, 0)))
        self.assertWC(peer.poll()[0], status=OK)
        self.assertEqual((pbuf.u64(0), self.bufs[0].u64(8)), (41, 42))
        before = self.snapshot()
        peer.post_send(base.send_wr(e.IBV_WR_ATOMIC_FETCH_AND_ADD, [pbuf.sge(0, 8)],
                                    atomic=(mkey.rkey, 8, 1, 0)))
        self.assertWC(peer.poll()[0], status=e.IBV_WC_REM_INV_REQ_ERR)
        self.assertEqual(self.snapshot(), before)

    def test_unconfigured_and_destroyed_mkeys_are_invalid_keys(self):
        peer, pbuf = self.peer()
        destroyed, _ = self.configured(interleaved=False)
        key = destroyed.lkey
        destroyed.close()
        self.qp.post_send(base.send_wr(e.IBV_WR_SEND, [SGE(0, 8, key)]))
        self.assertWC(base.poll(self.cq)[0], status=e.IBV_WC_LOC_PROT_ERR)
        # A fresh target QP (the first one is in ERR now).
        self.qp2 = self.mlx5_qp()
        peer2, pbuf2 = self.peer_of(self.qp2)
        mkey = self.mkey()
        peer2.post_send(base.send_wr(e.IBV_WR_RDMA_READ, [pbuf2.sge(0, 8)], rdma=(mkey.rkey, 0)))
        self.assertWC(peer2.poll()[0], status=e.IBV_WC_REM_ACCESS_ERR)


class OtherProcessTest(MkeyTestCase):
    """The mkey's owner here, the peer QP in another process (agent.py)."""

    def check_all_ops(self, interleaved):
        child = Agent()
        self.addCleanup(child.close)
        info = child.call('qp', qpt=e.IBV_QPT_RC, size=512)
        base.connect_qp(self.ctx, self.qp, info['qpn'])
        child.call('connect', id=info['id'], remote_qpn=self.qp.qp_num)
        mkey, layout = self.configured(interleaved)
        cid, n = info['id'], len(layout)

        def child_ok(**expected):
            [wc] = child.call('poll', id=cid, n=1)
            for k, v in dict(status=OK, **expected).items():
                self.assertEqual(wc[k], v, (k, wc))

        with self.subTest('the other process WRITEs into the mkey'):
            data, before = payload(n - 4, 11), self.snapshot()
            child.call('write', id=cid, offset=0, data=data.hex())
            child.call('post_send', id=cid, opcode=e.IBV_WR_RDMA_WRITE, wr_id=1, offset=0, length=len(data),
                       rkey=mkey.rkey, raddr=4)
            child_ok()
            self.assertEqual(self.snapshot(), layout.expect_written(before, 4, data))

        with self.subTest('the other process READs from the mkey'):
            child.call('post_send', id=cid, opcode=e.IBV_WR_RDMA_READ, wr_id=2, offset=0, length=n - 6,
                       rkey=mkey.rkey, raddr=6)
            child_ok()
            self.assertEqual(bytes.fromhex(child.call('read', id=cid, offset=0, length=n - 6)), layout.read(6, n - 6))

        with self.subTest('the other process SENDs into a receive through the mkey'):
            data, before = payload(n, 12), self.snapshot()
            child.call('write', id=cid, offset=0, data=data.hex())
            self.qp.post_recv(base.recv_wr([SGE(0, n, mkey.lkey)], wr_id=3))
            child.call('post_send', id=cid, opcode=e.IBV_WR_SEND, wr_id=3, offset=0, length=n)
            child_ok()
            self.assertWC(base.poll(self.cq)[0], status=OK, opcode=e.IBV_WC_RECV, byte_len=n)
            self.assertEqual(self.snapshot(), layout.expect_written(before, 0, data))

        with self.subTest('SEND from the mkey to the other process'):
            child.call('post_recv', id=cid, wr_id=4, offset=0, length=512)
            self.qp.post_send(base.send_wr(e.IBV_WR_SEND, [SGE(1, n - 1, mkey.lkey)]))
            self.assertWC(base.poll(self.cq)[0], status=OK)
            child_ok(byte_len=n - 1)
            self.assertEqual(bytes.fromhex(child.call('read', id=cid, offset=0, length=n - 1)), layout.read(1, n - 1))

        with self.subTest('RDMA WRITE from / READ into the mkey, the other process as target'):
            self.qp.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [SGE(0, n, mkey.lkey)],
                                           rdma=(info['rkey'], info['addr'])))
            self.assertWC(base.poll(self.cq)[0], status=OK)
            self.assertEqual(bytes.fromhex(child.call('read', id=cid, offset=0, length=n)), layout.read(0, n))
            data, before = payload(n, 13), self.snapshot()
            child.call('write', id=cid, offset=0, data=data.hex())
            self.qp.post_send(base.send_wr(e.IBV_WR_RDMA_READ, [SGE(0, n, mkey.lkey)],
                                           rdma=(info['rkey'], info['addr'])))
            self.assertWC(base.poll(self.cq)[0], status=OK)
            self.assertEqual(self.snapshot(), layout.expect_written(before, 0, data))

        with self.subTest('the other process WRITEs beyond the layout'):
            before = self.snapshot()
            child.call('post_send', id=cid, opcode=e.IBV_WR_RDMA_WRITE, wr_id=5, offset=0, length=2,
                       rkey=mkey.rkey, raddr=n - 1)
            [wc] = child.call('poll', id=cid, n=1)
            self.assertEqual(wc['status'], e.IBV_WC_REM_ACCESS_ERR)
            self.assertEqual(self.snapshot(), before)
        self.assertTrue(all(b.guards_intact() for b in self.bufs))

    def test_mr_list_across_processes(self):
        self.check_all_ops(interleaved=False)

    def test_more_pieces_than_one_system_call_takes(self):
        # 1 byte of each of two buffers, alternately, 1024 times: 2048 pieces (IOV_MAX is 1024).
        bufs = [Buffer(self.pd, 1024), Buffer(self.pd, 1024)]
        layout = Layout(bufs, [(0, 0, 1, 0), (1, 0, 1, 0)], repeat=1024)
        child = Agent()
        self.addCleanup(child.close)
        info = child.call('qp', qpt=e.IBV_QPT_RC, size=2048)
        base.connect_qp(self.ctx, self.qp, info['qpn'])
        child.call('connect', id=info['id'], remote_qpn=self.qp.qp_num)
        mkey = self.mkey(max_entries=3)
        self.assertWC(self.umr(mkey, layout, interleaved=True), status=OK, opcode=UMR)
        data = payload(2048, 21)
        before = [b.snapshot() for b in bufs]
        child.call('write', id=info['id'], offset=0, data=data.hex())
        child.call('post_send', id=info['id'], opcode=e.IBV_WR_RDMA_WRITE, wr_id=1, offset=0, length=2048,
                   rkey=mkey.rkey, raddr=0)
        [wc] = child.call('poll', id=info['id'], n=1)
        self.assertEqual(wc['status'], OK, wc)
        self.assertEqual([b.snapshot() for b in bufs], layout.expect_written(before, 0, data))
        self.assertEqual((bufs[0].read(0, 4), bufs[1].read(0, 4)), (data[0:8:2], data[1:8:2]))

    def test_mr_interleaved_across_processes(self):
        self.check_all_ops(interleaved=True)


class RefusalTest(MkeyTestCase):

    def setUp(self):
        super().setUp()
        self.peer = self.connected_peer()

    def refused_umr(self, code, mkey, layout, **kw):
        with self.assertRaises(PyverbsRDMAError) as cm:
            self.umr(mkey, layout, **kw)
        self.assertEqual(abs(cm.exception.error_code), code, str(cm.exception))

    def test_create_mkey(self):
        self.assertRDMAError(errno.EINVAL, Mlx5Mkey, self.pd, 0, 4)  # not INDIRECT
        self.assertRDMAError(errno.EOPNOTSUPP, Mlx5Mkey, self.pd,
                             dve.MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT | dve.MLX5DV_MKEY_INIT_ATTR_FLAGS_CRYPTO, 4)
        self.assertRDMAError(errno.EINVAL, Mlx5Mkey, self.pd, dve.MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT, 0)
        self.assertEqual(self.mkey(max_entries=5).max_entries, 8)  # ">= the value requested"

    def test_builders(self):
        mkey = self.mkey(max_entries=4)
        five = Layout(self.bufs, [(0, 0, 4, 0), (0, 8, 4, 0), (1, 0, 4, 0), (1, 8, 4, 0), (2, 0, 4, 0)])
        self.refused_umr(errno.ENOMEM, mkey, five)  # more SGEs than max_entries (mlx5: ENOMEM)
        four = Layout(self.bufs, five.entries[:4], repeat=2)
        # "the mkey should be created with one more entry than the required num_interleaved"
        self.refused_umr(errno.ENOMEM, mkey, four, interleaved=True)
        ok = Layout(self.bufs, five.entries[:3])
        self.refused_umr(errno.EINVAL, mkey, ok, access=e.IBV_ACCESS_REMOTE_WRITE)  # no LOCAL_WRITE
        self.refused_umr(errno.EINVAL, mkey, ok, access=e.IBV_ACCESS_MW_BIND | e.IBV_ACCESS_LOCAL_WRITE)
        self.refused_umr(errno.EOPNOTSUPP, mkey, ok, flags=e.IBV_SEND_SIGNALED)  # needs IBV_SEND_INLINE (as mlx5)
        outside = Layout(self.bufs, [(0, SIZE - 4, 8, 0)])
        self.refused_umr(errno.EINVAL, mkey, outside)  # beyond its MR
        # A QP created with MR_INTERLEAVED only has no mlx5dv_wr_mr_list.
        qp = self.mlx5_qp(mr_ops=dve.MLX5DV_QP_EX_WITH_MR_INTERLEAVED)
        base.connect_qp(self.ctx, qp, self.peer.qpn)
        self.refused_umr(errno.EINVAL, mkey, ok, qp=qp)
        self.assertWC(self.umr(mkey, ok), status=OK, opcode=UMR)  # after all that, a valid one works

    def test_create_qp_send_ops_flags(self):
        self.assertRDMAError(errno.EINVAL, Mlx5QP, self.ctx,
                             dc.qp_attr(e.IBV_QPT_DRIVER, self.pd, self.cq, send_ops=dc.DCI_OPS),
                             dc.dv_attr(dc_type=dve.MLX5DV_DCTYPE_DCI, send_ops_flags=dve.MLX5DV_QP_EX_WITH_MR_LIST))
        self.assertRDMAError(errno.EOPNOTSUPP, self.mlx5_qp, mr_ops=dve.MLX5DV_QP_EX_WITH_RAW_WQE)
        self.assertRDMAError(errno.EOPNOTSUPP, self.mlx5_qp, mr_ops=dve.MLX5DV_QP_EX_WITH_MEMCPY)

    def test_refusal_log_line(self):
        code = refusal_child('MLX5DV_QP_EX_WITH_MR_LIST', 1, '''
            qp.wr_mr_list(mkey, e.IBV_ACCESS_LOCAL_WRITE, [SGE(mr.buf, 8, mr.lkey)] * 5)
        ''')
        line = base.refused_once(self, code, 'mlx5dv_wr_mr_list')
        self.assertIn('ibv_wr_complete', line)
        self.assertIn('max_entries 4', line)


if __name__ == '__main__':
    unittest.main()
