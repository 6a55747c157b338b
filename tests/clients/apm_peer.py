"""One peer of the path migration test across network namespaces (netns_apm_test.sh; pyverbs).

Two namespaces are joined by two veth pairs: the primary path (first pair) and the alternate
(second pair). The client's RC QP is connected over the primary path and armed with the
alternate one (IBV_QP_ALT_PATH, path_mig_state REARM: IBA 17.2.8); after a first RDMA WRITE the
test takes the primary link down; the WRITEs that follow must complete successfully on the
alternate path, IBV_EVENT_PATH_MIG must arrive and ibv_query_qp must report MIGRATED with the
alternate path as primary. The server checks that every byte arrived. Rendezvous through JSON
files (wire_peer.py's); every wait is bounded by --deadline.
"""
import argparse
import ipaddress
import os
import signal
import sys
import time

import pyverbs.enums as e
from pyverbs.addr import AHAttr, GID, GlobalRoute
from pyverbs.qp import QPAttr

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wire_peer import Buffer, Failure, Peer, PORT, check, pattern, poll, publish, send_wr, wait_for  # noqa: E402

CHUNK = 4096
CHUNKS = 8  # one before the link goes down, seven after


def gid_of(ipv4):
    """The GID of an IPv4 address (::ffff:a.b.c.d) in the form pyverbs' GID() takes."""
    raw = ipaddress.IPv6Address('::ffff:' + ipv4).packed
    return ':'.join(raw[i:i + 2].hex() for i in range(0, 16, 2))


def server(p, a):
    qp, _ = p.rc_qp()
    buf = Buffer(p.pd, CHUNK * CHUNKS)
    publish(a.dir, 'server', {'qpn': qp.qp_num, 'gid': p.gid, 'rkey': buf.mr.rkey, 'addr': buf.addr})
    peer = wait_for(a.dir, 'client', time.monotonic() + a.deadline)
    p.connect_rc(qp, peer['qpn'], peer['gid'])
    wait_for(a.dir, 'done', time.monotonic() + a.deadline)
    for i in range(CHUNKS):
        check(buf.read(i * CHUNK, CHUNK) == pattern(i, CHUNK), f'chunk {i} did not arrive byte-exact')
    check(buf.guards_intact(), 'a byte outside the MR changed')
    return f'{CHUNKS} chunks byte-exact'


def client(p, a):
    alt_index = p.find_gid(a.alt_ip)
    qp, cq = p.rc_qp()
    buf = Buffer(p.pd, CHUNK * CHUNKS)
    for i in range(CHUNKS):
        buf.write(pattern(i, CHUNK), i * CHUNK)
    publish(a.dir, 'client', {'qpn': qp.qp_num, 'gid': p.gid})
    peer = wait_for(a.dir, 'server', time.monotonic() + a.deadline)
    # timeout 12 (16 ms) x retry_cnt 2: the primary path is given up after about 50 ms.
    p.connect_rc(qp, peer['qpn'], peer['gid'], timeout=12, retry_cnt=2)
    arm = QPAttr()
    arm.alt_ah_attr = AHAttr(port_num=PORT, is_global=1,
                             gr=GlobalRoute(dgid=GID(gid_of(a.peer_alt_ip)), sgid_index=alt_index, hop_limit=64))
    arm.alt_port_num, arm.alt_pkey_index, arm.alt_timeout = PORT, 0, 14
    arm.path_mig_state = e.IBV_MIG_REARM
    qp.modify(arm, e.IBV_QP_ALT_PATH | e.IBV_QP_PATH_MIG_STATE)
    check(qp.query(e.IBV_QP_PATH_MIG_STATE)[0].path_mig_state == e.IBV_MIG_ARMED, 'not ARMED after REARM')
    rdma = lambda i: (peer['rkey'], peer['addr'] + i * CHUNK)  # noqa: E731
    qp.post_send(send_wr(e.IBV_WR_RDMA_WRITE, buf.sge(0, CHUNK), 0, rdma=rdma(0)))
    wc = poll(cq, 1, time.monotonic() + a.deadline, 'the WRITE on the primary path')[0]
    check(wc.status == e.IBV_WC_SUCCESS, f'the WRITE on the primary path: status {wc.status}')
    publish(a.dir, 'armed', {})
    wait_for(a.dir, 'cut', time.monotonic() + a.deadline)  # the primary link is down now
    for i in range(1, CHUNKS):
        qp.post_send(send_wr(e.IBV_WR_RDMA_WRITE, buf.sge(i * CHUNK, CHUNK), i, rdma=rdma(i)))
    wcs = poll(cq, CHUNKS - 1, time.monotonic() + a.deadline, 'the WRITEs after the cut')
    check([w.status for w in wcs] == [e.IBV_WC_SUCCESS] * (CHUNKS - 1),
          f'WRITEs after the cut: statuses {[w.status for w in wcs]}')
    check([w.wr_id for w in wcs] == list(range(1, CHUNKS)), 'completions out of order')
    signal.alarm(int(a.deadline))  # default action ends the process if no event comes
    ev = p.ctx.get_async_event()
    signal.alarm(0)
    check(ev.event_type == e.IBV_EVENT_PATH_MIG, f'async event {ev.event_type}, not IBV_EVENT_PATH_MIG')
    ev.ack()
    q = qp.query(e.IBV_QP_PATH_MIG_STATE | e.IBV_QP_AV)[0]
    check(q.path_mig_state == e.IBV_MIG_MIGRATED, f'path_mig_state {q.path_mig_state} after the migration')
    check(q.ah_attr.sgid_index == alt_index, 'the alternate path is not the primary one')
    publish(a.dir, 'done', {})
    return f'{CHUNKS - 1} WRITEs completed on the alternate path, IBV_EVENT_PATH_MIG, MIGRATED'


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('role', choices=('server', 'client'))
    ap.add_argument('--dir', required=True)
    ap.add_argument('--ip', required=True, help="this namespace's primary address")
    ap.add_argument('--alt-ip', help="client: this namespace's alternate address")
    ap.add_argument('--peer-alt-ip', help="client: the server's alternate address")
    ap.add_argument('--deadline', type=float, default=20, help='hang guard, seconds')
    a = ap.parse_args()
    try:
        result = (server if a.role == 'server' else client)(Peer(a.ip), a)
    except Failure as ex:
        print(f'apm {a.role}: FAIL: {ex}', file=sys.stderr, flush=True)
        return 1
    print(f'apm {a.role}: ok: {result}', flush=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
