// The destination of one XRC message on the same host (IBA annex A14): the XRC_RECV QP it is
// addressed to decides whether it is received (state, access flags, responder resources, RNR
// timer), and the XRC SRQ its XRCETH names receives it (its PD checks the keys, its receive
// queue and CQ take the receive, its owner's memory holds the bytes). The two may belong to
// different processes of the host: the responder works on a view joining them.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "transport/host/host_target.h"
#include "transport/request.h"
#include "transport/target_qp.h"

namespace softverbs::transport {

class XrcTarget final : public TargetQp {
 public:
  XrcTarget(const HostTarget& qp, const HostTarget& srq);

  // Finds the SRQ `r` names and runs the responder on the view; NAK invalid request (and the
  // target QP to ERR) when there is no such XRC SRQ or it belongs to another XRC domain.
  static Reply Execute(fabric::LocalProcess& local, const HostTarget& qp, const Request& r);

  QpEndpoint& endpoint() const override { return view_; }
  uint32_t process_slot() const override { return srq_.process_slot(); }
  fabric::HostRegistry& registry() const override { return srq_.registry(); }
  void* Resolve(fabric::SharedRef ref) const override { return srq_.Resolve(ref); }
  Status Move(bool write, const iovec* local, size_t nl, const PinnedPieces& remote) const override {
    return srq_.Move(write, local, nl, remote);
  }
  Result<uint64_t> AtomicUpdate(const PinnedPieces& remote, uint64_t (*op)(uint64_t, const void*),
                                const void* arg) const override {
    return srq_.AtomicUpdate(remote, op, arg);
  }
  void Signal(int fd, uint64_t tag) const override { srq_.Signal(fd, tag); }
  bool IsAlive() const override { return qp_.IsAlive() && srq_.IsAlive(); }
  bool LandsInCompletion() const override { return srq_.LandsInCompletion(); }

 private:
  const HostTarget& qp_;
  const HostTarget& srq_;
  mutable QpEndpoint view_{};  // a responder error raised on it moves the XRC_RECV QP to ERR
};

}  // namespace softverbs::transport
