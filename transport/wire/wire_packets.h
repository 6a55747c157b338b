// Messages as RoCEv2 packets and back (IBA 9.2-9.3, annex A17): what the wire fabric sends for a
// Request, and the Request a received packet makes for the responder. The packet layouts
// themselves are fabric/packet's; this file maps them to the transport's events.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <functional>
#include <span>

#include "base/status.h"
#include "fabric/packet/packet.h"
#include "transport/request.h"

namespace softverbs::transport {

// A Request built from a received packet; `piece` holds its payload (inside the datagram).
struct WireRequest {
  Request request;
  iovec piece{};
};

// The request `p` carries, if the wire fabric executes its kind: UD SEND_ONLY and
// SEND_ONLY_WITH_IMMEDIATE (IBA 9.6). False for any other packet.
bool RequestOfPacket(const fabric::packet::ParsedPacket& p, WireRequest* out);

// Builds the UD SEND_ONLY[_WITH_IMMEDIATE] packet of `r` (BTH, DETH, ImmDt, payload, ICRC for
// `flow`) into `out`; returns its size.
Result<size_t> BuildDatagram(const Request& r, uint32_t psn, const fabric::packet::IpUdpInfo& flow,
                             std::span<uint8_t> out);

// The packets of an RC/UC SEND or RDMA WRITE `r`, cut by r.mtu (IBA 9.4: FIRST and MIDDLE carry
// exactly the MTU; ONLY/LAST the rest), PSNs from r.psn on, each built into `buffer` and handed
// to `emit`. The first error stops it.
Status BuildMessage(const Request& r, const fabric::packet::IpUdpInfo& flow, std::span<uint8_t> buffer,
                    const std::function<Status(std::span<const uint8_t>)>& emit);

}  // namespace softverbs::transport
