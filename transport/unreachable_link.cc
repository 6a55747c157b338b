#include "transport/unreachable_link.h"

#include <arpa/inet.h>

#include "base/log.h"

namespace softverbs::transport {
namespace {

constexpr uint32_t kRc = 2;

}  // namespace

void UnreachableLink::Explain(const Request& r) {
  if (explained_.exchange(true)) return;
  char gid[INET6_ADDRSTRLEN] = "?";
  if (r.addressing != nullptr) inet_ntop(AF_INET6, r.addressing->dgid, gid, sizeof gid);
  SV_LOG(kError, "ibv_post_send(qp 0x%x): destination GID %s (QP 0x%x) is not an address of this host, and %s: "
         "%s", r.src_qp, gid, r.dest_qp, why_,
         r.qp_type == kRc ? "nothing answers (IBV_WC_RETRY_EXC_ERR once retry_cnt is spent)" : "its messages are lost");
}

Reply UnreachableLink::Carry(const Request& r) {
  Explain(r);
  return Reply::Of(r.qp_type == kRc ? ReplyCode::kNoAnswer : ReplyCode::kDropped);
}

void UnreachableLink::CarryMulticast(const Request& r, uint32_t) { Explain(r); }

}  // namespace softverbs::transport
