"""A softverbs peer in another process, driven by JSON lines.

The child (`python3 -c 'import agent; agent.main()'`, started by Agent) opens softverbs0 and
answers one JSON line per command on stdout: {"ok": result} or {"error": text}. Between commands
it blocks on stdin, so an RDMA operation on its memory proves the initiator did all the work.

Commands (all QPs are base.Peer objects with one base.Buffer each, named by "id"):
  qp(qpt, size, access)                 -> {id, qpn, rkey, lkey, addr}
  connect(id, remote_qpn, attrs)        -> null (attrs go to base.connect_qp)
  post_recv(id, wr_id, offset, length)  -> null
  post_send(id, opcode, wr_id, offset, length, imm, flags, rkey, raddr, compare_add, swap,
            ud_qpn)                     -> null
  poll(id, n, timeout)                  -> [wc as dict]
  read(id, offset, length)              -> hex string;   write(id, offset, hex) -> null
  state(id)                             -> qp_state
  fetch_add(id, rkey, raddr, n, add)    -> the n values fetched, one FETCH_AND_ADD at a time
  write_loop(id, rkey, raddr, n, length) -> {status: count} of n WRITEs carrying 1..n
  cas_increment(id, rkey, raddr, n, max_tries)
                                        -> the n values a successful CMP_AND_SWP replaced
"""
import json
import sys

import base  # environment first
import pyverbs.enums as e
from pyverbs.pd import PD

WC_FIELDS = ('wr_id', 'status', 'opcode', 'byte_len', 'qp_num', 'src_qp', 'wc_flags', 'imm_data')


class Child:

    def __init__(self):
        self.ctx = base.open_context()
        self.pd = PD(self.ctx)
        self.peers, self.bufs = [], []

    def qp(self, qpt, size=4096, access=base.ACCESS_ALL):
        self.peers.append(base.Peer(self.ctx, self.pd, qpt))
        self.bufs.append(base.Buffer(self.pd, size, access))
        p, b = self.peers[-1], self.bufs[-1]
        return {'id': len(self.peers) - 1, 'qpn': p.qpn, 'rkey': b.rkey, 'lkey': b.lkey,
                'addr': b.addr}

    def connect(self, id, remote_qpn, attrs=None):
        self.peers[id].connect(remote_qpn, **(attrs or {}))

    def post_recv(self, id, wr_id, offset=0, length=None):
        self.peers[id].post_recv(self.bufs[id].sge(offset, length), wr_id=wr_id)

    def post_send(self, id, opcode, wr_id, offset=0, length=None, imm=0,
                  flags=e.IBV_SEND_SIGNALED, rkey=0, raddr=0, compare_add=0, swap=0, ud_qpn=None):
        p, b = self.peers[id], self.bufs[id]
        atomic = opcode in (e.IBV_WR_ATOMIC_FETCH_AND_ADD, e.IBV_WR_ATOMIC_CMP_AND_SWP)
        p.post_send(base.send_wr(
            opcode, [b.sge(offset, length)], wr_id=wr_id, imm_data=imm, flags=flags,
            rdma=(rkey, raddr) if not atomic else None,
            atomic=(rkey, raddr, compare_add, swap) if atomic else None,
            ud=(p.ah(), ud_qpn, base.QKEY) if ud_qpn is not None else None))

    def poll(self, id, n=1, timeout=base.POLL_TIMEOUT):
        return [{k: int(getattr(w, k)) for k in WC_FIELDS}
                for w in self.peers[id].poll(n, timeout)]

    def read(self, id, offset=0, length=None):
        return self.bufs[id].read(offset, length).hex()

    def write(self, id, offset, data):
        self.bufs[id].write(bytes.fromhex(data), offset)

    def state(self, id):
        return int(self.peers[id].qp.query(e.IBV_QP_STATE)[0].qp_state)

    def atomic(self, id, opcode, rkey, raddr, compare_add, swap):
        """One atomic, waited for; returns the fetched original."""
        p, b = self.peers[id], self.bufs[id]
        p.post_send(base.send_wr(opcode, [b.sge(0, 8)], atomic=(rkey, raddr, compare_add, swap)))
        [wc] = p.poll()
        if wc.status != e.IBV_WC_SUCCESS:
            raise RuntimeError(base.wc_str(wc))
        return b.u64(0)

    def fetch_add(self, id, rkey, raddr, n, add=1):
        return [self.atomic(id, e.IBV_WR_ATOMIC_FETCH_AND_ADD, rkey, raddr, add, 0)
                for _ in range(n)]

    def write_loop(self, id, rkey, raddr, n, length=8):
        """n RDMA WRITEs of `length` bytes to raddr, one at a time, the i-th carrying i + 1 in
        its first 8 bytes (little endian); returns {status: count}."""
        counts = {}
        buf, peer = self.bufs[id], self.peers[id]
        for i in range(n):
            buf.set_u64(i + 1)
            peer.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [buf.sge(0, length)], wr_id=i,
                                        rdma=(rkey, raddr)))
            status = peer.poll()[0].status
            counts[status] = counts.get(status, 0) + 1
        return counts

    def cas_increment(self, id, rkey, raddr, n, max_tries):
        replaced, guess = [], 0
        for _ in range(max_tries):
            if len(replaced) == n:
                break
            seen = self.atomic(id, e.IBV_WR_ATOMIC_CMP_AND_SWP, rkey, raddr, guess, guess + 1)
            if seen == guess:
                replaced.append(seen)
                guess += 1
            else:
                guess = seen
        return replaced


def main(child_class=Child):
    """The child's loop: one JSON command per line on stdin, one JSON reply per line on stdout,
    each command a method of `child_class`."""
    child = child_class()
    print(json.dumps({'ok': 'ready'}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        name = cmd.pop('cmd')
        try:
            reply = {'ok': getattr(child, name)(**cmd)}
        except Exception as ex:  # reported to the parent, which fails the test
            reply = {'error': f'{name}: {type(ex).__name__}: {ex}'}
        print(json.dumps(reply), flush=True)


class AgentError(Exception):
    pass


class Agent:
    """The parent's handle on a child running main()."""

    def __init__(self, **env_overrides):
        self.proc = base.start_python('import agent; agent.main()', **env_overrides)
        self.reader = base.LineReader(self.proc)
        self.pid = self.proc.pid
        self._reply(20)

    def send(self, cmd, **args):
        """Sends a command without waiting for its reply (see reply())."""
        self.proc.stdin.write((json.dumps(dict(args, cmd=cmd)) + '\n').encode())

    def reply(self, timeout=20):
        return self._reply(timeout)

    def _reply(self, timeout):
        line = self.reader.readline(timeout)
        msg = json.loads(line)
        if 'error' in msg:
            raise AgentError(f'child {self.pid}: {msg["error"]}')
        return msg['ok']

    def call(self, cmd, timeout=20, **args):
        self.send(cmd, **args)
        return self._reply(timeout)

    def kill(self):
        """SIGKILL, and wait until the child is gone."""
        self.proc.kill()
        self.proc.wait(10)

    def close(self):
        self.reader.close()
        base.stop_child(self.proc)


if __name__ == '__main__':
    main()
