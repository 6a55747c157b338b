"""One softverbs peer of a wire test across network namespaces (pyverbs, Debian's interpreter).

Two peers (one per namespace) meet through JSON files in a directory both can see: each writes
`<dir>/<role>.json` (its QP numbers, GID, keys, addresses) and waits for the other's. Every wait
is bounded (--deadline seconds); a failure exits non-zero with the reason on stderr. Modes:

  stream    client/server: an RC stream of SENDs (1 B .. 9000 B, several packets each), RDMA
            WRITEs and RDMA READs. The client checks that every WR completes exactly once,
            successfully, in order; the server that every message arrives byte-exact, in order,
            once; both that nothing is written outside their MRs (guard bytes).
  kill      victim/survivor: the victim connects and waits to be SIGKILLed (by the test);
            the survivor then posts SENDs and must get IBV_WC_RETRY_EXC_ERR for the first
            (IBA 9.7.6.1.3: after retry_cnt retries, each waiting 4.096 us * 2^timeout) and
            IBV_WC_WR_FLUSH_ERR for the rest, each exactly once, before the hang guard.
  target    partner/target: the target holds a live RC QP, a UD QP and "victim" RC QPs
            (one per malformed-packet case, their MRs between guard bytes) while the test
            floods its UDP 4791 (roce_flood.py); then the partner's real SEND, WRITE, READ and
            UD datagram must complete and arrive exactly, and no MR or guard byte may have
            changed except by the real exchange.
"""
import argparse
import ctypes
import ipaddress
import json
import os
import sys
import time

import pyverbs.enums as e
from pyverbs.addr import AH, AHAttr, GID, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR

PORT = 1
ACCESS = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ |
          e.IBV_ACCESS_REMOTE_ATOMIC)
QKEY = 0x11223344
MTU = 1024  # the path MTU of every RC QP here: messages of several packets
STATUS = {getattr(e, n): n for n in dir(e) if n.startswith('IBV_WC_') and
          (n.endswith('_ERR') or n == 'IBV_WC_SUCCESS')}


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


class Buffer:
    """An MR in the middle of a larger allocation: GUARD bytes on each side show stray writes."""
    GUARD = 4096
    GUARD_BYTE = 0xa5

    def __init__(self, pd, size, fill=0):
        self.size = size
        self.raw = ctypes.create_string_buffer(bytes([self.GUARD_BYTE]) * (2 * self.GUARD + size))
        self.addr = ctypes.addressof(self.raw) + self.GUARD
        ctypes.memset(self.addr, fill, size)
        self.mr = MR(pd, size, ACCESS, address=self.addr)

    def read(self, offset=0, length=None):
        return ctypes.string_at(self.addr + offset, self.size - offset if length is None else length)

    def write(self, data, offset=0):
        ctypes.memmove(self.addr + offset, bytes(data), len(data))

    def sge(self, offset, length):
        return SGE(self.addr + offset, length, self.mr.lkey)

    def snapshot(self):
        return self.raw.raw[:2 * self.GUARD + self.size]

    def guards_intact(self):
        s, g = self.snapshot(), bytes([self.GUARD_BYTE]) * self.GUARD
        return s[:self.GUARD] == g and s[self.GUARD + self.size:] == g


def pattern(seed, n):
    """Bytes that differ per message and per position (a lost, repeated or shifted piece shows)."""
    return bytes((seed * 131 + i * 7 + (i >> 8)) & 0xff for i in range(n))


