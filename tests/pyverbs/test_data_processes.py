"""The data path across processes (DESIGN.md section 5): senders and receivers in different
processes, atomics from many processes on one word, completion events raised by another process,
and a peer that is SIGKILLed (an error completion, never a hang)."""
import random
import select
import socket
import time
import unittest

import base
import pyverbs.enums as e
from agent import Agent
from base import Buffer

tearDownModule = base.tear_down_module

RC, UC, UD = e.IBV_QPT_RC, e.IBV_QPT_UC, e.IBV_QPT_UD
OK = e.IBV_WC_SUCCESS


def payload(n, seed=1):
    return random.Random(seed).randbytes(n)


class ProcessTestCase(base.DataTestCase):

    def agent(self):
        a = Agent()
        self.addCleanup(a.close)
        return a

    def link(self, child, qpt=RC, size=4096, attrs=None, child_attrs=None, **peer_kw):
        """A Peer here and a QP in `child`, connected. Returns (peer, child QP info)."""
        info = child.call('qp', qpt=qpt, size=size)
        me = base.Peer(self.ctx, self.pd, qpt, **peer_kw).connect(info['qpn'], **(attrs or {}))
        child.call('connect', id=info['id'], remote_qpn=me.qpn, attrs=child_attrs or {})
        return me, info


