#include "transport/host/xrc_target.h"

#include "base/event_fd.h"
#include "base/log.h"
#include "transport/codes.h"
#include "transport/responder.h"

namespace softverbs::transport {
namespace {

using qp_type::kRc, qp_type::kXrcRecv;

// Moves the XRC_RECV QP to ERR (IBA 9.9.3: a responder error; its state is shared by all its
// handles: core/xrc_qp.h), and tells its creator and every context holding an ibv_open_qp handle
// of it, each of which reports IBV_EVENT_QP_ACCESS_ERR.
void FailQp(fabric::LocalProcess& local, const HostTarget& qp) {
  using qp_state::kReset, qp_state::kErr;
  QpEndpoint& e = qp.endpoint();
  {
    fabric::RobustLock lock(e.xrc_lock);
    const uint32_t state = e.state.load(std::memory_order_acquire);
    if (state != kReset && state != kErr) e.state.store(kErr, std::memory_order_release);
  }
  e.xrc_errors.fetch_add(1, std::memory_order_acq_rel);
  if (e.async_fd >= 0) qp.Signal(e.async_fd, e.async_tag);
  for (XrcOpener& o : e.xrc_openers) {
    const uint32_t p = o.process.load(std::memory_order_acquire);
    if (p == 0 || p == kXrcOpenerClaimed) continue;
    if (p - 1 == local.slot()) {
      EventFd::SignalFd(o.async_fd);
      continue;
    }
    auto peer = local.PeerAt(p - 1);
    if (!peer.ok()) continue;  // (a dead opener hears nothing)
    if (auto fd = (*peer)->process().BorrowFd(o.async_fd, o.async_tag); fd.ok()) EventFd::SignalFd(*fd);
  }
}

}  // namespace

XrcTarget::XrcTarget(const HostTarget& qp, const HostTarget& srq) : qp_(qp), srq_(srq) {
  const QpEndpoint& q = qp.endpoint();
  const QpEndpoint& s = srq.endpoint();
  // The QP's half: whether and what it receives.
  view_.state.store(q.state.load(std::memory_order_acquire), std::memory_order_relaxed);
  view_.qp_num = q.qp_num;  // receive completions name the XRC_RECV QP
  view_.type = kRc;         // the responder runs RC's rules
  view_.xrc_view = 1;
  view_.access = q.access;
  view_.mtu = q.mtu;
  view_.max_dest_rd_atomic = q.max_dest_rd_atomic;
  view_.min_rnr_timer = q.min_rnr_timer;
  view_.xrcd_dev = q.xrcd_dev;
  view_.xrcd_ino = q.xrcd_ino;
  // The SRQ's half: the PD keys are checked against (IBA A14.4.2), the queue and the CQ.
  view_.pd = s.pd;
  view_.recv_cq = s.recv_cq;
  view_.recv_queue = s.recv_queue;
  view_.has_srq = 1;
  view_.async_fd = -1;  // errors go to the QP's owner (ForwardError)
}

Reply XrcTarget::Execute(fabric::LocalProcess& local, const HostTarget& qp, const Request& r) {
  const QpEndpoint& e = qp.endpoint();
  const uint32_t state = e.state.load(std::memory_order_acquire);
  // Only an XRC_RECV QP takes XRC messages, and only while it receives (IBA 10.3.1); any other
  // QP discards them as a packet of another transport.
  if (e.type != kXrcRecv || state < 2 || state > 5) return Reply::Of(ReplyCode::kNoAnswer);
  auto srq = HostTarget::FindXrcSrq(local, r.xrc_srqn);
  if (!srq.ok() || srq->endpoint().xrcd_dev != e.xrcd_dev || srq->endpoint().xrcd_ino != e.xrcd_ino) {
    // IBA A14: the SRQ an XRCETH names must be an XRC SRQ of the target QP's domain; anything
    // else is an invalid request (the initiator completes with IBV_WC_REM_INV_REQ_ERR) and a
    // responder error of the target QP.
    SV_LOG(kError, "XRC message to qp 0x%x: SRQ 0x%x %s: NAK invalid request (IBA A14)", e.qp_num, r.xrc_srqn,
           srq.ok() ? "belongs to another XRC domain" : "is not an XRC SRQ of this host");
    FailQp(local, qp);
    return Reply::Of(ReplyCode::kInvalidRequest);
  }
  XrcTarget view(qp, *srq);
  const Reply reply = Responder::Execute(view, r);
  if (view.view_.remote_error.load(std::memory_order_acquire) != 0) FailQp(local, qp);
  return reply;
}

}  // namespace softverbs::transport