class Peer:
    def __init__(self, ip):
        self.ctx = Context(name='softverbs0')
        self.pd = PD(self.ctx)
        self.gid_index = self.find_gid(ip)
        self.gid = self.ctx.query_gid(PORT, self.gid_index).gid

    def find_gid(self, ip):
        want = ipaddress.ip_address(ip)
        if want.version == 4:
            want = ipaddress.IPv6Address('::ffff:' + ip)
        for i in range(64):
            g = self.ctx.query_gid(PORT, i).gid
            if ipaddress.IPv6Address(bytes.fromhex(g.replace(':', ''))) == want:
                return i
        raise Failure(f'no GID of {ip} in the GID table')

    def rc_qp(self, depth=256):
        cq = CQ(self.ctx, 4 * depth, None, None, 0)
        cap = QPCap(max_send_wr=depth, max_recv_wr=depth, max_send_sge=1, max_recv_sge=1)
        qp = QP(self.pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap))
        a = QPAttr(qp_state=e.IBV_QPS_INIT)  # in INIT: receives may be posted (ibv_post_recv(3))
        a.pkey_index, a.port_num, a.qp_access_flags = 0, PORT, ACCESS
        qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS)
        return qp, cq

    def connect_rc(self, qp, remote_qpn, remote_gid, timeout=14, retry_cnt=7, rq_psn=0, sq_psn=0):
        a = QPAttr(qp_state=e.IBV_QPS_RTR)
        a.ah_attr = self.ah_attr(remote_gid)
        a.path_mtu, a.dest_qp_num, a.rq_psn = e.IBV_MTU_1024, remote_qpn, rq_psn
        a.max_dest_rd_atomic, a.min_rnr_timer = 16, 1
        qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN |
                  e.IBV_QP_RQ_PSN | e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER)
        a = QPAttr(qp_state=e.IBV_QPS_RTS)
        a.sq_psn, a.max_rd_atomic, a.timeout, a.retry_cnt, a.rnr_retry = sq_psn, 16, timeout, retry_cnt, 7
        qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_SQ_PSN | e.IBV_QP_MAX_QP_RD_ATOMIC | e.IBV_QP_TIMEOUT |
                  e.IBV_QP_RETRY_CNT | e.IBV_QP_RNR_RETRY)

    def ud_qp(self, depth=64):
        cq = CQ(self.ctx, 4 * depth, None, None, 0)
        cap = QPCap(max_send_wr=depth, max_recv_wr=depth, max_send_sge=1, max_recv_sge=1)
        qp = QP(self.pd, QPInitAttr(qp_type=e.IBV_QPT_UD, scq=cq, rcq=cq, cap=cap))
        a = QPAttr(qp_state=e.IBV_QPS_INIT)
        a.pkey_index, a.port_num, a.qkey = 0, PORT, QKEY
        qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_QKEY)
        qp.modify(QPAttr(qp_state=e.IBV_QPS_RTR), e.IBV_QP_STATE)
        a = QPAttr(qp_state=e.IBV_QPS_RTS)
        a.sq_psn = 0
        qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_SQ_PSN)
        return qp, cq

    def ah_attr(self, remote_gid):
        return AHAttr(port_num=PORT, is_global=1,
                      gr=GlobalRoute(dgid=GID(remote_gid), sgid_index=self.gid_index, hop_limit=64))


def send_wr(opcode, sge, wr_id, rdma=None, ud=None):
    wr = SendWR(wr_id=wr_id, opcode=opcode, num_sge=1, sg=[sge], send_flags=e.IBV_SEND_SIGNALED)
    if rdma:
        wr.set_wr_rdma(*rdma)
    if ud:
        wr.set_wr_ud(*ud)
    return wr


def poll(cq, n, deadline, what):
    wcs = []
    while len(wcs) < n:
        k, got = cq.poll(min(16, n - len(wcs)))
        if k > 0:
            wcs.extend(got[:k])
            continue
        if time.monotonic() > deadline:
            raise Failure(f'{what}: {len(wcs)} of {n} completions before the deadline')
        time.sleep(0.0005)
    return wcs


def drain(cq, wait=0.3):
    wcs, end = [], time.monotonic() + wait
    while time.monotonic() < end:
        k, got = cq.poll(16)
        wcs.extend(got[:k])
        if k == 0:
            time.sleep(0.005)
    return wcs


# --- rendezvous -----------------------------------------------------------------------------

def publish(d, name, info):
    tmp = os.path.join(d, f'.{name}.tmp')
    with open(tmp, 'w') as f:
        json.dump(info, f)
    os.rename(tmp, os.path.join(d, f'{name}.json'))


def wait_for(d, name, deadline):
    path = os.path.join(d, f'{name}.json')
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise Failure(f'{name}.json did not appear before the deadline')
        time.sleep(0.01)
    with open(path) as f:
        return json.load(f)


# --- stream ---------------------------------------------------------------------------------

SIZES = (1, 64, 1000, 1024, 1025, 3000, 4096, 9000)
SLOT = 9216          # one receive (and one WRITE) slot per message
READ_AREA = 64 * 1024