class TwoProcessTest(ProcessTestCase):

    def test_rc_every_opcode_across_processes(self):
        child = self.agent()
        me, info = self.link(child)
        cid = info['id']
        buf = Buffer(self.pd, 4096)

        with self.subTest('SEND to the child'):
            data = payload(3000, 1)
            buf.write(data)
            child.call('post_recv', id=cid, wr_id=11, offset=0, length=4096)
            me.post_send(base.send_wr(e.IBV_WR_SEND, [buf.sge(0, 3000)], wr_id=12))
            self.assertWC(me.poll()[0], wr_id=12, status=OK, opcode=e.IBV_WC_SEND)
            [wc] = child.call('poll', id=cid)
            del wc['src_qp']  # ibv_poll_cq(3): valid for UD only
            self.assertEqual(wc, dict(wr_id=11, status=OK, opcode=e.IBV_WC_RECV, byte_len=3000,
                                      qp_num=info['qpn'], wc_flags=0, imm_data=0))
            self.assertEqual(bytes.fromhex(child.call('read', id=cid, offset=0, length=3000)),
                             data)

        with self.subTest('SEND_WITH_IMM from the child'):
            data = payload(1000, 2)
            child.call('write', id=cid, offset=0, data=data.hex())
            me.post_recv(buf.sge(), wr_id=21)
            child.call('post_send', id=cid, opcode=e.IBV_WR_SEND_WITH_IMM, wr_id=22, offset=0,
                       length=1000, imm=socket.htonl(0xfeedbeef))
            [swc] = child.call('poll', id=cid)
            self.assertEqual((swc['wr_id'], swc['status'], swc['opcode']), (22, OK, e.IBV_WC_SEND))
            r = me.poll()[0]
            self.assertWC(r, wr_id=21, status=OK, opcode=e.IBV_WC_RECV, byte_len=1000,
                          qp_num=me.qpn, wc_flags=e.IBV_WC_WITH_IMM)
            self.assertEqual(socket.ntohl(r.imm_data), 0xfeedbeef)
            self.assertEqual(buf.read(0, 1000), data)

        with self.subTest('RDMA WRITE into the idle child'):
            data = payload(4000, 3)
            buf.write(data)
            me.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [buf.sge(0, 4000)], wr_id=31,
                                      rdma=(info['rkey'], info['addr'] + 96)))
            self.assertWC(me.poll()[0], wr_id=31, status=OK, opcode=e.IBV_WC_RDMA_WRITE)
            self.assertEqual(bytes.fromhex(child.call('read', id=cid, offset=96, length=4000)),
                             data)

        with self.subTest('RDMA READ from the idle child'):
            data = payload(2222, 4)
            child.call('write', id=cid, offset=1000, data=data.hex())
            me.post_send(base.send_wr(e.IBV_WR_RDMA_READ, [buf.sge(7, 2222)], wr_id=41,
                                      rdma=(info['rkey'], info['addr'] + 1000)))
            self.assertWC(me.poll()[0], wr_id=41, status=OK, opcode=e.IBV_WC_RDMA_READ,
                          byte_len=2222)
            self.assertEqual(buf.read(7, 2222), data)

        with self.subTest('atomics on the child'):
            child.call('write', id=cid, offset=8, data=(1000).to_bytes(8, 'little').hex())
            me.post_send(base.send_wr(e.IBV_WR_ATOMIC_FETCH_AND_ADD, [buf.sge(0, 8)], wr_id=51,
                                      atomic=(info['rkey'], info['addr'] + 8, 24, 0)))
            self.assertWC(me.poll()[0], wr_id=51, status=OK, opcode=e.IBV_WC_FETCH_ADD)
            self.assertEqual(buf.u64(0), 1000)
            me.post_send(base.send_wr(e.IBV_WR_ATOMIC_CMP_AND_SWP, [buf.sge(8, 8)], wr_id=52,
                                      atomic=(info['rkey'], info['addr'] + 8, 1024, 7)))
            self.assertWC(me.poll()[0], wr_id=52, status=OK, opcode=e.IBV_WC_COMP_SWAP)
            self.assertEqual(buf.u64(8), 1024)
            self.assertEqual(child.call('read', id=cid, offset=8, length=8),
                             (7).to_bytes(8, 'little').hex())

        with self.subTest('RDMA WRITE_WITH_IMM from the child'):
            data = payload(512, 5)
            child.call('write', id=cid, offset=0, data=data.hex())
            me.post_recv(wr_id=61)
            child.call('post_send', id=cid, opcode=e.IBV_WR_RDMA_WRITE_WITH_IMM, wr_id=62,
                       offset=0, length=512, imm=5, rkey=buf.rkey, raddr=buf.addr + 2048)
            self.assertEqual(child.call('poll', id=cid)[0]['status'], OK)
            self.assertWC(me.poll()[0], wr_id=61, status=OK, opcode=e.IBV_WC_RECV_RDMA_WITH_IMM,
                          byte_len=512, imm_data=5, wc_flags=e.IBV_WC_WITH_IMM)
            self.assertEqual(buf.read(2048, 512), data)

        with self.subTest('remote access error across processes'):
            before = child.call('read', id=cid)
            me.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [buf.sge(0, 64)], wr_id=71,
                                      rdma=(info['rkey'], info['addr'] + 4096 - 63)))
            self.assertWC(me.poll()[0], wr_id=71, status=e.IBV_WC_REM_ACCESS_ERR)
            self.assertEqual(child.call('read', id=cid), before)
        self.assertTrue(buf.guards_intact())

    def test_uc_and_ud_across_processes(self):
        child = self.agent()
        for qpt in (UC, UD):
            with self.subTest(qp_type=base.QPT_NAMES[qpt]):
                me, info = self.link(child, qpt)
                cid = info['id']
                buf = Buffer(self.pd, 2048)
                data = payload(1024, qpt)
                buf.write(data)
                grh = base.GRH_LEN if qpt == UD else 0
                child.call('post_recv', id=cid, wr_id=1, offset=0, length=2048)
                ud = (me.ah(), info['qpn'], base.QKEY) if qpt == UD else None
                me.post_send(base.send_wr(e.IBV_WR_SEND_WITH_IMM, [buf.sge(0, 1024)], wr_id=2,
                                          imm_data=0x01000000, ud=ud))
                self.assertWC(me.poll()[0], wr_id=2, status=OK)
                [wc] = child.call('poll', id=cid)
                flags = e.IBV_WC_WITH_IMM | (e.IBV_WC_GRH if qpt == UD else 0)
                self.assertEqual((wc['wr_id'], wc['status'], wc['byte_len'], wc['wc_flags'],
                                  wc['imm_data']), (1, OK, 1024 + grh, flags, 0x01000000))
                if qpt == UD:
                    self.assertEqual(wc['src_qp'], me.qpn)
                self.assertEqual(bytes.fromhex(child.call('read', id=cid, offset=grh,
                                                          length=1024)), data)
                # And back from the child (UD: to our QPN).
                me.post_recv(buf.sge(), wr_id=3)
                child.call('write', id=cid, offset=0, data=b'back'.hex())
                child.call('post_send', id=cid, opcode=e.IBV_WR_SEND, wr_id=4, offset=0,
                           length=4, ud_qpn=me.qpn if qpt == UD else None)
                self.assertEqual(child.call('poll', id=cid)[0]['status'], OK)
                self.assertWC(me.poll()[0], wr_id=3, status=OK, byte_len=4 + grh)
                self.assertEqual(buf.read(grh, 4), b'back')

    def test_completion_event_raised_by_another_process(self):
        child = self.agent()
        ch, fd = base.comp_channel(self.ctx)
        me, info = self.link(child, channel=ch)
        buf = Buffer(self.pd, 64)
        me.post_recv(buf.sge(), wr_id=1)
        me.cq.req_notify(0)
        self.assertEqual(select.select([fd], [], [], 0.05)[0], [])
        child.call('write', id=info['id'], offset=0, data=b'event!'.hex())
        child.call('post_send', id=info['id'], opcode=e.IBV_WR_SEND, wr_id=2, offset=0, length=6)
        self.assertEqual(select.select([fd], [], [], base.POLL_TIMEOUT)[0], [fd])
        ch.get_cq_event(me.cq)
        me.cq.ack_events(1)
        self.assertWC(me.poll()[0], wr_id=1, status=OK, byte_len=6)
        self.assertEqual(buf.read(0, 6), b'event!')

    def test_rnr_until_the_other_process_posts_a_receive(self):
        child = self.agent()
        me, info = self.link(child, attrs={'rnr_retry': 7}, child_attrs={'min_rnr_timer': 1})
        buf = Buffer(self.pd, 100)
        buf.write(payload(100, 8))
        me.post_send(base.send_wr(e.IBV_WR_SEND, [buf.sge()], wr_id=1))
        self.assertNoCompletion(me)
        child.call('post_recv', id=info['id'], wr_id=2, offset=0, length=100)
        self.assertWC(me.poll()[0], wr_id=1, status=OK)
        self.assertEqual(child.call('poll', id=info['id'])[0]['byte_len'], 100)
        self.assertEqual(bytes.fromhex(child.call('read', id=info['id'], offset=0, length=100)),
                         payload(100, 8))


