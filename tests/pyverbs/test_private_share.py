"""Issue 16: private memory registered with ibv_reg_mr is moved into a memfd mapped MAP_SHARED at
the same addresses (docs/data-path.md, "Private memory moved into a shared file"), so peers reach
it with memcpy and atomics run as CPU atomics; it moves back at deregistration. These tests run
the hazards end to end: the environment switch, fork with and without ibv_fork_init /
RDMAV_FORK_SAFE, deregistration and re-registration in a loop while another process writes, and
atomic counters exact across initiators on the memcpy path and on the process_vm path."""
import ctypes
import unittest

import base
import pyverbs.enums as e
from agent import Agent
from base import Buffer
from pyverbs.mr import MR

RC, UC = e.IBV_QPT_RC, e.IBV_QPT_UC
OK = e.IBV_WC_SUCCESS
PAGE = 4096


def perms(addr):
    """The permissions of the mapping holding `addr` in this process ('' if unmapped)."""
    with open('/proc/self/maps') as f:
        for line in f:
            lo, hi = (int(x, 16) for x in line.split()[0].split('-'))
            if lo <= addr < hi:
                return line.split()[1]
    return ''


MAPS_SNIPPET = '''
def perms(addr):
    for line in open('/proc/self/maps'):
        lo, hi = (int(x, 16) for x in line.split()[0].split('-'))
        if lo <= addr < hi:
            return line.split()[1]
    return ''
'''

REGISTER_CODE = MAPS_SNIPPET + '''
import base
from pyverbs.pd import PD
ctx = base.open_context()
pd = PD(ctx)
buf = base.Buffer(pd, 10000)
print(perms(buf.addr))
'''

FORK_CODE = MAPS_SNIPPET + '''
import ctypes, os
import base
from pyverbs.pd import PD
if os.environ.get('CALL_FORK_INIT') == '1':
    assert ctypes.CDLL('libibverbs.so.1').ibv_fork_init() == 0
ctx = base.open_context()
pd = PD(ctx)
buf = base.Buffer(pd, 20000)
pattern = (bytes(range(251)) * 80)[:20000]
buf.write(pattern)
assert perms(buf.addr)[3] == 's', perms(buf.addr)
to_child, to_parent = os.pipe(), os.pipe()
pid = os.fork()
if pid == 0:
    ok = buf.read() == pattern and perms(buf.addr)[3] == 'p'
    buf.write(b'child!')
    os.write(to_parent[1], b'x')
    os.read(to_child[0], 1)
    ok = ok and buf.read(100, 6) == pattern[100:106]  # the parent's write after fork is not here
    os._exit(0 if ok else 1)
os.read(to_parent[0], 1)
assert buf.read(0, 6) == pattern[:6], 'the child wrote into the parent'
buf.write(b'parent', 100)
os.write(to_child[1], b'g')
_, status = os.waitpid(pid, 0)
assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
assert perms(buf.addr)[3] == 's'
print('ok')
'''