def stream_plan(count):
    """The client's WRs: (kind, size, seed); every 3rd a WRITE, every 5th a READ."""
    plan = []
    for i in range(count):
        kind = 'read' if i % 5 == 4 else 'write' if i % 3 == 2 else 'send'
        plan.append((kind, SIZES[i % len(SIZES)], i))
    return plan


def stream_server(p, a):
    deadline = time.monotonic() + a.deadline
    plan = stream_plan(a.count)
    sends = [x for x in plan if x[0] == 'send']
    writes = [x for x in plan if x[0] == 'write']
    qp, cq = p.rc_qp(depth=max(16, len(sends)))
    recv = Buffer(p.pd, SLOT * len(sends))
    wbuf = Buffer(p.pd, SLOT * len(writes))
    rbuf = Buffer(p.pd, READ_AREA)
    rbuf.write(pattern(99991, READ_AREA))
    for k in range(len(sends)):
        qp.post_recv(RecvWR(wr_id=k, num_sge=1, sg=[recv.sge(k * SLOT, SLOT)]))
    publish(a.dir, 'server', {'qpn': qp.qp_num, 'gid': p.gid, 'wkey': wbuf.mr.rkey, 'waddr': wbuf.addr,
                              'rkey': rbuf.mr.rkey, 'raddr': rbuf.addr})
    peer = wait_for(a.dir, 'client', deadline)
    p.connect_rc(qp, peer['qpn'], peer['gid'], timeout=a.timeout, retry_cnt=a.retry_cnt)
    publish(a.dir, 'server-ready', {})
    wcs = poll(cq, len(sends), deadline, 'server receives')
    for k, (wc, (_, size, seed)) in enumerate(zip(wcs, sends)):
        check(wc.status == e.IBV_WC_SUCCESS, f'receive {k}: {STATUS.get(wc.status, wc.status)}')
        check(wc.wr_id == k, f'receive {k} completed as wr_id {wc.wr_id} (out of order)')
        check(wc.byte_len == size, f'receive {k}: byte_len {wc.byte_len}, sent {size}')
        check(recv.read(k * SLOT, size) == pattern(seed, size), f'receive {k}: bytes differ from those sent')
    wait_for(a.dir, 'client-done', deadline)
    for k, (_, size, seed) in enumerate(writes):
        check(wbuf.read(k * SLOT, size) == pattern(seed, size), f'WRITE {k} ({size} B): bytes differ')
    extra = drain(cq)
    check(not extra, f'{len(extra)} completions more than the messages sent')
    check(recv.guards_intact() and wbuf.guards_intact() and rbuf.guards_intact(), 'a guard byte changed')
    return f'{len(sends)} SENDs and {len(writes)} WRITEs arrived byte-exact, in order, once'


def stream_client(p, a):
    deadline = time.monotonic() + a.deadline
    plan = stream_plan(a.count)
    qp, cq = p.rc_qp(depth=64)
    src = Buffer(p.pd, SLOT * len(plan))
    for i, (kind, size, seed) in enumerate(plan):
        if kind != 'read':
            src.write(pattern(seed, size), i * SLOT)
    publish(a.dir, 'client', {'qpn': qp.qp_num, 'gid': p.gid})
    peer = wait_for(a.dir, 'server', deadline)
    p.connect_rc(qp, peer['qpn'], peer['gid'], timeout=a.timeout, retry_cnt=a.retry_cnt)
    wait_for(a.dir, 'server-ready', deadline)
    posted, done, nwrite, window = 0, 0, 0, 8
    while done < len(plan):
        while posted < len(plan) and posted - done < window:
            kind, size, seed = plan[posted]
            sge = src.sge(posted * SLOT, size)
            if kind == 'send':
                wr = send_wr(e.IBV_WR_SEND, sge, posted)
            elif kind == 'write':
                wr = send_wr(e.IBV_WR_RDMA_WRITE, sge, posted, rdma=(peer['wkey'], peer['waddr'] + nwrite * SLOT))
                nwrite += 1
            else:
                off = (seed * 1237) % (READ_AREA - size)
                wr = send_wr(e.IBV_WR_RDMA_READ, sge, posted, rdma=(peer['rkey'], peer['raddr'] + off))
            qp.post_send(wr)
            posted += 1
        for wc in poll(cq, 1, deadline, 'client completions'):
            check(wc.status == e.IBV_WC_SUCCESS, f'WR {done}: {STATUS.get(wc.status, wc.status)}')
            check(wc.wr_id == done, f'WR {done} completed as wr_id {wc.wr_id} (lost, repeated or out of order)')
            kind, size, seed = plan[done]
            if kind == 'read':
                off = (seed * 1237) % (READ_AREA - size)
                check(src.read(done * SLOT, size) == pattern(99991, READ_AREA)[off:off + size],
                      f'READ {done} ({size} B): bytes differ from the server\'s')
            done += 1
    extra = drain(cq)
    check(not extra, f'{len(extra)} completions more than the WRs posted')
    check(src.guards_intact(), 'a guard byte changed')
    publish(a.dir, 'client-done', {})
    return f'{len(plan)} WRs completed successfully, in order, exactly once'