class AtomicsTest(ProcessTestCase):
    """IBV_ATOMIC_HCA: atomics of every QP and process on the host are atomic with each other."""

    CHILDREN = 4

    def setUp(self):
        super().setUp()
        self.target = Buffer(self.pd, 64)
        self.children = [self.agent() for _ in range(self.CHILDREN)]
        self.links = [self.link(c) for c in self.children]

    def test_fetch_and_add_from_four_processes_and_a_local_qp(self):
        n, local_n = 1000, 300
        for child, (_, info) in zip(self.children, self.links):
            child.send('fetch_add', id=info['id'], rkey=self.target.rkey,
                       raddr=self.target.addr + 8, n=n, add=1)
        # Meanwhile, this process adds through two QPs of its own.
        a, b = base.connected_pair(self.ctx, self.pd, RC)
        res = Buffer(self.pd, 8)
        mine = []
        for _ in range(local_n):
            a.post_send(base.send_wr(e.IBV_WR_ATOMIC_FETCH_AND_ADD, [res.sge()],
                                     atomic=(self.target.rkey, self.target.addr + 8, 1, 0)))
            self.assertWC(a.poll()[0], status=OK)
            mine.append(res.u64())
        fetched = [child.reply(timeout=60) for child in self.children] + [mine]
        total = self.CHILDREN * n + local_n
        self.assertEqual(self.target.u64(8), total)
        everything = sorted(v for values in fetched for v in values)
        self.assertEqual(everything, list(range(total)), 'a prior value came back twice')
        for values in fetched:
            self.assertEqual(values, sorted(values))
        self.assertEqual(self.target.read(0, 8) + self.target.read(16), bytes(56))

    def test_compare_and_swap_counter_from_four_processes(self):
        n = 250
        for child, (_, info) in zip(self.children, self.links):
            child.send('cas_increment', id=info['id'], rkey=self.target.rkey,
                       raddr=self.target.addr, n=n, max_tries=50 * n)
        replaced = [child.reply(timeout=60) for child in self.children]
        self.assertEqual([len(r) for r in replaced], [n] * self.CHILDREN)
        self.assertEqual(self.target.u64(0), n * self.CHILDREN)
        self.assertEqual(sorted(v for r in replaced for v in r), list(range(n * self.CHILDREN)))