class PrivateShareTest(base.DataTestCase):

    def agent(self, **env):
        a = Agent(**env)
        self.addCleanup(a.close)
        return a

    def link(self, child, qpt=RC, size=4096):
        info = child.call('qp', qpt=qpt, size=size)
        me = base.Peer(self.ctx, self.pd, qpt).connect(info['qpn'])
        child.call('connect', id=info['id'], remote_qpn=me.qpn)
        return me, info

    def test_registered_private_memory_is_shared_then_private_again(self):
        buf = Buffer(self.pd, 10000)
        self.assertEqual(perms(buf.addr), 'rw-s')
        child = self.agent()
        _, info = self.link(child)
        data = bytes(range(200)) * 20
        child.call('write', id=info['id'], offset=0, data=data[:4000].hex())
        child.call('post_send', id=info['id'], opcode=e.IBV_WR_RDMA_WRITE, wr_id=1, offset=0,
                   length=4000, rkey=buf.rkey, raddr=buf.addr + 3000)
        self.assertEqual(child.call('poll', id=info['id'])[0]['status'], OK)
        self.assertEqual(buf.read(3000, 4000), data[:4000])
        self.assertTrue(buf.guards_intact())
        buf.mr.close()
        self.assertEqual(perms(buf.addr), 'rw-p')
        self.assertEqual(buf.read(3000, 4000), data[:4000])
        self.assertTrue(buf.guards_intact())

    def test_environment_switch_turns_it_off(self):
        on = base.run_python(REGISTER_CODE)
        off = base.run_python(REGISTER_CODE, SOFTVERBS_PRIVATE_SHARE='0')
        self.assertEqual((on.returncode, on.stdout.strip()), (0, 'rw-s'), on.stderr)
        self.assertEqual((off.returncode, off.stdout.strip()), (0, 'rw-p'), off.stderr)

    def test_fork_child_gets_a_private_copy(self):
        for env in ({}, {'RDMAV_FORK_SAFE': '1'}, {'CALL_FORK_INIT': '1'}):
            with self.subTest(env=env):
                r = base.run_python(FORK_CODE, **env)
                self.assertEqual((r.returncode, r.stdout.strip()), (0, 'ok'), r.stderr)

    def test_reregistration_loop_while_another_process_writes(self):
        """ibv_rereg_mr (keys unchanged) moves the MR between two ranges of one buffer 40 times:
        each time the new range's pages move into a memfd and the old range's back, while a
        child keeps writing through the rkey with UC WRITEs (dropped while the key is elsewhere
        or withdrawn). Nothing lands outside the range the MR held; the last WRITE lands."""
        size = 4 * PAGE
        raw = ctypes.create_string_buffer(b'\xa5' * (6 * PAGE))
        base_addr = (ctypes.addressof(raw) + PAGE - 1) // PAGE * PAGE
        x, y = base_addr + 100, base_addr + 2 * PAGE + 100  # overlapping pages: never both moved
        ctypes.memset(x, 0, 64)
        mr = MR(self.pd, 64, base.ACCESS_ALL, address=x)
        child = self.agent()
        me, info = self.link(child, qpt=UC)
        n = 3000
        child.send('write_loop', id=info['id'], rkey=mr.rkey, raddr=x, n=n, length=8)
        for i in range(40):
            target = y if i % 2 == 0 else x
            mr.rereg(e.IBV_REREG_MR_CHANGE_TRANSLATION, None, target, 64, 0)
        counts = child.reply(timeout=120)
        self.assertEqual(sum(counts.values()), n)
        value = int.from_bytes(ctypes.string_at(x, 8), 'little')
        self.assertLessEqual(value, n)
        # Every byte but x's first 8 is as it was: nothing landed elsewhere (y was never a
        # WRITE's target address while the MR held it).
        snap = ctypes.string_at(base_addr, 4 * PAGE)
        expected = bytearray(b'\xa5' * (4 * PAGE))
        expected[100:164] = bytes(64)
        expected[100:108] = snap[100:108]
        self.assertEqual(snap, bytes(expected))
        # The MR ended on x: a last WRITE through it lands there.
        child.call('post_send', id=info['id'], opcode=e.IBV_WR_RDMA_WRITE, wr_id=9, offset=0,
                   length=8, rkey=mr.rkey, raddr=x)
        self.assertEqual(child.call('poll', id=info['id'])[0]['status'], OK)
        self.assertEqual(int.from_bytes(ctypes.string_at(x, 8), 'little'), n)
        mr.close()
        self.assertEqual(perms(x)[3], 'p')

    def test_atomic_counters_exact_across_mapped_and_process_vm_initiators(self):
        """Two children reach the counter through the memfd (CPU atomics: one through the route
        its link keeps across work requests, one with SOFTVERBS_ROUTE=0 resolving each), two with
        SOFTVERBS_PEER_MAP=0 through process_vm_readv/writev, and this process through its own
        QPs: every FETCH_AND_ADD sees a distinct value and the sum is exact; then the same
        with CMP_AND_SWP increments."""
        target = Buffer(self.pd, 64)
        self.assertEqual(perms(target.addr)[3], 's')
        children = [self.agent(), self.agent(SOFTVERBS_ROUTE='0'), self.agent(SOFTVERBS_PEER_MAP='0'),
                    self.agent(SOFTVERBS_PEER_MAP='0')]
        links = [self.link(c) for c in children]
        n, local_n = 600, 200
        for child, (_, info) in zip(children, links):
            child.send('fetch_add', id=info['id'], rkey=target.rkey, raddr=target.addr + 8, n=n, add=1)
        a, b = base.connected_pair(self.ctx, self.pd, RC)  # b must live: it is the target QP
        res = Buffer(self.pd, 8)
        mine = []
        for _ in range(local_n):
            a.post_send(base.send_wr(e.IBV_WR_ATOMIC_FETCH_AND_ADD, [res.sge()],
                                     atomic=(target.rkey, target.addr + 8, 1, 0)))
            self.assertWC(a.poll()[0], status=OK)
            mine.append(res.u64())
        fetched = [child.reply(timeout=90) for child in children] + [mine]
        del a, b
        total = len(children) * n + local_n
        self.assertEqual(target.u64(8), total)
        self.assertEqual(sorted(v for values in fetched for v in values), list(range(total)))

        m = 200
        for child, (_, info) in zip(children, links):
            child.send('cas_increment', id=info['id'], rkey=target.rkey, raddr=target.addr + 16,
                       n=m, max_tries=60 * m)
        replaced = [child.reply(timeout=90) for child in children]
        self.assertEqual([len(r) for r in replaced], [m] * len(children))
        self.assertEqual(target.u64(16), m * len(children))
        self.assertEqual(sorted(v for r in replaced for v in r), list(range(m * len(children))))
        self.assertEqual(target.read(0, 8) + target.read(24), bytes(48))
        self.assertTrue(target.guards_intact())


if __name__ == '__main__':
    unittest.main()
