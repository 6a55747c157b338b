#include "transport/host/host_link.h"

#include "transport/codes.h"
#include "transport/grh.h"
#include "transport/host/xrc_target.h"
#include "transport/mcast_table.h"
#include "transport/responder.h"

namespace softverbs::transport {
namespace {

using qp_type::kRc, qp_type::kUd;

}  // namespace

Reply HostLink::Carry(const Request& r) {
  if (Reply reply; route_.Carry(r, &reply)) return reply;
  std::optional<HostTarget> target = route_.HeldTarget(r);
  if (!target) {
    auto found = HostTarget::Find(local_, r.dest_qp, &hint_);
    // No such QP: nobody answers (IBA 9.6.1.1 / C9-54: a packet for an unknown QP is discarded).
    if (!found.ok()) return Reply::Of(r.qp_type == kRc ? ReplyCode::kNoAnswer : ReplyCode::kDropped);
    target.emplace(std::move(found.value()));
  }
  target->KeepReceiveKeysIn(&hint_.receive_keys);  // a SEND's receive buffers' keys, kept (receive_keys.h)
  if (r.xrc) return XrcTarget::Execute(local_, *target, r);  // its SRQ receives it (host/xrc_target.h)
  if (r.qp_type != kUd || r.addressing == nullptr) {
    const Reply reply = Responder::Execute(*target, r);
    if (reply.code == ReplyCode::kAck) route_.Learn(r, hint_);
    return reply;
  }
  uint8_t grh[kGrhBytes];
  BuildGrh(grh, *r.addressing, static_cast<uint32_t>(r.length));
  return Responder::Execute(*target, r, grh);
}

void HostLink::CarryMulticast(const Request& r, uint32_t skip_qp) {
  // IBA 10.5 / 9.6.1.1: a multicast datagram carries the multicast QPN and reaches every QP
  // attached to the group; any other destination QPN on a multicast GID is dropped.
  if (r.dest_qp != kMulticastQpn || r.addressing == nullptr) return;
  uint8_t grh[kGrhBytes];
  BuildGrh(grh, *r.addressing, static_cast<uint32_t>(r.length));
  ForEachMcastMember(local_.registry(), r.addressing->dgid, [&](uint32_t qpn) {
    if (qpn == skip_qp) return;
    auto target = HostTarget::Find(local_, qpn);
    if (!target.ok()) return;
    Responder::Execute(*target, r, grh);  // a member of another transport type discards it
  });
}

}  // namespace softverbs::transport
