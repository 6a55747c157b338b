"""Tag matching from a RoCE peer (IBV_SRQT_TM; ibv_post_srq_ops(3)): one softverbs peer of
netns_test.sh's tag matching case, pyverbs, Debian's interpreter. Meets its partner through
JSON files as wire_peer.py does (bounded waits; a failure exits non-zero with the reason).

  server  an RC QP on a TM SRQ completing on an extended CQ, tags posted for the client's
          messages: eager messages of one and several packets land after their TMH in their
          tag's buffer (IBV_WC_TM_RECV, TM_MATCH | TM_DATA_VALID, the tag and app_ctx, byte
          for byte, guard bytes intact); an unexpected tag and a NO_TAG message go whole to
          ordinary SRQ receives; a matched RNDV completes IBV_WC_TM_RNDV_INCOMPLETE (mlx5's
          software rendezvous: the READ is left to the application) with the bytes after the TMH.
  client  sends those messages over the wire; every SEND completes successfully, once.
"""
import sys
import time

import pyverbs.enums as e
from pyverbs.cq import CQEX, CqInitAttrEx, PollCqAttr
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.srq import SRQ, OpsWr, SrqInitAttrEx
from pyverbs.wr import RecvWR

from wire_peer import (ACCESS, PORT, STATUS, Buffer, Failure, Peer, check, drain, pattern, poll, publish,
                       send_wr, wait_for)

TMH = 16
SLOT = 4096
# (TMH opcode, tag, app_ctx, payload size after the TMH, posted tag or None)
# (an unexpected message stops matching until the application syncs: it comes after the tags)
PLAN = ((e.IBV_TMH_EAGER, 0x11, 7, 100, 0x11), (e.IBV_TMH_EAGER, 0x22, 8, 3000, 0x22),
        (e.IBV_TMH_RNDV, 0x33, 10, 32, 0x33), (e.IBV_TMH_EAGER, 0x99, 9, 50, None),
        (e.IBV_TMH_NO_TAG, 0, 0, 40, None))


def tmh(opcode, tag, app_ctx):
    return bytes([opcode, 0, 0, 0]) + app_ctx.to_bytes(4, 'big') + tag.to_bytes(8, 'big')


def message(i):
    op, tag, ctx, size, _ = PLAN[i]
    return tmh(op, tag, ctx) + pattern(i + 1, size)


def poll_ex(cq, deadline):
    attr = PollCqAttr()
    while cq.start_poll(attr) != 0:
        if time.monotonic() > deadline:
            raise Failure('no completion on the TM CQ before the deadline')
        time.sleep(0.0005)
    info = cq.read_tm_info()
    wc = dict(wr_id=cq.wr_id, status=cq.status, opcode=cq.read_opcode(), flags=cq.read_wc_flags() & 0x70,
              byte_len=cq.read_byte_len(), tag=info.tag, priv=info.priv)
    cq.end_poll()
    return wc