# --- kill -----------------------------------------------------------------------------------

def kill_victim(p, a):
    deadline = time.monotonic() + a.deadline
    qp, cq = p.rc_qp()
    buf = Buffer(p.pd, 4096)
    for k in range(8):
        qp.post_recv(RecvWR(wr_id=k, num_sge=1, sg=[buf.sge(0, 4096)]))
    publish(a.dir, 'victim', {'qpn': qp.qp_num, 'gid': p.gid})
    peer = wait_for(a.dir, 'survivor', deadline)
    p.connect_rc(qp, peer['qpn'], peer['gid'])
    publish(a.dir, 'victim-ready', {'pid': os.getpid()})
    poll(cq, 1, deadline, 'the survivor\'s first SEND')
    publish(a.dir, 'victim-received', {})
    time.sleep(a.deadline)  # until SIGKILLed
    raise Failure('the victim was not killed')


def kill_survivor(p, a):
    deadline = time.monotonic() + a.deadline
    qp, cq = p.rc_qp()
    buf = Buffer(p.pd, 4096)
    publish(a.dir, 'survivor', {'qpn': qp.qp_num, 'gid': p.gid})
    peer = wait_for(a.dir, 'victim', deadline)
    p.connect_rc(qp, peer['qpn'], peer['gid'], timeout=a.timeout, retry_cnt=a.retry_cnt)
    wait_for(a.dir, 'victim-ready', deadline)
    qp.post_send(send_wr(e.IBV_WR_SEND, buf.sge(0, 64), 100))
    [wc] = poll(cq, 1, deadline, 'the SEND to the live victim')
    check(wc.status == e.IBV_WC_SUCCESS, f'SEND to the live peer: {STATUS.get(wc.status, wc.status)}')
    wait_for(a.dir, 'killed', deadline)
    start = time.monotonic()
    n = 4
    for k in range(n):
        qp.post_send(send_wr(e.IBV_WR_SEND, buf.sge(0, 2000), k))
    wcs = poll(cq, n, deadline, 'the SENDs to the killed peer (a hang)')
    elapsed = time.monotonic() - start
    check([w.wr_id for w in wcs] == list(range(n)), f'completions out of order: {[w.wr_id for w in wcs]}')
    got = [STATUS.get(w.status, w.status) for w in wcs]
    check(got == ['IBV_WC_RETRY_EXC_ERR'] + ['IBV_WC_WR_FLUSH_ERR'] * (n - 1), f'statuses {got}')
    extra = drain(cq)
    check(not extra, f'{len(extra)} completions more than the WRs posted')
    implied = 4.096e-6 * 2 ** a.timeout * (a.retry_cnt + 1)
    return (f'IBV_WC_RETRY_EXC_ERR after {elapsed:.2f} s (timeout {a.timeout}, retry_cnt {a.retry_cnt}: '
            f'IBA implies about {implied:.2f} s), then {n - 1} flushes')


# --- target (malformed flood) ---------------------------------------------------------------

VICTIMS = ('calibrate', 'middle_first', 'last_first', 'bad_rkey', 'reth_beyond_mr', 'reth_beyond_pmtu',
           'oversized', 'write_into_read_only', 'read_beyond_mr', 'atomic_misaligned', 'bad_pad', 'send_no_wqe')
MR_SIZE = 8192


