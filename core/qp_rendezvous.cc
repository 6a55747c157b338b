// The receiving QP's part of a tag matching rendezvous from another host (transport/rendezvous.h):
// mlx5 hardware READs the sender's buffer on the QP that took the RNDV message, so here the QP's
// own requester does, with an internal work request that completes on the receive CQ.
#include "base/log.h"
#include "core/qp.h"

namespace softverbs::core {

bool Qp::IssuesRendezvous() const {
  // Tag matching is offered to RC (tm_caps.flags IBV_TM_CAP_RC) through a TM SRQ.
  return init_.type == QpType::kRc && init_.dc.role == DcRole::kNone && init_.srq != nullptr && init_.srq->is_tm();
}

bool Qp::CanIssueRendezvous() const {
  // (Called under the packet state's lock of the QP: the state word only, never mu_.)
  return state_.load(std::memory_order_acquire) == static_cast<uint32_t>(QpState::kRts);
}

bool Qp::IssueRendezvous(const transport::RendezvousRead& read) {
  // The tag's second completion goes where its first went: the QP's receive CQ. A full CQ loses
  // it, as any completion (IBA 11.6.2).
  Cq* cq = init_.recv_cq;
  transport::SendWr wr = transport::RendezvousReadWr(read, [cq](const transport::Completion& c) {
    if (!cq->Push(c)) cq->ReportOverrun();
  });
  const Status s = sq_->Post(wr, state_.load(std::memory_order_acquire));
  if (!s.ok())
    SV_LOG(kError, "tag matching rendezvous at qp 0x%x: the READ was refused: %s", qpn_, s.rule().c_str());
  return s.ok();
}

}  // namespace softverbs::core
