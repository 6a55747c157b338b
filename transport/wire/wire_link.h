// The wire fabric's Link (transport/link.h): carries a requester's messages to another host as
// RoCEv2 packets (DESIGN.md section 6). Today it carries UD datagrams (one SEND_ONLY packet each)
// and UC SENDs and RDMA WRITEs (cut by the path MTU into FIRST/MIDDLE/LAST packets), the
// requester learning nothing of their fate, as IBA 9.6 and 9.8 say. RC needs the acknowledgement
// and retransmission engine of the wire issue's next step; until then its messages are not sent,
// and the link says so once (RC then ends in IBV_WC_RETRY_EXC_ERR, as with a peer that never
// answers).
#pragma once

#include <atomic>
#include <cstdint>

#include "transport/link.h"
#include "transport/wire/wire_fabric.h"

namespace softverbs::transport {

class WireLink final : public Link {
 public:
  explicit WireLink(WireFabric& fabric) : fabric_(fabric) {}
  Reply Carry(const Request& r) override;
  // Multicast does not leave the host (docs/cm.md): nothing to carry.
  void CarryMulticast(const Request&, uint32_t) override {}

 private:
  WireFabric& fabric_;
  std::atomic<bool> explained_{false};
};

}  // namespace softverbs::transport
