"""Tag matching from a RoCE peer (IBV_SRQT_TM; ibv_post_srq_ops(3)): one softverbs peer of
netns_test.sh's tag matching case, pyverbs, Debian's interpreter. Meets its partner through
JSON files as wire_peer.py does (bounded waits; a failure exits non-zero with the reason).

  server  an RC QP on a TM SRQ completing on an extended CQ, tags posted for the client's
          messages: eager messages of one and several packets land after their TMH in their
          tag's buffer (IBV_WC_TM_RECV, TM_MATCH | TM_DATA_VALID, the tag and app_ctx, byte
          for byte, guard bytes intact); an unexpected tag and a NO_TAG message go whole to
          ordinary SRQ receives; a matched RNDV is done as mlx5 hardware does it: the server's
          QP READs the client's buffer over the wire (several READ response packets) into the
          tag's buffer and SENDs the FIN -- IBV_WC_TM_RECV with TM_MATCH, then with
          TM_DATA_VALID and the RVH's len; after a TM sync, an RNDV naming a bad rkey completes
          its tag IBV_WC_REM_ACCESS_ERR, nothing written.
  client  sends those messages over the wire; every SEND completes successfully, once; the
          good RNDV's FIN arrives after its SEND's completion (an IBV_WC_RECV of a TMH of opcode
          FIN with the tag and app_ctx); the bad one's READ is refused at the client (its QP
          enters ERR, as a NIC's responder does) and no FIN comes.
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
SLOT = 8192
RNDV_LEN = 5000  # READ in five response packets at the 1024-byte path MTU
RNDV, BAD_RNDV = 2, 5
# (TMH opcode, tag, app_ctx, payload size after the TMH, posted tag or None)
# (an unexpected message stops matching until the application syncs: the server syncs after it,
# then posts the bad RNDV's tag; that RNDV comes last, as it ends both QPs)
PLAN = ((e.IBV_TMH_EAGER, 0x11, 7, 100, 0x11), (e.IBV_TMH_EAGER, 0x22, 8, 3000, 0x22),
        (e.IBV_TMH_RNDV, 0x33, 10, 16, 0x33), (e.IBV_TMH_EAGER, 0x99, 9, 50, None),
        (e.IBV_TMH_NO_TAG, 0, 0, 40, None), (e.IBV_TMH_RNDV, 0x44, 11, 16, 0x44))


def tmh(opcode, tag, app_ctx):
    return bytes([opcode, 0, 0, 0]) + app_ctx.to_bytes(4, 'big') + tag.to_bytes(8, 'big')


def message(i, rvh=b''):
    op, tag, ctx, size, _ = PLAN[i]
    return tmh(op, tag, ctx) + (rvh if op == e.IBV_TMH_RNDV else pattern(i + 1, size))


def rvh(va, rkey, length):
    """struct ibv_rvh: __be64 va, __be32 rkey, __be32 len."""
    return va.to_bytes(8, 'big') + rkey.to_bytes(4, 'big') + length.to_bytes(4, 'big')


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


def add_tag(srq, cq, tags, i, deadline):
    srq.post_srq_ops(OpsWr(wr_id=i, opcode=e.IBV_WR_TAG_ADD, flags=e.IBV_OPS_SIGNALED, recv_wr_id=i,
                           num_sge=1, tag=PLAN[i][4], mask=0xffffffffffffffff, sg_list=[tags.sge(i * SLOT, SLOT)]))
    wc = poll_ex(cq, deadline)
    check((wc['opcode'], wc['status']) == (e.IBV_WC_TM_ADD, e.IBV_WC_SUCCESS), f'TAG_ADD {i}: {wc}')


def sync(srq, cq, count, deadline):
    """IBV_OPS_TM_SYNC: the application has handled `count` unexpected messages; matching resumes."""
    srq.post_srq_ops(OpsWr(wr_id=0x200, opcode=e.IBV_WR_TAG_SYNC, flags=e.IBV_OPS_SIGNALED | e.IBV_OPS_TM_SYNC,
                           unexpected_cnt=count))
    wc = poll_ex(cq, deadline)
    check((wc['opcode'], wc['status']) == (e.IBV_WC_TM_SYNC, e.IBV_WC_SUCCESS), f'TAG_SYNC: {wc}')


def check_rndv(cq, tags, i, deadline):
    """mlx5's two completions of a rendezvous the hardware (here the QP's requester) READs."""
    _, tag, ctx, _, _ = PLAN[i]
    wc = poll_ex(cq, deadline)
    want = dict(wr_id=i, status=e.IBV_WC_SUCCESS, opcode=e.IBV_WC_TM_RECV, flags=e.IBV_WC_TM_MATCH, byte_len=0,
                tag=tag, priv=ctx)
    check(wc == want, f'RNDV {i}, first completion: {wc}, expected {want}')
    wc = poll_ex(cq, deadline)
    if i == RNDV:
        want = dict(wr_id=i, status=e.IBV_WC_SUCCESS, opcode=e.IBV_WC_TM_RECV, flags=e.IBV_WC_TM_DATA_VALID,
                    byte_len=RNDV_LEN, tag=0, priv=0)
        check(wc == want, f'RNDV {i}, second completion: {wc}, expected {want}')
        check(tags.read(i * SLOT, RNDV_LEN) == pattern(0x40, RNDV_LEN), f'RNDV {i}: the READ bytes differ')
        check(tags.read(i * SLOT + RNDV_LEN, 64) == bytes(64), f'RNDV {i}: written beyond the RVH len')
    else:
        check((wc['wr_id'], wc['status']) == (i, e.IBV_WC_REM_ACCESS_ERR),
              f'RNDV {i} with a bad rkey: {wc}, expected IBV_WC_REM_ACCESS_ERR')
        check(tags.read(i * SLOT, SLOT) == bytes(SLOT), f'RNDV {i} with a bad rkey wrote its tag buffer')


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
        if posted is not None and i != BAD_RNDV:
            add_tag(srq, cq, tags, i, deadline)
    publish(a.dir, 'server', {'qpn': qp.qp_num, 'gid': p.gid})
    peer = wait_for(a.dir, 'client', deadline)
    p.connect_rc(qp, peer['qpn'], peer['gid'])
    publish(a.dir, 'server-ready', {})
    plain_k = 0
    for i, (op, tag, ctx, size, posted) in enumerate(PLAN):
        if i == BAD_RNDV:
            sync(srq, cq, 1, deadline)  # the unexpected message above was seen
            add_tag(srq, cq, tags, i, deadline)
            publish(a.dir, 'server-synced', {})
        if op == e.IBV_TMH_RNDV:
            check_rndv(cq, tags, i, deadline)
            continue
        wc = poll_ex(cq, deadline)
        body = pattern(i + 1, size)
        if posted is not None:
            want = dict(wr_id=i, status=e.IBV_WC_SUCCESS, opcode=e.IBV_WC_TM_RECV,
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
    return (f'{len(PLAN)} tagged messages from the RoCE peer completed as mlx5 completes them, byte for byte '
            f'(a {RNDV_LEN}-byte rendezvous READ over the wire, a bad rkey refused)')


def client(p, a):
    deadline = time.monotonic() + a.deadline
    qp, cq = p.rc_qp(depth=16)
    src = Buffer(p.pd, SLOT * len(PLAN))
    fin = Buffer(p.pd, SLOT)
    data = Buffer(p.pd, RNDV_LEN)  # what the server's QP READs
    data.write(pattern(0x40, RNDV_LEN))
    publish(a.dir, 'client', {'qpn': qp.qp_num, 'gid': p.gid})
    peer = wait_for(a.dir, 'server', deadline)
    qp.post_recv(RecvWR(wr_id=0x300, num_sge=1, sg=[fin.sge(0, SLOT)]))  # for the FIN
    p.connect_rc(qp, peer['qpn'], peer['gid'])
    wait_for(a.dir, 'server-ready', deadline)
    for i, (op, tag, ctx, _, _) in enumerate(PLAN):
        if i == BAD_RNDV:
            wait_for(a.dir, 'server-synced', deadline)
        rkey = data.mr.rkey if i == RNDV else data.mr.rkey ^ 0x5a5a00
        m = message(i, rvh(data.addr, rkey, RNDV_LEN))
        src.write(m, i * SLOT)
        qp.post_send(send_wr(e.IBV_WR_SEND, src.sge(i * SLOT, len(m)), i))
        [wc] = poll(cq, 1, deadline, f'SEND {i}')
        check(wc.status == e.IBV_WC_SUCCESS and wc.wr_id == i and wc.opcode == e.IBV_WC_SEND,
              f'SEND {i}: {STATUS.get(wc.status, wc.status)} wr_id {wc.wr_id}')
        if i == RNDV:  # the FIN, after the SEND's completion (mlx5's order)
            [wc] = poll(cq, 1, deadline, 'the rendezvous FIN')
            check((wc.status, wc.opcode, wc.wr_id, wc.byte_len) == (e.IBV_WC_SUCCESS, e.IBV_WC_RECV, 0x300, TMH),
                  f'FIN: {STATUS.get(wc.status, wc.status)} opcode {wc.opcode} wr_id {wc.wr_id} len {wc.byte_len}')
            check(fin.read(0, TMH) == tmh(e.IBV_TMH_FIN, tag, ctx), f'FIN bytes {fin.read(0, TMH).hex()}')
    wait_for(a.dir, 'server-done', deadline)
    # The bad rkey's READ was refused here: this QP's responder entered ERR, as a NIC's does.
    state = qp.query(e.IBV_QP_STATE)[0].qp_state
    check(state == e.IBV_QPS_ERR, f'after the refused READ the QP is in state {state}, not ERR')
    extra = drain(cq, 0.1)
    check(not extra, f'{len(extra)} completions more than the SENDs posted and the FIN')
    check(src.guards_intact() and fin.guards_intact() and data.guards_intact(), 'a guard byte changed')
    return f'{len(PLAN)} SENDs completed once each, the rendezvous FIN received after its SEND'


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