def target(p, a):
    deadline = time.monotonic() + a.deadline
    live, live_cq = p.rc_qp()
    live_buf = Buffer(p.pd, MR_SIZE, fill=0x11)
    live_recv = Buffer(p.pd, 4096, fill=0x22)
    for k in range(4):
        live.post_recv(RecvWR(wr_id=k, num_sge=1, sg=[live_recv.sge(0, 4096)]))
    ud, ud_cq = p.ud_qp()
    # A datagram too long for its WQE completes that WQE with IBV_WC_LOC_LEN_ERR (as mlx5; rxe
    # drops it and keeps the WQE): enough WQEs for the flood's and the real one.
    ud_buf = Buffer(p.pd, 32 * 1024, fill=0x33)
    for k in range(32):
        ud.post_recv(RecvWR(wr_id=k, num_sge=1, sg=[ud_buf.sge(k * 1024, 1024)]))
    victims = []
    for name in VICTIMS:
        qp, cq = p.rc_qp(depth=4)
        buf = Buffer(p.pd, MR_SIZE, fill=0x44)
        if name == 'write_into_read_only':
            buf.mr = MR(p.pd, MR_SIZE, e.IBV_ACCESS_REMOTE_READ, address=buf.addr)
        if name != 'send_no_wqe':
            qp.post_recv(RecvWR(wr_id=7, num_sge=1, sg=[buf.sge(0, 64)]))  # a small receive
        victims.append((name, qp, cq, buf))
    info = {'gid': p.gid, 'live': {'qpn': live.qp_num, 'rkey': live_buf.mr.rkey, 'addr': live_buf.addr,
                                   'size': MR_SIZE},
            'ud': {'qpn': ud.qp_num, 'qkey': QKEY},
            'victims': {n: {'qpn': q.qp_num, 'rkey': b.mr.rkey, 'addr': b.addr, 'size': MR_SIZE}
                        for n, q, _, b in victims}}
    publish(a.dir, 'target', info)
    peer = wait_for(a.dir, 'partner', deadline)
    p.connect_rc(live, peer['qpn'], peer['gid'])
    for _, qp, _, _ in victims:  # connected to a QP number the partner's host does not have
        p.connect_rc(qp, 0xabcde, peer['gid'])
    before = {n: b.snapshot() for n, _, _, b in victims}
    live_before = live_buf.snapshot()
    publish(a.dir, 'target-ready', {})
    wait_for(a.dir, 'flooded', deadline)
    # Nothing of the flood reached a QP's memory: the victims' MRs and guards are as they were,
    # the live QP's too, and no receive completed.
    # 'calibrate' got the one well-formed WRITE of the flood (its bytes prove the flood's
    # headers and ICRC are right, so the other packets are refused for what they mean to test).
    g = Buffer.GUARD
    before['calibrate'] = before['calibrate'][:g] + bytes([0xc7]) * 64 + before['calibrate'][g + 64:]
    for n, _, cq, b in victims:
        check(b.snapshot() == before[n], f'victim {n}: its MR or a guard byte is not as expected')
        wcs = [w for w in drain(cq, 0.01) if w.status == e.IBV_WC_SUCCESS]
        check(not wcs, f'victim {n}: a receive completed successfully')
    check(live_buf.snapshot() == live_before, 'the live QP\'s MR changed during the flood')
    check(not drain(live_cq, 0.01), 'the live QP completed something during the flood')
    ud_flood = drain(ud_cq, 0.01)
    check(all(w.status != e.IBV_WC_SUCCESS for w in ud_flood), 'the UD QP received a malformed datagram')
    publish(a.dir, 'target-checked', {})
    # The real exchange: a SEND, a WRITE, a READ (partner-side check) and a UD datagram.
    [wc] = poll(live_cq, 1, deadline, 'the partner\'s SEND after the flood')
    check(wc.status == e.IBV_WC_SUCCESS and wc.byte_len == 3000 and wc.wr_id == 0,
          f'the SEND after the flood: {STATUS.get(wc.status, wc.status)} byte_len {wc.byte_len}')
    check(live_recv.read(0, 3000) == pattern(5, 3000), 'the SEND after the flood: bytes differ')
    [wc] = poll(ud_cq, 1, deadline, 'the partner\'s UD datagram after the flood')
    check(wc.status == e.IBV_WC_SUCCESS and wc.byte_len == 40 + 500,
          f'the UD datagram after the flood: {STATUS.get(wc.status, wc.status)} byte_len {wc.byte_len}')
    check(ud_buf.read(wc.wr_id * 1024 + 40, 500) == pattern(6, 500), 'the UD datagram after the flood: bytes differ')
    wait_for(a.dir, 'partner-done', deadline)
    check(live_buf.read(100, 5000) == pattern(7, 5000), 'the WRITE after the flood: bytes differ')
    check(live_buf.guards_intact() and live_recv.guards_intact() and ud_buf.guards_intact(), 'a guard byte changed')
    check(not drain(live_cq, 0.1) and not drain(ud_cq, 0.01), 'more completions than the real exchange')
    for n, _, _, b in victims:
        check(b.snapshot() == before[n], f'victim {n}: its MR or a guard byte changed')
    return (f'the flood changed no MR and no guard byte of {len(victims) + 1} RC QPs; '
            'SEND, WRITE, READ and UD exchange completed after it')