def server(p, a):
    deadline = time.monotonic() + a.deadline
    cq = CQEX(p.ctx, CqInitAttrEx(cqe=64, wc_flags=e.IBV_WC_EX_WITH_TM_INFO | e.IBV_WC_STANDARD_FLAGS))
    sa = SrqInitAttrEx(max_wr=16, max_sge=1)
    sa.comp_mask = (e.IBV_SRQ_INIT_ATTR_TYPE | e.IBV_SRQ_INIT_ATTR_PD | e.IBV_SRQ_INIT_ATTR_CQ |
                    e.IBV_SRQ_INIT_ATTR_TM)
    sa.srq_type, sa.pd, sa.cq, sa.max_num_tags, sa.max_ops = e.IBV_SRQT_TM, p.pd, cq, 8, 16
    srq = SRQ(p.ctx, sa)
    qp = QP(p.pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, srq=srq,
                             cap=QPCap(max_send_wr=4, max_send_sge=1, max_recv_wr=0, max_recv_sge=0)))
    attr = QPAttr(qp_state=e.IBV_QPS_INIT)
    attr.pkey_index, attr.port_num, attr.qp_access_flags = 0, PORT, ACCESS
    qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS)
    tags = Buffer(p.pd, SLOT * len(PLAN))
    plain = Buffer(p.pd, SLOT * 2)
    for k in range(2):
        srq.post_recv(RecvWR(wr_id=0x100 + k, num_sge=1, sg=[plain.sge(k * SLOT, SLOT)]))
    for i, (_, _, _, _, posted) in enumerate(PLAN):
        if posted is not None:
            srq.post_srq_ops(OpsWr(wr_id=i, opcode=e.IBV_WR_TAG_ADD, flags=e.IBV_OPS_SIGNALED, recv_wr_id=i,
                                   num_sge=1, tag=posted, mask=0xffffffffffffffff,
                                   sg_list=[tags.sge(i * SLOT, SLOT)]))
            wc = poll_ex(cq, deadline)
            check((wc['opcode'], wc['status']) == (e.IBV_WC_TM_ADD, e.IBV_WC_SUCCESS), f'TAG_ADD {i}: {wc}')
    publish(a.dir, 'server', {'qpn': qp.qp_num, 'gid': p.gid})
    peer = wait_for(a.dir, 'client', deadline)
    p.connect_rc(qp, peer['qpn'], peer['gid'])
    publish(a.dir, 'server-ready', {})
    plain_k = 0
    for i, (op, tag, ctx, size, posted) in enumerate(PLAN):
        wc = poll_ex(cq, deadline)
        body = pattern(i + 1, size)
        if posted is not None:
            status = e.IBV_WC_TM_RNDV_INCOMPLETE if op == e.IBV_TMH_RNDV else e.IBV_WC_SUCCESS
            want = dict(wr_id=i, status=status, opcode=e.IBV_WC_TM_RECV,
                        flags=e.IBV_WC_TM_MATCH | e.IBV_WC_TM_DATA_VALID, byte_len=size, tag=tag, priv=ctx)
            check(wc == want, f'message {i} (tag 0x{tag:x}): {wc}, expected {want}')
            check(tags.read(i * SLOT, size) == body, f'message {i}: bytes differ in the tag buffer')
            check(tags.read(i * SLOT + size, 64) == bytes(64), f'message {i}: written beyond its bytes')
        else:
            opcode = e.IBV_WC_TM_NO_TAG if op == e.IBV_TMH_NO_TAG else e.IBV_WC_TM_RECV
            want = dict(wr_id=0x100 + plain_k, status=e.IBV_WC_SUCCESS, opcode=opcode, flags=0,
                        byte_len=TMH + size, tag=0, priv=0)
            check(wc == want, f'message {i} (unmatched): {wc}, expected {want}')
            check(plain.read(plain_k * SLOT, TMH + size) == message(i), f'message {i}: bytes differ in the SRQ buffer')
            plain_k += 1
    check(tags.guards_intact() and plain.guards_intact(), 'a guard byte changed')
    publish(a.dir, 'server-done', {})
    return f'{len(PLAN)} tagged messages from the RoCE peer completed as mlx5 completes them, byte for byte'


def client(p, a):
    deadline = time.monotonic() + a.deadline
    qp, cq = p.rc_qp(depth=16)
    src = Buffer(p.pd, SLOT * len(PLAN))
    publish(a.dir, 'client', {'qpn': qp.qp_num, 'gid': p.gid})
    peer = wait_for(a.dir, 'server', deadline)
    p.connect_rc(qp, peer['qpn'], peer['gid'])
    wait_for(a.dir, 'server-ready', deadline)
    for i in range(len(PLAN)):
        m = message(i)
        src.write(m, i * SLOT)
        qp.post_send(send_wr(e.IBV_WR_SEND, src.sge(i * SLOT, len(m)), i))
        [wc] = poll(cq, 1, deadline, f'SEND {i}')
        check(wc.status == e.IBV_WC_SUCCESS and wc.wr_id == i, f'SEND {i}: {STATUS.get(wc.status, wc.status)}')
    wait_for(a.dir, 'server-done', deadline)
    extra = drain(cq, 0.1)
    check(not extra, f'{len(extra)} completions more than the SENDs posted')
    return f'{len(PLAN)} SENDs completed once each'


def main():
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument('role', choices=('server', 'client'))
    ap.add_argument('--dir', required=True)
    ap.add_argument('--ip', required=True)
    ap.add_argument('--deadline', type=float, default=20)
    a = ap.parse_args()
    try:
        result = (server if a.role == 'server' else client)(Peer(a.ip), a)
    except Failure as ex:
        print(f'tm {a.role}: FAIL: {ex}', file=sys.stderr, flush=True)
        return 1
    print(f'tm {a.role}: ok: {result}', flush=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
