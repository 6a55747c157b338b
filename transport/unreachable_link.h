// The Link for destinations this process cannot reach: a GID that is not one of this host's
// while no wire fabric is available to carry RoCEv2 packets to it. Like a NIC sending into a
// network where nobody answers: RC requests get no ACK (the requester retries, then completes
// with IBV_WC_RETRY_EXC_ERR, IBA 9.7.6.1.3), UC and UD messages are lost. It says so once.
#pragma once

#include <atomic>

#include "transport/link.h"

namespace softverbs::transport {

class UnreachableLink final : public Link {
 public:
  // `why`: why the destination cannot be reached (logged once, with the first destination).
  explicit UnreachableLink(const char* why) : why_(why) {}
  Reply Carry(const Request& r) override;
  void CarryMulticast(const Request& r, uint32_t skip_qp) override;

 private:
  void Explain(const Request& r);
  const char* why_;
  std::atomic<bool> explained_{false};
};

}  // namespace softverbs::transport
