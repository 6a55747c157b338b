// The same host's messages in a capture file (SOFTVERBS_PCAP, `softverbs trace`), as the RoCEv2
// packets the wire would carry for them, so Wireshark/tshark show local traffic as they show wire
// traffic. A same-host message never becomes packets (DESIGN.md section 5: the initiator runs the
// responder), so its packets are rendered here with the wire's own builders (wire_packets.h):
// the request cut by the path MTU, PSNs as the QP numbers them, then the responder's answer --
// ACK, RNR NAK or NAK, the READ response packets with the bytes that landed, the atomic ACK.
//
// CaptureLink is the one tap: a Link (transport/link.h) wrapped around the host link when this
// process captures, so no transport role knows of captures, and a process that does not capture
// runs no capture code at all (core/qp.cc decides once per QP).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "base/status.h"
#include "fabric/packet/ip_udp.h"
#include "fabric/packet/pcap.h"
#include "transport/link.h"

namespace softverbs::transport {

// Receives each rendered packet (a UDP payload: BTH .. ICRC) with the flow it travels in.
using CapturedPacket =
    std::function<Status(const fabric::packet::IpUdpInfo& flow, std::span<const uint8_t> udp_payload)>;

// Whether `r` has a wire form to render: RC, UC and UD with an address vector. DC and XRC do not
// travel on the wire yet (docs/wire.md), so their messages are not rendered.
bool Renderable(const Request& r);
// The packets of request `r` from its requester (source GID, a per-QP source port) to port 4791.
Status RenderRequest(const Request& r, const CapturedPacket& emit);
// The responder's packets for RC request `r` answered `reply` (nothing for UC and UD, nor for a
// target that did not answer), `msn` the responder's message count after it (AETH). A READ's
// response carries what landed in r.local: render it after the READ was carried.
Status RenderReply(const Request& r, const Reply& reply, uint32_t msn, const CapturedPacket& emit);

class CaptureLink final : public Link {
 public:
  CaptureLink(std::unique_ptr<Link> inner, fabric::packet::PcapWriter& pcap)
      : inner_(std::move(inner)), pcap_(pcap) {}
  void Attach(ReplySink* sink) override { inner_->Attach(sink); }
  Reply Carry(const Request& r) override;
  void CarryMulticast(const Request& r, uint32_t skip_qp) override;

 private:
  Status Record(const fabric::packet::IpUdpInfo& flow, std::span<const uint8_t> udp_payload);

  std::unique_ptr<Link> inner_;
  fabric::packet::PcapWriter& pcap_;
  std::atomic<uint32_t> msn_{0};  // RC messages answered (the AETH MSN the responder would send)
  std::atomic<bool> explained_{false};
};

}  // namespace softverbs::transport
