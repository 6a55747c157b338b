// The responder's side of a tag matching rendezvous from another host (transport/rendezvous.h):
// the RNDV message's first packet decides, its end completes the tag's first half and hands the
// READ to the QP's owner.
#include <algorithm>
#include <cstring>

#include "base/log.h"
#include "transport/codes.h"
#include "transport/responder.h"

namespace softverbs::transport {

uint32_t Responder::RendezvousMode(const TargetQp& t, const Request& r, ReceiveTm* tm) {
  // The TMH and the RVH, from the first packet (a READ of the sender's buffer needs all of it).
  uint8_t head[kTmhBytes + kRvhBytes];
  uint32_t got = 0;
  for (size_t i = 0; i < r.local_count && got < sizeof(head); ++i) {
    const uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(r.local[i].iov_len, sizeof(head) - got));
    memcpy(head + got, r.local[i].iov_base, n);
    got += n;
  }
  // Without an RVH, or where this process cannot send for the QP, the READ is the
  // application's (mlx5's software rendezvous, CONSUMED_MSG_SW_RNDV).
  if (got < sizeof(head) || !RendezvousReady(t.endpoint().qp_num)) return ReceiveTm::kRndvSoftware;
  RendezvousRead rvh;
  ParseRvh(head, &rvh);
  tm->rvh_va = rvh.va;
  tm->rvh_rkey = rvh.rkey;
  tm->rvh_len = rvh.len;
  return ReceiveTm::kRndvRead;
}

Reply Responder::ReceiveRendezvous(const TargetQp& t, const TakenWqe& w, const Request& r, const ReceiveTm& tm,
                                   RendezvousRead* rndv) {
  // mlx5 (cq.c): a first completion when the tag is consumed (IBV_WC_TM_MATCH, with the TMH's
  // tag and app_ctx), as on the same host (Responder::Rendezvous).
  Completion c;
  c.wr_id = w.wr_id;
  c.qp_num = t.endpoint().qp_num;
  c.src_qp = r.src_qp;
  c.opcode = wc_opcode::kTmRecv;
  c.wc_flags = wc_flag::kTmMatch;
  c.solicited = r.solicited;
  const TmInfo info{tm.tag, tm.app_ctx};
  CompleteAt(t, c, &info);
  const uint64_t room = w.num_sge > 0 ? w.sge[0].length : 0;
  if (tm.rvh_len > room) {
    // As on the same host: nothing is read, the tag completes IBV_WC_LOC_LEN_ERR, the QP enters ERR.
    SV_LOG(kError, "tag matching rendezvous at qp 0x%x (tag 0x%llx): the RVH's len %u exceeds the tag's %llu-byte "
           "buffer: IBV_WC_LOC_LEN_ERR", c.qp_num, static_cast<unsigned long long>(tm.tag), tm.rvh_len,
           static_cast<unsigned long long>(room));
    c.wc_flags = 0;
    FailAt(t, c, wc_status::kLocLenErr);
    return Reply::Of(ReplyCode::kAck);
  }
  RendezvousRead read;
  read.qp_num = c.qp_num;
  read.src_qp = r.src_qp;
  read.tag = tm.tag;
  read.app_ctx = tm.app_ctx;
  read.wr_id = w.wr_id;
  read.buffer = {w.sge[0].addr, w.sge[0].length, w.sge[0].lkey};
  read.va = tm.rvh_va;
  read.rkey = tm.rvh_rkey;
  read.len = tm.rvh_len;
  if (rndv != nullptr) {
    *rndv = read;
  } else {
    StartRendezvous(t, read);
  }
  return Reply::Of(ReplyCode::kAck);
}

void Responder::StartRendezvous(const TargetQp& t, const RendezvousRead& rndv) {
  if (IssueRendezvous(rndv)) return;
  SV_LOG(kError, "tag matching rendezvous at qp 0x%x (tag 0x%llx): the QP's send queue did not take the READ "
         "(not in RTS, or full): IBV_WC_LOC_QP_OP_ERR", rndv.qp_num, static_cast<unsigned long long>(rndv.tag));
  FailAt(t, RendezvousCompletion(rndv, wc_status::kLocQpOpErr), wc_status::kLocQpOpErr);
}

}  // namespace softverbs::transport
