#include "transport/wire/wire_link.h"

#include <arpa/inet.h>

#include <cstring>

#include "base/log.h"
#include "transport/grh.h"
#include "transport/wire/wire_packets.h"

namespace softverbs::transport {
namespace {

constexpr uint32_t kRc = 2, kUc = 3, kUd = 4;
// The largest UD packet: a 4096-byte MTU, its headers and ICRC.
constexpr size_t kMaxPacket = 4096 + 64;

Gid16 ToGid(const uint8_t* g) {
  Gid16 out;
  memcpy(out.data(), g, 16);
  return out;
}

}  // namespace

Reply WireLink::Carry(const Request& r) {
  const Reply silence = Reply::Of(r.qp_type == kRc ? ReplyCode::kNoAnswer : ReplyCode::kDropped);
  const bool sends_packets = r.qp_type == kUd || (r.qp_type == kUc && (r.opcode == WrOpcode::kSend ||
                                                                       r.opcode == WrOpcode::kSendWithImm ||
                                                                       r.opcode == WrOpcode::kRdmaWrite ||
                                                                       r.opcode == WrOpcode::kRdmaWriteWithImm));
  if (!sends_packets || r.addressing == nullptr) {
    if (!explained_.exchange(true))
      SV_LOG(kError, "ibv_post_send(qp 0x%x): RC does not travel on the wire yet (UD and UC do): the message to "
             "QP 0x%x of another host is not sent", r.src_qp, r.dest_qp);
    return silence;
  }
  const Gid16 sgid = ToGid(r.addressing->sgid), dgid = ToGid(r.addressing->dgid);
  fabric::packet::IpUdpInfo flow =
      IsIpv4MappedGid(sgid.data())
          ? fabric::packet::IpUdpInfo::V4(sgid.data() + 12, dgid.data() + 12, WireFabric::RocePort())
          : fabric::packet::IpUdpInfo::V6(sgid.data(), dgid.data(), WireFabric::RocePort());
  flow.dst_port = WireFabric::RocePort();
  flow.traffic_class = r.addressing->traffic_class;
  uint8_t buffer[kMaxPacket];
  auto send = [&](std::span<const uint8_t> packet) {
    const iovec piece{const_cast<uint8_t*>(packet.data()), packet.size()};
    return fabric_.Send(sgid, dgid, {&piece, 1});
  };
  Status s = Status::Ok();
  if (r.qp_type == kUd) {
    auto built = BuildDatagram(r, r.psn, flow, buffer);
    s = built.ok() ? send({buffer, *built}) : built.status();
  } else {
    s = BuildMessage(r, flow, buffer, send);  // UC: no acknowledgement follows (IBA 9.8)
  }
  if (!s.ok() && !explained_.exchange(true))
    SV_LOG(kError, "ibv_post_send(qp 0x%x): message to QP 0x%x not sent: %s", r.src_qp, r.dest_qp, s.rule().c_str());
  return silence;  // UD and UC: sent is all the requester knows (IBA 9.6.3, 9.8.3)
}

}  // namespace softverbs::transport
