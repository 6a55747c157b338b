#include "transport/wire/wire_link.h"

#include <arpa/inet.h>

#include <cstring>

#include "base/log.h"
#include "transport/grh.h"
#include "transport/wire/wire_packets.h"

namespace softverbs::transport {
namespace {

constexpr uint32_t kRc = 2, kUd = 4;
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
  if (r.qp_type != kUd || r.addressing == nullptr) {
    if (!explained_.exchange(true))
      SV_LOG(kError, "ibv_post_send(qp 0x%x): RC and UC do not travel on the wire yet (only UD does): the "
             "message to QP 0x%x of another host is not sent", r.src_qp, r.dest_qp);
    return silence;
  }
  const Gid16 sgid = ToGid(r.addressing->sgid), dgid = ToGid(r.addressing->dgid);
  fabric::packet::IpUdpInfo flow =
      IsIpv4MappedGid(sgid.data())
          ? fabric::packet::IpUdpInfo::V4(sgid.data() + 12, dgid.data() + 12, WireFabric::RocePort())
          : fabric::packet::IpUdpInfo::V6(sgid.data(), dgid.data(), WireFabric::RocePort());
  flow.dst_port = WireFabric::RocePort();
  uint8_t buffer[kMaxPacket];
  auto built = BuildDatagram(r, psn_.fetch_add(1, std::memory_order_relaxed), flow, buffer);
  if (!built.ok()) {
    SV_LOG(kError, "ibv_post_send(qp 0x%x): datagram not sent: %s", r.src_qp, built.status().rule().c_str());
    return silence;
  }
  const iovec piece{buffer, *built};
  if (Status s = fabric_.Send(sgid, dgid, {&piece, 1}); !s.ok() && !explained_.exchange(true))
    SV_LOG(kError, "ibv_post_send(qp 0x%x): datagram not sent: %s", r.src_qp, s.rule().c_str());
  return silence;  // UD: sent is all the requester knows (IBA 9.6.3)
}

}  // namespace softverbs::transport
