"""Memory windows (ibv_alloc_mw(3), ibv_bind_mw(3), IBV_WR_BIND_MW / LOCAL_INV / SEND_WITH_INV of
ibv_post_send(3), and their ibv_wr_* builders): a window's R_Key grants remote access to a range
of an MR -- from another process, with no help from the owner -- until it is unbound, invalidated
locally or by the peer's SEND_WITH_INV, or deallocated. Binding rules (IBA C10-72..75) and the
refusals: IBV_WC_MW_BIND_ERR, EBUSY from ibv_dereg_mr, EINVAL where the verb says so."""
import errno
import unittest

import base
import pyverbs.enums as e
from agent import Agent
from base import Buffer
from pyverbs.mr import MW, MWBind, MWBindInfo
from pyverbs.qp import QPCap, QPEx, QPInitAttrEx
from pyverbs.wr import SendWR
from shared_memory import SharedBuffer

tearDownModule = base.tear_down_module

RC, UC = e.IBV_QPT_RC, e.IBV_QPT_UC
OK = e.IBV_WC_SUCCESS
RW, RR, RA = e.IBV_ACCESS_REMOTE_WRITE, e.IBV_ACCESS_REMOTE_READ, e.IBV_ACCESS_REMOTE_ATOMIC
BINDABLE = base.ACCESS_ALL | e.IBV_ACCESS_MW_BIND


def inc_rkey(rkey):
    """ibv_inc_rkey(3): the next value of the key's low 8 bits."""
    return (rkey & ~0xff) | ((rkey + 1) & 0xff)


class WindowTestCase(base.DataTestCase):

    def setUp(self):
        super().setUp()
        self.buf = Buffer(self.pd, 4096, BINDABLE)
        self.src = Buffer(self.pd, 64)

    def window(self, mw_type):
        mw = MW(self.pd, mw_type)
        self.addCleanup(mw.close)  # before the MR's cleanup: windows first (EBUSY otherwise)
        return mw

    def bind_type1(self, peer, mw, offset, length, access, wr_id=1):
        info = MWBindInfo(self.buf.mr, self.buf.addr + offset, length, access)
        peer.qp.bind_mw(mw, MWBind(info, e.IBV_SEND_SIGNALED))
        return peer.poll()[0]

    def bind_type2(self, peer, mw, offset, length, access, wr_id=2):
        """Posts IBV_WR_BIND_MW (pyverbs binds with ibv_inc_rkey(mw.rkey)); returns (wc, rkey)."""
        wr = SendWR(opcode=e.IBV_WR_BIND_MW, wr_id=wr_id, send_flags=e.IBV_SEND_SIGNALED)
        wr.set_bind_wr(mw, MWBindInfo(self.buf.mr, self.buf.addr + offset, length, access))
        peer.post_send(wr)
        return peer.poll()[0], inc_rkey(mw.rkey)

    def assertState(self, peer, expected):
        got = peer.qp.query(e.IBV_QP_STATE)[0].qp_state
        self.assertEqual(base.STATE_NAMES[got], base.STATE_NAMES[expected])

    def local_inv(self, peer, rkey, wr_id=3):
        peer.post_send(SendWR(opcode=e.IBV_WR_LOCAL_INV, wr_id=wr_id, imm_data=rkey, num_sge=0,
                              send_flags=e.IBV_SEND_SIGNALED))
        return peer.poll()[0]