class KilledPeerTest(ProcessTestCase):
    """DESIGN.md 5.3: a dead peer process turns into the completion hardware would give
    (IBV_WC_RETRY_EXC_ERR), never a hang."""

    ATTRS = {'timeout': 4, 'retry_cnt': 1}

    KILL_WAIT = 1.0  # the completion is due after timeout x (retry_cnt + 1) = 2 x 67 us

    def warm_link(self, child, **attrs):
        """A link over which a SEND went both ways: this process has reached the child."""
        me, info = self.link(child, attrs=dict(self.ATTRS, **attrs),
                             child_attrs={'min_rnr_timer': 1})
        buf = Buffer(self.pd, 64)
        child.call('post_recv', id=info['id'], wr_id=1, offset=0, length=64)
        me.post_send(base.send_wr(e.IBV_WR_SEND, [buf.sge()], wr_id=2))
        self.assertWC(me.poll()[0], wr_id=2, status=OK)
        self.assertEqual(child.call('poll', id=info['id'])[0]['status'], OK)
        return me, info, buf

    def test_rdma_to_a_sigkilled_peer_after_we_reached_it(self):
        child = self.agent()
        links = [self.warm_link(child) for _ in range(3)]
        child.kill()
        ops = ((e.IBV_WR_RDMA_WRITE, None), (e.IBV_WR_RDMA_READ, None),
               (e.IBV_WR_ATOMIC_FETCH_AND_ADD, 1))
        for (me, info, buf), (opcode, add) in zip(links, ops):
            with self.subTest(opcode=opcode):
                before = buf.snapshot()
                me.post_send(base.send_wr(
                    opcode, [buf.sge(0, 8 if add else 64)], wr_id=3,
                    rdma=None if add else (info['rkey'], info['addr']),
                    atomic=(info['rkey'], info['addr'], add, 0) if add else None))
                self.assertWC(me.poll(timeout=self.KILL_WAIT)[0], wr_id=3,
                              status=e.IBV_WC_RETRY_EXC_ERR, qp_num=me.qpn)
                self.assertEqual(buf.snapshot(), before)

    def test_send_to_a_sigkilled_peer_after_we_reached_it(self):
        child = self.agent()
        me, _, buf = self.warm_link(child, rnr_retry=7)
        waiter, _, _ = self.warm_link(child, rnr_retry=7)
        # A SEND waits for a receive (RNR, retried forever) when the peer dies.
        waiter.post_send(base.send_wr(e.IBV_WR_SEND, [buf.sge()], wr_id=3))
        self.assertNoCompletion(waiter)
        child.kill()
        try:
            with self.subTest('SEND queued in RNR when the peer died'):
                self.assertWC(waiter.poll(timeout=self.KILL_WAIT)[0], wr_id=3,
                              status=e.IBV_WC_RETRY_EXC_ERR)
            with self.subTest('SEND after the death'):
                me.post_send(base.send_wr(e.IBV_WR_SEND, [buf.sge()], wr_id=4))
                self.assertWC(me.poll(timeout=self.KILL_WAIT)[0], wr_id=4,
                              status=e.IBV_WC_RETRY_EXC_ERR, qp_num=me.qpn)
        finally:
            base.stop_retries(me, waiter)

    def test_small_sends_to_a_dead_receiver_are_not_delivered(self):
        # Issue 17 item 4: SENDs small enough to land in the receiver's completion ring
        # (docs/data-path.md, "Landing") were reported delivered into a receiver that had died.
        # A dead NIC peer answers nothing: the first times out, the rest are flushed.
        child = self.agent()
        me, info = self.link(child, attrs=self.ATTRS)
        buf = Buffer(self.pd, 64)
        for i in range(40):
            child.call('post_recv', id=info['id'], wr_id=100 + i, offset=0, length=64)
        me.post_send(base.send_wr(e.IBV_WR_SEND, [buf.sge(0, 16)], wr_id=1))
        self.assertWC(me.poll()[0], wr_id=1, status=OK)
        child.kill()
        time.sleep(0.05)  # more than the liveness period (fabric Peer::kLivenessPeriodMs)
        for i in range(32):
            me.post_send(base.send_wr(e.IBV_WR_SEND, [buf.sge(0, 16)], wr_id=10 + i))
        wcs = me.poll(32, timeout=self.KILL_WAIT)
        self.assertEqual([wc.wr_id for wc in wcs], list(range(10, 42)))
        self.assertEqual(wcs[0].status, e.IBV_WC_RETRY_EXC_ERR)
        self.assertEqual({wc.status for wc in wcs[1:]}, {e.IBV_WC_WR_FLUSH_ERR})

    def test_rc_peer_sigkilled_then_a_new_process(self):
        # The survivor was the responder only: its sends to the dead peer fail with
        # RETRY_EXC_ERR, and a new process creates QPs and talks to it.
        child = self.agent()
        me, info = self.link(child, attrs=self.ATTRS)
        writer, winfo = self.link(child, attrs=self.ATTRS)
        buf = Buffer(self.pd, 64)
        me.post_recv(buf.sge(), wr_id=1)
        child.call('write', id=info['id'], offset=0, data=b'last words'.hex())
        child.call('post_send', id=info['id'], opcode=e.IBV_WR_SEND, wr_id=2, offset=0,
                   length=10)
        self.assertWC(me.poll()[0], wr_id=1, status=OK, byte_len=10)
        self.assertEqual(buf.read(0, 10), b'last words')
        child.kill()
        me.post_send(base.send_wr(e.IBV_WR_SEND, [buf.sge()], wr_id=3))
        self.assertWC(me.poll()[0], wr_id=3, status=e.IBV_WC_RETRY_EXC_ERR, qp_num=me.qpn)
        self.assertEqual(me.qp.query(e.IBV_QP_STATE)[0].qp_state, e.IBV_QPS_ERR)
        writer.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [buf.sge()], wr_id=4,
                                      rdma=(winfo['rkey'], winfo['addr'])))
        self.assertWC(writer.poll()[0], wr_id=4, status=e.IBV_WC_RETRY_EXC_ERR)

        fresh = self.agent()
        info2 = fresh.call('qp', qpt=RC, size=64)
        info3 = fresh.call('qp', qpt=UD, size=64)
        self.assertNotEqual(info2['qpn'], info3['qpn'])
        me2 = base.Peer(self.ctx, self.pd, RC).connect(info2['qpn'], **self.ATTRS)
        fresh.call('connect', id=info2['id'], remote_qpn=me2.qpn)
        buf.write(b'after the crash!' * 4)
        fresh.call('post_recv', id=info2['id'], wr_id=6, offset=0, length=64)
        me2.post_send(base.send_wr(e.IBV_WR_SEND, [buf.sge()], wr_id=7))
        self.assertWC(me2.poll()[0], wr_id=7, status=OK)
        self.assertEqual(fresh.call('poll', id=info2['id'])[0]['status'], OK)
        self.assertEqual(bytes.fromhex(fresh.call('read', id=info2['id'], offset=0, length=64)),
                         b'after the crash!' * 4)

    def test_many_processes_killed_while_doing_atomics(self):
        # Children killed in the middle of their FETCH_AND_ADD loops leave no atomic lock held:
        # this process's atomics on the same word still complete.
        target = Buffer(self.pd, 64)
        children = [self.agent() for _ in range(3)]
        for child in children:
            _, info = self.link(child)
            child.send('fetch_add', id=info['id'], rkey=target.rkey, raddr=target.addr,
                       n=100000, add=1)
        deadline = time.monotonic() + 10
        while target.u64() < 300 and time.monotonic() < deadline:
            time.sleep(0.01)
        for child in children:
            child.kill()
        start = target.u64()
        a, b = base.connected_pair(self.ctx, self.pd, RC)
        res = Buffer(self.pd, 8)
        for k in range(10):
            a.post_send(base.send_wr(e.IBV_WR_ATOMIC_FETCH_AND_ADD, [res.sge()],
                                     atomic=(target.rkey, target.addr, 1, 0)))
            self.assertWC(a.poll()[0], status=OK)
            self.assertEqual(res.u64(), start + k)
        self.assertEqual(target.u64(), start + 10)
