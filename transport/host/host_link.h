// The same-host fabric's Link (transport/link.h): finds the destination QP in the host registry
// by its number and runs the responder on it at once, in the requester's thread (DESIGN.md
// section 5: the initiator is the NIC). Only destinations whose GID is one of this host's come
// here (transport/link.h, Links).
#pragma once

#include "fabric/host/host_directory.h"
#include "transport/host/direct_route.h"
#include "transport/host/host_target.h"
#include "transport/link.h"

namespace softverbs::transport {

class HostLink final : public Link {
 public:
  explicit HostLink(fabric::LocalProcess& local) : local_(local), route_(local) {}
  Reply Carry(const Request& r) override;
  bool CarryDirect(const DirectRequest& r, Reply* reply) override { return route_.Carry(r, reply); }
  void CarryMulticast(const Request& r, uint32_t skip_qp) override;

 private:
  fabric::LocalProcess& local_;
  PeerHint hint_;
  DirectRoute route_;  // RC WRITE / READ / atomics kept resolved across requests
};

}  // namespace softverbs::transport