class WindowsTest(WindowTestCase):
    """Both ends in this process (two QPs of one PD)."""

    def test_alloc_both_types_and_refuse_others(self):
        for t in (e.IBV_MW_TYPE_1, e.IBV_MW_TYPE_2):
            mw = self.window(t)
            self.assertEqual(mw.type, t)
            self.assertNotEqual(mw.rkey, 0)
        self.assertRDMAError(errno.EINVAL, MW, self.pd, 3)

    def test_type1_window_grants_its_range_and_access_only(self):
        a, b = base.connected_pair(self.ctx, self.pd, RC)
        mw = self.window(e.IBV_MW_TYPE_1)
        old = mw.rkey
        self.assertWC(self.bind_type1(a, mw, 256, 512, RW | RR), status=OK, opcode=e.IBV_WC_BIND_MW)
        self.assertEqual(mw.rkey, inc_rkey(old))  # ibv_bind_mw(3): the new R_Key is in mw->rkey
        self.src.write(b'window!!')
        b.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [self.src.sge(0, 8)], rdma=(mw.rkey, self.buf.addr + 300)))
        self.assertWC(b.poll()[0], status=OK)
        self.assertEqual(self.buf.read(300, 8), b'window!!')
        b.post_send(base.send_wr(e.IBV_WR_RDMA_READ, [self.src.sge(8, 8)], rdma=(mw.rkey, self.buf.addr + 300)))
        self.assertWC(b.poll()[0], status=OK)
        self.assertEqual(self.src.read(8, 8), b'window!!')
        # The byte before the window is not in it.
        b.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [self.src.sge(0, 8)], rdma=(mw.rkey, self.buf.addr + 250)))
        self.assertWC(b.poll()[0], status=e.IBV_WC_REM_ACCESS_ERR)
        self.assertEqual(self.buf.read(250, 6), bytes(6))

    def test_old_key_atomic_and_window_end_are_refused(self):
        for what in ('old key', 'atomic not granted', 'past the end'):
            with self.subTest(what):
                a, b = base.connected_pair(self.ctx, self.pd, RC)
                mw = self.window(e.IBV_MW_TYPE_1)
                old = mw.rkey
                self.assertWC(self.bind_type1(a, mw, 0, 64, RW | RR), status=OK)
                if what == 'atomic not granted':
                    b.post_send(base.send_wr(e.IBV_WR_ATOMIC_FETCH_AND_ADD, [self.src.sge(0, 8)],
                                             atomic=(mw.rkey, self.buf.addr, 1, 0)))
                else:
                    rkey, off = (old, 0) if what == 'old key' else (mw.rkey, 60)
                    b.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [self.src.sge(0, 8)],
                                             rdma=(rkey, self.buf.addr + off)))
                self.assertWC(b.poll()[0], status=e.IBV_WC_REM_ACCESS_ERR)
                self.assertState(b, e.IBV_QPS_ERR)
                self.assertTrue(self.buf.guards_intact())

    def test_zero_based_window_takes_offsets(self):
        a, b = base.connected_pair(self.ctx, self.pd, RC)
        mw = self.window(e.IBV_MW_TYPE_1)
        self.assertWC(self.bind_type1(a, mw, 1024, 64, RW | e.IBV_ACCESS_ZERO_BASED), status=OK)
        self.src.write(b'offset16')
        b.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [self.src.sge(0, 8)], rdma=(mw.rkey, 16)))
        self.assertWC(b.poll()[0], status=OK)
        self.assertEqual(self.buf.read(1040, 8), b'offset16')

    def test_type1_unbind_with_zero_length_and_rebind_on_uc(self):
        a, b = base.connected_pair(self.ctx, self.pd, UC)
        mw = self.window(e.IBV_MW_TYPE_1)
        self.assertWC(self.bind_type1(a, mw, 0, 64, RW), status=OK)
        bound = mw.rkey
        a.qp.bind_mw(mw, MWBind(MWBindInfo(self.buf.mr, self.buf.addr, 0, 0), e.IBV_SEND_SIGNALED))
        self.assertWC(a.poll()[0], status=OK, opcode=e.IBV_WC_BIND_MW)
        self.buf.mr.close()  # nothing is bound any more: ibv_dereg_mr works
        self.assertNotEqual(mw.rkey, bound)

    def test_type2_bind_local_inv_and_rebind(self):
        a, b = base.connected_pair(self.ctx, self.pd, RC)
        mw = self.window(e.IBV_MW_TYPE_2)
        wc, rkey = self.bind_type2(a, mw, 0, 128, RW)
        self.assertWC(wc, status=OK, opcode=e.IBV_WC_BIND_MW)
        self.src.write(b'type2')
        b.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [self.src.sge(0, 5)], rdma=(rkey, self.buf.addr)))
        self.assertWC(b.poll()[0], status=OK)
        self.assertEqual(self.buf.read(0, 5), b'type2')
        self.assertWC(self.local_inv(a, rkey), status=OK, opcode=e.IBV_WC_LOCAL_INV)
        # Free again: the next bind works (and a second LOCAL_INV of the dead key would fail).
        wc, rkey2 = self.bind_type2(a, mw, 0, 128, RW)
        self.assertWC(wc, status=OK)
        b.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [self.src.sge(0, 5)], rdma=(rkey2, self.buf.addr)))
        self.assertWC(b.poll()[0], status=OK)

    def test_type2_window_serves_only_the_qp_that_bound_it(self):
        a, b = base.connected_pair(self.ctx, self.pd, RC)
        c, d = base.connected_pair(self.ctx, self.pd, RC)
        mw = self.window(e.IBV_MW_TYPE_2)
        wc, rkey = self.bind_type2(a, mw, 0, 128, RW)
        self.assertWC(wc, status=OK)
        d.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [self.src.sge(0, 8)], rdma=(rkey, self.buf.addr)))
        self.assertWC(d.poll()[0], status=e.IBV_WC_REM_ACCESS_ERR)  # arrives at c, not a
        self.assertRDMAError(errno.EBUSY, self.buf.mr.close)
        a.qp.close()  # ibv_destroy_qp ends the type 2 windows bound to the QP
        self.buf.mr.close()

    def test_local_bits_on_a_window_are_accepted_and_ignored(self):
        # Issue 13: mlx5 and rxe accept IBV_ACCESS_LOCAL_WRITE (and MW_BIND) in mw_access_flags
        # and ignore them; the window grants its REMOTE_* bits only.
        for mw_type in (e.IBV_MW_TYPE_1, e.IBV_MW_TYPE_2):
            with self.subTest(mw_type=mw_type):
                a, b = base.connected_pair(self.ctx, self.pd, RC)
                mw = self.window(mw_type)
                access = e.IBV_ACCESS_LOCAL_WRITE | RW | e.IBV_ACCESS_MW_BIND
                if mw_type == e.IBV_MW_TYPE_1:
                    wc = self.bind_type1(a, mw, 0, 64, access)
                    rkey = mw.rkey
                else:
                    wc, rkey = self.bind_type2(a, mw, 0, 64, access)
                self.assertWC(wc, status=OK, opcode=e.IBV_WC_BIND_MW)
                self.src.write(b'localbit')
                b.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [self.src.sge(0, 8)],
                                         rdma=(rkey, self.buf.addr + 8)))
                self.assertWC(b.poll()[0], status=OK)
                self.assertEqual(self.buf.read(8, 8), b'localbit')
                # READ was not granted: the local bits grant nothing remote.
                b.post_send(base.send_wr(e.IBV_WR_RDMA_READ, [self.src.sge(0, 8)],
                                         rdma=(rkey, self.buf.addr)))
                self.assertWC(b.poll()[0], status=e.IBV_WC_REM_ACCESS_ERR)
                self.assertTrue(self.buf.guards_intact())

    def test_bind_errors_complete_with_mw_bind_err(self):
        plain = Buffer(self.pd, 256)  # registered without IBV_ACCESS_MW_BIND
        cases = {
            'MR without MW_BIND': lambda mw: MWBindInfo(plain.mr, plain.addr, 64, RR),
            'range outside the MR': lambda mw: MWBindInfo(self.buf.mr, self.buf.addr + 4000, 200, RR),
        }
        for why, info in cases.items():
            with self.subTest(why):
                a, b = base.connected_pair(self.ctx, self.pd, RC)
                mw = self.window(e.IBV_MW_TYPE_2)
                wr = SendWR(opcode=e.IBV_WR_BIND_MW, wr_id=5, send_flags=e.IBV_SEND_SIGNALED)
                wr.set_bind_wr(mw, info(mw))
                a.post_send(wr)
                self.assertWC(a.poll()[0], wr_id=5, status=e.IBV_WC_MW_BIND_ERR)
                self.assertState(a, e.IBV_QPS_ERR)
        with self.subTest('type 2 already bound'):
            a, b = base.connected_pair(self.ctx, self.pd, RC)
            mw = self.window(e.IBV_MW_TYPE_2)
            self.assertWC(self.bind_type2(a, mw, 0, 64, RR)[0], status=OK)
            self.assertWC(self.bind_type2(a, mw, 0, 64, RR)[0], status=e.IBV_WC_MW_BIND_ERR)

    def test_verb_refusals(self):
        a, b = base.connected_pair(self.ctx, self.pd, RC)
        t2 = self.window(e.IBV_MW_TYPE_2)
        # ibv_bind_mw(3) binds type 1 windows; type 2 are bound by posting IBV_WR_BIND_MW.
        self.assertRDMAError(errno.EINVAL, a.qp.bind_mw, t2,
                             MWBind(MWBindInfo(self.buf.mr, self.buf.addr, 64, RR), e.IBV_SEND_SIGNALED))
        # LOCAL_INV of an MR or of a type 1 window: IBV_WC_LOC_QP_OP_ERR.
        self.assertWC(self.local_inv(a, self.buf.rkey), status=e.IBV_WC_LOC_QP_OP_ERR)
        a, b = base.connected_pair(self.ctx, self.pd, RC)
        t1 = self.window(e.IBV_MW_TYPE_1)
        self.assertWC(self.bind_type1(a, t1, 0, 64, RR), status=OK)
        self.assertWC(self.local_inv(a, t1.rkey), status=e.IBV_WC_LOC_QP_OP_ERR)
        self.assertNoCompletion(a)

    def test_dereg_mr_is_ebusy_while_a_window_is_bound(self):
        a, b = base.connected_pair(self.ctx, self.pd, RC)
        mw = self.window(e.IBV_MW_TYPE_2)
        wc, rkey = self.bind_type2(a, mw, 0, 64, RR)
        self.assertWC(wc, status=OK)
        self.assertRDMAError(errno.EBUSY, self.buf.mr.close)  # ibv_alloc_mw(3) NOTES
        b.post_send(base.send_wr(e.IBV_WR_RDMA_READ, [self.src.sge(0, 8)], rdma=(rkey, self.buf.addr)))
        self.assertWC(b.poll()[0], status=OK)  # still registered and bound
        self.assertWC(self.local_inv(a, rkey), status=OK)
        self.buf.mr.close()

    def test_qp_ex_builders(self):
        cq = base.CQ(self.ctx, 64, None, None, 0)
        ops = (e.IBV_QP_EX_WITH_BIND_MW | e.IBV_QP_EX_WITH_LOCAL_INV | e.IBV_QP_EX_WITH_SEND_WITH_INV |
               e.IBV_QP_EX_WITH_SEND)
        attr = QPInitAttrEx(qp_type=RC, scq=cq, rcq=cq, pd=self.pd,
                            cap=QPCap(max_send_wr=16, max_recv_wr=16, max_send_sge=2, max_recv_sge=2),
                            comp_mask=e.IBV_QP_INIT_ATTR_PD | e.IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
                            send_ops_flags=ops)
        qpx = QPEx(self.ctx, attr)
        b = base.Peer(self.ctx, self.pd, RC)
        base.connect_qp(self.ctx, qpx, b.qpn)
        b.connect(qpx.qp_num)
        mw = self.window(e.IBV_MW_TYPE_2)
        rkey = inc_rkey(mw.rkey)
        qpx.wr_start()
        qpx.wr_id, qpx.wr_flags = 1, e.IBV_SEND_SIGNALED
        qpx.wr_bind_mw(mw, rkey, MWBindInfo(self.buf.mr, self.buf.addr, 64, RW))
        qpx.wr_id, qpx.wr_flags = 2, e.IBV_SEND_SIGNALED
        qpx.wr_local_inv(rkey)
        qpx.wr_complete()
        wcs = base.poll(cq, 2)
        self.assertEqual([(w.wr_id, w.status, w.opcode) for w in wcs],
                         [(1, OK, e.IBV_WC_BIND_MW), (2, OK, e.IBV_WC_LOCAL_INV)])
        # SEND_WITH_INV through the builders: b's window, bound by b on its QP, invalidated by us.
        mw_b = self.window(e.IBV_MW_TYPE_2)
        wc, rkey_b = self.bind_type2(b, mw_b, 0, 64, RW)
        self.assertWC(wc, status=OK)
        dst = Buffer(self.pd, 64)
        b.post_recv(dst.sge(), wr_id=9)
        qpx.wr_start()
        qpx.wr_id, qpx.wr_flags = 3, e.IBV_SEND_SIGNALED
        qpx.wr_send_inv(rkey_b)
        qpx.wr_set_sge(self.src.sge(0, 8))
        qpx.wr_complete()
        self.assertWC(base.poll(cq)[0], wr_id=3, status=OK, opcode=e.IBV_WC_SEND)
        self.assertWC(b.poll()[0], wr_id=9, status=OK, wc_flags=e.IBV_WC_WITH_INV, imm_data=rkey_b)
        qpx.close()


