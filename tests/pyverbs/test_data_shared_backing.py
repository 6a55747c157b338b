"""Shared-backed registrations across processes (docs/data-path.md): memory a process already maps
MAP_SHARED from a file (/dev/shm, memfd) or a SysV segment is reached by the initiator through a
mapping of its own and memcpy; so is private memory, moved into a memfd at registration (issue 16;
process_vm_writev/readv where it cannot be moved). Either way every
opcode must put exactly the right bytes in exactly the right place, keys are checked as always,
and a deregistered key is refused."""
import os
import random
import time
import unittest

import base
import pyverbs.enums as e
import shared_memory
from shared_memory import BACKINGS, SharedAgent, SharedBuffer


def tearDownModule():
    shared_memory.cleanup_files()
    base.tear_down_module()


RC = e.IBV_QPT_RC
OK = e.IBV_WC_SUCCESS


def payload(n, seed):
    return random.Random(seed).randbytes(n)


class SharedBackingTest(base.DataTestCase):

    def setUp(self):
        super().setUp()
        self.child = SharedAgent()
        self.addCleanup(self.child.close)

    def link(self, backing, size=8192):
        """A Peer here with a SharedBuffer of `backing`, connected to a child QP whose buffer is
        of the same kind. Returns (peer, buffer, child QP info)."""
        info = self.child.call('qp', qpt=RC, size=size, backing=backing)
        me = base.Peer(self.ctx, self.pd, RC).connect(info['qpn'])
        self.child.call('connect', id=info['id'], remote_qpn=me.qpn)
        buf = SharedBuffer(self.pd, size, backing=backing)
        self.addCleanup(buf.close)
        return me, buf, info

    def child_bytes(self, cid, offset, length):
        return bytes.fromhex(self.child.call('read', id=cid, offset=offset, length=length))

    def test_every_opcode_on_each_backing(self):
        for backing in BACKINGS:
            with self.subTest(backing=backing):
                self.check_opcodes(backing)

    def check_opcodes(self, backing):
        me, buf, info = self.link(backing)
        cid, rkey, raddr = info['id'], info['rkey'], info['addr']
        seed = BACKINGS.index(backing) * 100

        # RDMA WRITE into the idle child: large, and 8 bytes (ib_write_lat's size).
        for offset, n in ((96, 5000), (8000, 8)):
            data = payload(n, seed + offset)
            buf.write(data, 0)
            me.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [buf.sge(0, n)], wr_id=1,
                                      rdma=(rkey, raddr + offset)))
            self.assertWC(me.poll()[0], wr_id=1, status=OK, opcode=e.IBV_WC_RDMA_WRITE)
            self.assertEqual(self.child_bytes(cid, offset, n), data)

        # RDMA READ out of the child, into the middle of our buffer.
        data = payload(3333, seed + 2)
        self.child.call('write', id=cid, offset=1000, data=data.hex())
        me.post_send(base.send_wr(e.IBV_WR_RDMA_READ, [buf.sge(7, 3333)], wr_id=2,
                                  rdma=(rkey, raddr + 1000)))
        self.assertWC(me.poll()[0], wr_id=2, status=OK, opcode=e.IBV_WC_RDMA_READ, byte_len=3333)
        self.assertEqual(buf.read(7, 3333), data)

        # Atomics on the child's word.
        self.child.call('write', id=cid, offset=16, data=(1000).to_bytes(8, 'little').hex())
        me.post_send(base.send_wr(e.IBV_WR_ATOMIC_FETCH_AND_ADD, [buf.sge(0, 8)], wr_id=3,
                                  atomic=(rkey, raddr + 16, 24, 0)))
        self.assertWC(me.poll()[0], wr_id=3, status=OK, opcode=e.IBV_WC_FETCH_ADD)
        self.assertEqual(buf.u64(0), 1000)
        me.post_send(base.send_wr(e.IBV_WR_ATOMIC_CMP_AND_SWP, [buf.sge(8, 8)], wr_id=4,
                                  atomic=(rkey, raddr + 16, 1024, 7)))
        self.assertWC(me.poll()[0], wr_id=4, status=OK, opcode=e.IBV_WC_COMP_SWAP)
        self.assertEqual(buf.u64(8), 1024)
        me.post_send(base.send_wr(e.IBV_WR_ATOMIC_CMP_AND_SWP, [buf.sge(8, 8)], wr_id=5,
                                  atomic=(rkey, raddr + 16, 1024, 9)))  # compare fails
        self.assertWC(me.poll()[0], wr_id=5, status=OK)
        self.assertEqual(buf.u64(8), 7)
        self.assertEqual(self.child_bytes(cid, 16, 8), (7).to_bytes(8, 'little'))

        # SENDs: copied (3000 bytes) and landed (50 bytes) into the child's receive buffers.
        for n, offset in ((3000, 4096), (50, 200)):
            data = payload(n, seed + n)
            buf.write(data, 0)
            self.child.call('post_recv', id=cid, wr_id=6, offset=offset, length=n)
            me.post_send(base.send_wr(e.IBV_WR_SEND, [buf.sge(0, n)], wr_id=7))
            self.assertWC(me.poll()[0], wr_id=7, status=OK, opcode=e.IBV_WC_SEND)
            [wc] = self.child.call('poll', id=cid)
            self.assertEqual((wc['wr_id'], wc['status'], wc['byte_len']), (6, OK, n))
            self.assertEqual(self.child_bytes(cid, offset, n), data)

        # The other way: the child writes into and reads from our buffer, a SEND lands in it.
        data = payload(4444, seed + 3)
        self.child.call('write', id=cid, offset=0, data=data.hex())
        self.child.call('post_send', id=cid, opcode=e.IBV_WR_RDMA_WRITE, wr_id=8, offset=0,
                        length=4444, rkey=buf.rkey, raddr=buf.addr + 100)
        self.assertEqual(self.child.call('poll', id=cid)[0]['status'], OK)
        self.assertEqual(buf.read(100, 4444), data)
        mine = payload(2000, seed + 4)
        buf.write(mine, 6000)
        self.child.call('post_send', id=cid, opcode=e.IBV_WR_RDMA_READ, wr_id=9, offset=10,
                        length=2000, rkey=buf.rkey, raddr=buf.addr + 6000)
        self.assertEqual(self.child.call('poll', id=cid)[0]['status'], OK)
        self.assertEqual(self.child_bytes(cid, 10, 2000), mine)
        sent = self.child_bytes(cid, 0, 1500)
        me.post_recv(buf.sge(0, 4096), wr_id=10)
        self.child.call('post_send', id=cid, opcode=e.IBV_WR_SEND, wr_id=11, offset=0, length=1500)
        self.assertEqual(self.child.call('poll', id=cid)[0]['status'], OK)
        self.assertWC(me.poll()[0], wr_id=10, status=OK, byte_len=1500)
        self.assertEqual(buf.read(0, 1500), sent)

        # Out of bounds through a valid key: refused, nothing written anywhere.
        before = self.child_bytes(cid, 0, 8192)
        me.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [buf.sge(0, 64)], wr_id=12,
                                  rdma=(rkey, raddr + 8192 - 63)))
        self.assertWC(me.poll()[0], wr_id=12, status=e.IBV_WC_REM_ACCESS_ERR)
        self.assertEqual(self.child_bytes(cid, 0, 8192), before)
        self.assertTrue(self.child.call('guards', id=cid))
        self.assertTrue(buf.guards_intact())

    def test_deregistered_key_is_refused(self):
        for backing in BACKINGS:
            with self.subTest(backing=backing):
                me, buf, info = self.link(backing)
                cid, rkey, raddr = info['id'], info['rkey'], info['addr']
                # One access first, so the initiator has mapped the child's file (if it can).
                me.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [buf.sge(0, 64)], wr_id=1,
                                          rdma=(rkey, raddr)))
                self.assertWC(me.poll()[0], wr_id=1, status=OK)
                self.child.call('dereg', id=cid)
                before = self.child_bytes(cid, 0, 8192)
                buf.write(b'\x5a' * 64)
                me.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [buf.sge(0, 64)], wr_id=2,
                                          rdma=(rkey, raddr)))
                self.assertWC(me.poll()[0], wr_id=2, status=e.IBV_WC_REM_ACCESS_ERR)
                self.assertEqual(self.child_bytes(cid, 0, 8192), before)

    def test_registered_file_stays_reachable_when_its_owner_unmaps_it(self):
        """As a NIC keeps the pages of a registration, an initiator keeps reaching the file of a
        shared-backed MR whose owner unmapped it -- private memory too, moved into a memfd at
        registration (issue 16); with SOFTVERBS_PRIVATE_SHARE=0 private memory unmapped under
        its MR cannot be reached at all (the target cannot complete the operation)."""
        private = OK if os.environ.get('SOFTVERBS_PRIVATE_SHARE') != '0' else e.IBV_WC_REM_OP_ERR
        for backing, status in (('file', OK), ('memfd', OK), ('private', private)):
            with self.subTest(backing=backing):
                # A child of its own: in one child the private buffer could land where an
                # earlier subtest's unmapped buffer was, still registered -- its live key then
                # keeps the pages from moving (docs/data-path.md), as it must.
                self.child = SharedAgent()
                self.addCleanup(self.child.close)
                me, buf, info = self.link(backing)
                cid, rkey, raddr = info['id'], info['rkey'], info['addr']
                self.child.call('unmap', id=cid)
                data = payload(100, 7)
                buf.write(data)
                me.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [buf.sge(0, 100)], wr_id=1,
                                          rdma=(rkey, raddr + 200)))
                self.assertWC(me.poll()[0], wr_id=1, status=status)
                if status == OK and backing != 'private':
                    self.assertEqual(
                        bytes.fromhex(self.child.call('file_bytes', id=cid, offset=200, length=100)), data)


