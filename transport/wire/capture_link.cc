#include "transport/wire/capture_link.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "base/log.h"
#include "transport/codes.h"
#include "transport/grh.h"
#include "transport/wire/wire_packets.h"

namespace softverbs::transport {
namespace {

namespace packet = fabric::packet;
using qp_type::kRc, qp_type::kUc, qp_type::kUd;

// The wire's source port spread (WireFabric::SourcePortFor): 0xc000 + 14 bits of the QPN's hash.
uint16_t CaptureSourcePort(uint32_t qpn) { return static_cast<uint16_t>(0xc000 | ((qpn * 0x9e3779b1u) >> 26)); }

// IPv4 when both GIDs are IPv4-mapped, else IPv6 (the link-local GID, multicast, IPv6 GIDs).
packet::IpUdpInfo CaptureFlow(const uint8_t* from, const uint8_t* to, uint16_t src_port, uint16_t dst_port,
                              const Addressing& a) {
  packet::IpUdpInfo f = IsIpv4MappedGid(from) && IsIpv4MappedGid(to) ? packet::IpUdpInfo::V4(from + 12, to + 12, src_port)
                                                                      : packet::IpUdpInfo::V6(from, to, src_port);
  f.dst_port = dst_port;
  f.traffic_class = a.traffic_class;
  f.flow_label = a.flow_label;
  if (a.hop_limit != 0) f.hop_limit = a.hop_limit;
  return f;
}

// The requester's flow to the responder from its per-QP source port, and the responder's answer
// from port 4791 to port 4791 (as the wire fabric answers: wire_fabric.cc, Deliver).
packet::IpUdpInfo CaptureRequestFlow(const Request& r) {
  return CaptureFlow(r.addressing->sgid, r.addressing->dgid, CaptureSourcePort(r.src_qp), packet::kRoceV2Port,
                     *r.addressing);
}
packet::IpUdpInfo CaptureReplyFlow(const Request& r) {
  return CaptureFlow(r.addressing->dgid, r.addressing->sgid, packet::kRoceV2Port, packet::kRoceV2Port,
                     *r.addressing);
}

bool CaptureIsAtomic(const Request& r) {
  return r.opcode == WrOpcode::kAtomicCmpSwp || r.opcode == WrOpcode::kAtomicFetchAdd;
}

uint8_t CaptureNakSyndrome(ReplyCode code) {
  switch (code) {
    case ReplyCode::kSequenceError: return syndrome::kPsnSequence;
    case ReplyCode::kInvalidRequest: return syndrome::kInvalidRequest;
    case ReplyCode::kRemoteAccess: return syndrome::kRemoteAccess;
    default: return syndrome::kRemoteOp;
  }
}

// The bytes a READ brought into the requester's buffers (its response's payload).
std::vector<uint8_t> CaptureLanded(const Request& r) {
  std::vector<uint8_t> out(r.length);
  uint64_t at = 0;
  for (size_t i = 0; i < r.local_count && at < r.length; ++i) {
    const size_t n = std::min<uint64_t>(r.local[i].iov_len, r.length - at);
    memcpy(out.data() + at, r.local[i].iov_base, n);
    at += n;
  }
  return out;
}

}  // namespace

bool Renderable(const Request& r) {
  if (r.addressing == nullptr || r.from_dci || r.xrc) return false;
  return r.qp_type == kRc || r.qp_type == kUc || r.qp_type == kUd;
}

Status RenderRequest(const Request& r, const CapturedPacket& emit) {
  const packet::IpUdpInfo flow = CaptureRequestFlow(r);
  uint8_t buffer[kPacketSlot];
  Result<size_t> one = 0;
  if (r.qp_type == kUd) {
    one = BuildDatagram(r, r.psn, flow, buffer);
  } else if (r.opcode == WrOpcode::kRdmaRead) {
    one = BuildReadRequest(r, flow, buffer);
  } else if (CaptureIsAtomic(r)) {
    one = BuildAtomic(r, flow, buffer);
  } else {  // an RC/UC SEND or WRITE, cut by the path MTU (IBA 9.4)
    return BuildMessage(r, flow, buffer, [&](std::span<const uint8_t> p) { return emit(flow, p); });
  }
  if (!one.ok()) return one.status();
  return emit(flow, {buffer, *one});
}

Status RenderReply(const Request& r, const Reply& reply, uint32_t msn, const CapturedPacket& emit) {
  if (r.qp_type != kRc) return Status::Ok();  // UC and UD are not acknowledged (IBA 9.8.3, 9.6.3)
  const packet::IpUdpInfo flow = CaptureReplyFlow(r);
  uint8_t buffer[kPacketSlot];
  Result<size_t> one = 0;
  switch (reply.code) {
    case ReplyCode::kAck:
      if (r.opcode == WrOpcode::kRdmaRead) {
        // IBA 9.7.5.1.4: one response packet per path MTU, PSNs from the request's on.
        const std::vector<uint8_t> data = CaptureLanded(r);
        return BuildReadResponse(r.src_qp, r.psn, msn, data, r.mtu ? r.mtu : 4096, flow, buffer,
                                 [&](std::span<const uint8_t> p) { return emit(flow, p); });
      }
      if (CaptureIsAtomic(r)) {
        one = BuildAtomicAck(r.src_qp, r.psn, msn, reply.original, flow, buffer);
      } else {  // coalesced as rxe does: one ACK, for the message's last PSN
        const uint32_t last = static_cast<uint32_t>((r.psn + MessagePackets(r) - 1) & packet::kPsnMask);
        one = BuildAck(r.src_qp, last, syndrome::kAck, msn, flow, buffer);
      }
      break;
    case ReplyCode::kRnr:  // IBA 9.7.5.2.8: RNR NAK for the first PSN not taken
      one = BuildAck(r.src_qp, r.psn, static_cast<uint8_t>(syndrome::kRnr | (reply.rnr_timer & 0x1f)), msn, flow,
                     buffer);
      break;
    case ReplyCode::kRemoteAccess:
    case ReplyCode::kInvalidRequest:
    case ReplyCode::kRemoteOp:
    case ReplyCode::kSequenceError:
      one = BuildAck(r.src_qp, r.psn, CaptureNakSyndrome(reply.code), msn, flow, buffer);
      break;
    default:
      return Status::Ok();  // no answer: nothing comes back (the requester's timer runs)
  }
  if (!one.ok()) return one.status();
  return emit(flow, {buffer, *one});
}

Status CaptureLink::Record(const packet::IpUdpInfo& flow, std::span<const uint8_t> udp_payload) {
  return pcap_.Append(flow, udp_payload);
}

Reply CaptureLink::Carry(const Request& r) {
  const CapturedPacket record = [this](const packet::IpUdpInfo& f, std::span<const uint8_t> p) { return Record(f, p); };
  const bool render = Renderable(r);
  Status s = render ? RenderRequest(r, record) : Status::Ok();
  const Reply reply = inner_->Carry(r);
  if (render && s.ok() && r.qp_type == kRc) {
    const bool answered = reply.code == ReplyCode::kAck;  // the responder's MSN counts completed messages
    const uint32_t msn = answered ? msn_.fetch_add(1, std::memory_order_relaxed) + 1 : msn_.load();
    s = RenderReply(r, reply, msn & packet::kQpnMask, record);
  }
  if (render) (void)pcap_.Flush();  // a capture is for debugging: a killed process keeps its records
  if (!s.ok() && !explained_.exchange(true))
    SV_LOG(kError, "SOFTVERBS_PCAP (qp 0x%x): a message to QP 0x%x is missing from the capture: %s", r.src_qp,
           r.dest_qp, s.rule().c_str());
  return reply;
}

void CaptureLink::CarryMulticast(const Request& r, uint32_t skip_qp) {
  if (Renderable(r)) {
    const Status s = RenderRequest(r, [this](const packet::IpUdpInfo& f, std::span<const uint8_t> p) {
      return Record(f, p);
    });
    (void)pcap_.Flush();
    if (!s.ok() && !explained_.exchange(true))
      SV_LOG(kError, "SOFTVERBS_PCAP (qp 0x%x): a multicast datagram is missing from the capture: %s", r.src_qp,
             s.rule().c_str());
  }
  inner_->CarryMulticast(r, skip_qp);
}

}  // namespace softverbs::transport