class WindowsAcrossProcessesTest(WindowTestCase):
    """The window's owner here, the initiator in a child process (agent.py)."""

    def link(self):
        child = Agent()
        self.addCleanup(child.close)
        info = child.call('qp', qpt=RC, size=4096)
        me = base.Peer(self.ctx, self.pd, RC).connect(info['qpn'])
        child.call('connect', id=info['id'], remote_qpn=me.qpn)
        return child, info['id'], me

    def test_write_read_atomic_through_a_type1_window(self):
        child, cid, me = self.link()
        mw = self.window(e.IBV_MW_TYPE_1)
        self.assertWC(self.bind_type1(me, mw, 512, 256, RW | RR | RA), status=OK)
        child.call('write', id=cid, offset=0, data=b'from the child!!'.hex())
        child.call('post_send', id=cid, opcode=e.IBV_WR_RDMA_WRITE, wr_id=1, offset=0, length=16,
                   rkey=mw.rkey, raddr=self.buf.addr + 600)
        self.assertEqual(child.call('poll', id=cid)[0]['status'], OK)
        self.assertEqual(self.buf.read(600, 16), b'from the child!!')
        self.buf.set_u64(40, 768 - 8)
        self.assertEqual(child.call('fetch_add', id=cid, rkey=mw.rkey, raddr=self.buf.addr + 760, n=1, add=2),
                         [40])
        self.assertEqual(self.buf.u64(760), 42)
        child.call('post_send', id=cid, opcode=e.IBV_WR_RDMA_READ, wr_id=2, offset=32, length=16,
                   rkey=mw.rkey, raddr=self.buf.addr + 600)
        self.assertEqual(child.call('poll', id=cid)[0]['status'], OK)
        self.assertEqual(bytes.fromhex(child.call('read', id=cid, offset=32, length=16)), b'from the child!!')
        child.call('post_send', id=cid, opcode=e.IBV_WR_RDMA_WRITE, wr_id=3, offset=0, length=16,
                   rkey=mw.rkey, raddr=self.buf.addr + 500)  # 12 bytes before the window
        self.assertEqual(child.call('poll', id=cid)[0]['status'], e.IBV_WC_REM_ACCESS_ERR)
        self.assertEqual(self.buf.read(500, 12), bytes(12))

    def test_a_window_over_a_shared_file_is_reached_through_the_file(self):
        # A window over a shared-backed MR (docs/data-path.md) is reached as its MR is: through a
        # mapping of the file, so with our own mapping gone the bytes still reach the file, as a
        # NIC keeps writing the pages it pinned. (Private memory unmapped under its MR is
        # test_data_shared_backing's: whether this process's pages were moved into a memfd at
        # registration decides it there, and here it would depend on the registrations before.)
        child, cid, me = self.link()
        buf = SharedBuffer(self.pd, 4096, BINDABLE, backing='file')
        self.addCleanup(buf.close)
        mw = self.window(e.IBV_MW_TYPE_2)
        wr = SendWR(opcode=e.IBV_WR_BIND_MW, wr_id=2, send_flags=e.IBV_SEND_SIGNALED)
        wr.set_bind_wr(mw, MWBindInfo(buf.mr, buf.addr + 1024, 512, RW))
        me.post_send(wr)
        self.assertWC(me.poll()[0], status=OK)
        buf.unmap()
        child.call('write', id=cid, offset=0, data=b'through the file'.hex())
        child.call('post_send', id=cid, opcode=e.IBV_WR_RDMA_WRITE, wr_id=1, offset=0, length=16,
                   rkey=inc_rkey(mw.rkey), raddr=buf.addr + 1100)
        self.assertEqual(child.call('poll', id=cid)[0]['status'], OK)
        self.assertEqual(buf.file_bytes(1100, 16), b'through the file')
        mw.close()  # before the MR: unbinds it

    def test_send_with_inv_invalidates_the_window(self):
        child, cid, me = self.link()
        mw = self.window(e.IBV_MW_TYPE_2)
        wc, rkey = self.bind_type2(me, mw, 0, 256, RW)
        self.assertWC(wc, status=OK)
        me.post_recv(self.src.sge(0, 32), wr_id=7)
        child.call('post_send', id=cid, opcode=e.IBV_WR_SEND_WITH_INV, wr_id=1, offset=0, length=8, imm=rkey)
        self.assertEqual(child.call('poll', id=cid)[0]['status'], OK)
        self.assertWC(me.poll()[0], wr_id=7, status=OK, opcode=e.IBV_WC_RECV, byte_len=8,
                      wc_flags=e.IBV_WC_WITH_INV, imm_data=rkey)
        child.call('post_send', id=cid, opcode=e.IBV_WR_RDMA_WRITE, wr_id=2, offset=0, length=8,
                   rkey=rkey, raddr=self.buf.addr)
        self.assertEqual(child.call('poll', id=cid)[0]['status'], e.IBV_WC_REM_ACCESS_ERR)

    def test_send_with_inv_of_a_key_that_is_no_window_fails_both_ends(self):
        child, cid, me = self.link()
        me.post_recv(self.src.sge(0, 32), wr_id=7)
        child.call('post_send', id=cid, opcode=e.IBV_WR_SEND_WITH_INV, wr_id=1, offset=0, length=8,
                   imm=self.buf.rkey)  # an MR's key: not invalidatable
        self.assertEqual(child.call('poll', id=cid)[0]['status'], e.IBV_WC_REM_INV_REQ_ERR)
        self.assertWC(me.poll()[0], wr_id=7, status=e.IBV_WC_LOC_PROT_ERR)
        self.assertEqual(child.call('state', id=cid), e.IBV_QPS_ERR)


if __name__ == '__main__':
    unittest.main()