class SharedBackingFaultTest(base.DataTestCase):
    """Issue 17: the owner of a shared-backed MR dies (item 2) or truncates its file (item 9)
    while an initiator reaches the file through a mapping of its own."""

    ATTRS = {'timeout': 4, 'retry_cnt': 1}  # no answer: RETRY_EXC_ERR after 2 x 67 us
    KILL_WAIT = 2.0
    LIVENESS = 0.05  # more than Peer::kLivenessPeriodMs plus a coarse clock tick

    def setUp(self):
        super().setUp()
        self.child = SharedAgent()
        self.addCleanup(self.child.close)

    def links(self, backing, n):
        """`n` QPs here, each connected to a child QP of its own, all child QPs on one child
        buffer of `backing` (one MR). Returns (peers, a local buffer, the first child QP's info)."""
        first = self.child.call('qp', qpt=RC, size=8192, backing=backing)
        infos = [first] + [self.child.call('share', id=first['id']) for _ in range(n - 1)]
        peers = []
        for info in infos:
            me = base.Peer(self.ctx, self.pd, RC).connect(info['qpn'], **self.ATTRS)
            self.child.call('connect', id=info['id'], remote_qpn=me.qpn)
            peers.append(me)
        buf = SharedBuffer(self.pd, 8192, backing='private')
        self.addCleanup(buf.close)
        # One access first: the initiator maps the child's file (the path under test).
        peers[0].post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [buf.sge(0, 64)], wr_id=1,
                                        rdma=(first['rkey'], first['addr'])))
        self.assertWC(peers[0].poll()[0], wr_id=1, status=OK)
        return peers, buf, first

    def post(self, me, buf, info, opcode):
        atomic = opcode == e.IBV_WR_ATOMIC_FETCH_AND_ADD
        me.post_send(base.send_wr(opcode, [buf.sge(0, 8 if atomic else 5000)], wr_id=2,
                                  rdma=None if atomic else (info['rkey'], info['addr']),
                                  atomic=(info['rkey'], info['addr'], 1, 0) if atomic else None))

    OPS = (e.IBV_WR_RDMA_WRITE, e.IBV_WR_RDMA_READ, e.IBV_WR_ATOMIC_FETCH_AND_ADD)

    def test_a_dead_owner_of_a_memfd_is_not_answered(self):
        """Item 2: a NIC peer whose process died has its QPs destroyed; the initiator's
        WRITE / READ / atomic then times out (IBV_WC_RETRY_EXC_ERR), never SUCCESS, although
        the memfd stays mapped in the initiator."""
        peers, buf, info = self.links('memfd', len(self.OPS))
        self.child.kill()
        time.sleep(self.LIVENESS)
        for me, opcode in zip(peers, self.OPS):
            with self.subTest(opcode=opcode):
                buf.write(b'\x33' * 5000)
                before = buf.snapshot()
                self.post(me, buf, info, opcode)
                self.assertWC(me.poll(timeout=self.KILL_WAIT)[0], wr_id=2,
                              status=e.IBV_WC_RETRY_EXC_ERR, qp_num=me.qpn)
                self.assertEqual(buf.snapshot(), before)  # a READ or atomic brought nothing

    def test_a_file_truncated_under_its_registration_is_an_error_not_a_crash(self):
        """Item 9: the owner shrinks the file of its MR; the initiator's copies through its
        mapping would raise SIGBUS in the initiator. They complete IBV_WC_REM_OP_ERR instead
        (the target cannot complete the operation), and both processes live on."""
        for backing in ('file', 'memfd'):
            with self.subTest(backing=backing):
                peers, buf, info = self.links(backing, len(self.OPS))
                self.child.call('truncate', id=info['id'], length=0)
                for me, opcode in zip(peers, self.OPS):
                    with self.subTest(opcode=opcode):
                        self.post(me, buf, info, opcode)
                        self.assertWC(me.poll()[0], wr_id=2, status=e.IBV_WC_REM_OP_ERR)
                self.assertIsInstance(self.child.call('state', id=info['id']), int)  # alive


if __name__ == '__main__':
    unittest.main()