def partner(p, a):
    deadline = time.monotonic() + a.deadline
    qp, cq = p.rc_qp()
    ud, ud_cq = p.ud_qp()
    buf = Buffer(p.pd, 16384)
    buf.write(pattern(5, 3000), 0)
    buf.write(pattern(7, 5000), 4096)
    buf.write(pattern(6, 500), 12288)
    publish(a.dir, 'partner', {'qpn': qp.qp_num, 'gid': p.gid})
    t = wait_for(a.dir, 'target', deadline)
    p.connect_rc(qp, t['live']['qpn'], t['gid'])
    wait_for(a.dir, 'target-checked', deadline)
    live = t['live']
    qp.post_send(send_wr(e.IBV_WR_SEND, buf.sge(0, 3000), 1))
    qp.post_send(send_wr(e.IBV_WR_RDMA_WRITE, buf.sge(4096, 5000), 2, rdma=(live['rkey'], live['addr'] + 100)))
    qp.post_send(send_wr(e.IBV_WR_RDMA_READ, buf.sge(9216, 2048), 3, rdma=(live['rkey'], live['addr'] + 6000)))
    wcs = poll(cq, 3, deadline, 'the real exchange after the flood')
    got = [(w.wr_id, STATUS.get(w.status, w.status)) for w in wcs]
    check(got == [(1, 'IBV_WC_SUCCESS'), (2, 'IBV_WC_SUCCESS'), (3, 'IBV_WC_SUCCESS')], f'completions {got}')
    # READ of bytes 6000..8047 of the target's MR: 100..5099 hold our WRITE, the rest its fill.
    check(buf.read(9216, 2048) == bytes([0x11]) * 2048, 'the READ after the flood: bytes differ')
    ah = AH(p.pd, attr=p.ah_attr(t['gid']))
    ud.post_send(send_wr(e.IBV_WR_SEND, buf.sge(12288, 500), 4, ud=(ah, t['ud']['qpn'], QKEY)))
    [wc] = poll(ud_cq, 1, deadline, 'the UD send')
    check(wc.status == e.IBV_WC_SUCCESS, f'the UD send: {STATUS.get(wc.status, wc.status)}')
    publish(a.dir, 'partner-done', {})
    return 'SEND, WRITE, READ and a UD datagram completed after the flood'


MODES = {('stream', 'server'): stream_server, ('stream', 'client'): stream_client,
         ('kill', 'victim'): kill_victim, ('kill', 'survivor'): kill_survivor,
         ('target', 'target'): target, ('target', 'partner'): partner}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('mode', choices=('stream', 'kill', 'target'))
    ap.add_argument('role')
    ap.add_argument('--dir', required=True)
    ap.add_argument('--ip', required=True, help='this namespace\'s address (its GID is used)')
    ap.add_argument('--count', type=int, default=200)
    ap.add_argument('--timeout', type=int, default=14, help='the RC local ACK timeout code')
    ap.add_argument('--retry-cnt', type=int, default=7)
    ap.add_argument('--deadline', type=float, default=40, help='hang guard, seconds')
    a = ap.parse_args()
    try:
        result = MODES[(a.mode, a.role)](Peer(a.ip), a)
    except Failure as ex:
        print(f'{a.mode} {a.role}: FAIL: {ex}', file=sys.stderr, flush=True)
        return 1
    print(f'{a.mode} {a.role}: ok: {result}', flush=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
