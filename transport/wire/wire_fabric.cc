#include "transport/wire/wire_fabric.h"

#include <arpa/inet.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "base/log.h"
#include "fabric/packet/icrc.h"
#include "fabric/packet/packet.h"
#include "transport/grh.h"
#include "transport/host/host_target.h"
#include "transport/responder.h"
#include "transport/wire/packet_responder.h"
#include "transport/wire/rc_responder.h"
#include "transport/wire/wire_link.h"
#include "transport/wire/wire_packets.h"

namespace softverbs::transport {
namespace {

namespace packet = fabric::packet;
using fabric::wire::UdpAddress;

// Addresses only this host reaches: loopback (127/8, ::1) and IPv6 link-local (which would
// need a scope). Peers on this host use the same-host fabric for them anyway.
bool Routable(const Gid16& g) {
  if (IsIpv4MappedGid(g.data())) return g[12] != 127 && !(g[12] == 0 && g[13] == 0 && g[14] == 0 && g[15] == 0);
  static const Gid16 kLoopback6 = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  if (g == kLoopback6 || g == Gid16{}) return false;
  return !(g[0] == 0xfe && (g[1] & 0xc0) == 0x80);
}

std::string GidString(const Gid16& g) {
  char s[INET6_ADDRSTRLEN] = "?";
  inet_ntop(AF_INET6, g.data(), s, sizeof s);
  return s;
}

packet::IpUdpInfo FlowOf(const Gid16& src, const Gid16& dst, uint16_t src_port, uint16_t dst_port) {
  packet::IpUdpInfo f = IsIpv4MappedGid(src.data()) ? packet::IpUdpInfo::V4(src.data() + 12, dst.data() + 12, src_port)
                                                    : packet::IpUdpInfo::V6(src.data(), dst.data(), src_port);
  f.dst_port = dst_port;
  return f;
}

}  // namespace

UdpAddress AddressOfGid(const Gid16& gid, uint16_t port) {
  if (IsIpv4MappedGid(gid.data())) {
    sockaddr_in sin{};
    sin.sin_family = AF_INET;
    sin.sin_port = htons(port);
    memcpy(&sin.sin_addr, gid.data() + 12, 4);
    return UdpAddress::FromSockaddr(reinterpret_cast<const sockaddr*>(&sin), sizeof sin);
  }
  sockaddr_in6 sin6{};
  sin6.sin6_family = AF_INET6;
  sin6.sin6_port = htons(port);
  memcpy(&sin6.sin6_addr, gid.data(), 16);
  return UdpAddress::FromSockaddr(reinterpret_cast<const sockaddr*>(&sin6), sizeof sin6);
}

Gid16 GidOfAddress(const UdpAddress& a) {
  Gid16 g{};
  if (a.family() == AF_INET) {
    g[10] = g[11] = 0xff;
    memcpy(g.data() + 12, &reinterpret_cast<const sockaddr_in*>(a.sa())->sin_addr, 4);
  } else if (a.family() == AF_INET6) {
    memcpy(g.data(), &reinterpret_cast<const sockaddr_in6*>(a.sa())->sin6_addr, 16);
  }
  return g;
}

uint16_t WireFabric::RocePort() {
  const char* env = getenv("SOFTVERBS_ROCE_PORT");
  const long port = env != nullptr ? strtol(env, nullptr, 10) : 0;
  return port > 0 && port < 65536 ? static_cast<uint16_t>(port) : fabric::wire::kRoceV2Port;
}

WireFabric& WireFabric::Get(fabric::LocalProcess& local) {
  // One per process incarnation: a child of fork() has no receive thread and must not use its
  // parent's sockets' group membership as its own.
  static std::mutex mu;
  static WireFabric* instance = nullptr;
  static uint32_t generation = 0;
  std::lock_guard lock(mu);
  if (instance == nullptr || generation != fabric::LocalProcess::ForkGeneration()) {
    instance = new WireFabric(local);  // lives as long as the process (its thread never joins)
    generation = fabric::LocalProcess::ForkGeneration();
  }
  return *instance;
}

WireFabric::WireFabric(fabric::LocalProcess& local) : local_(local), epoll_(epoll_create1(EPOLL_CLOEXEC)) {
  if (const char* path = getenv("SOFTVERBS_PCAP"); path != nullptr && *path != '\0') {
    std::string name = path;
    if (size_t at = name.find("%p"); at != std::string::npos) name.replace(at, 2, std::to_string(getpid()));
    auto writer = fabric::packet::PcapWriter::Open(name);
    if (writer.ok())
      pcap_ = std::move(writer.value());
    else
      SV_LOG(kError, "SOFTVERBS_PCAP=%s: %s", path, writer.status().rule().c_str());
  }
  thread_ = std::thread([this] { Run(); });
  thread_.detach();
}

void WireFabric::Listen(std::span<const Gid16> gids) {
  std::lock_guard lock(mu_);
  for (const Gid16& gid : gids) {
    if (!Routable(gid)) continue;
    bool known = false;
    for (const auto& p : ports_) known = known || p->gid == gid;
    for (const Gid16& r : refused_) known = known || r == gid;
    if (known) continue;
    fabric::wire::UdpPortOptions options;
    options.local = AddressOfGid(gid, RocePort());
    auto udp = fabric::wire::UdpPort::Open(std::move(options));
    if (!udp.ok()) {
      SV_LOG(kError, "softverbs0: RoCEv2 on %s is unavailable: %s", GidString(gid).c_str(), udp.status().rule().c_str());
      refused_.push_back(gid);
      continue;
    }
    auto port = std::make_unique<Port>();
    port->gid = gid;
    port->udp = std::move(udp.value());
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = port.get();
    epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, port->udp->fd(), &ev);
    SV_LOG(kDebug, "softverbs0: receiving RoCEv2 on %s", port->udp->local().ToString().c_str());
    ports_.push_back(std::move(port));
  }
}

WireFabric::Port* WireFabric::Find(const Gid16& gid) {
  std::lock_guard lock(mu_);
  for (const auto& p : ports_)
    if (p->gid == gid) return p.get();
  return nullptr;
}

Status WireFabric::Send(const Gid16& sgid, const Gid16& dgid, std::span<const iovec> pieces) {
  Port* port = Find(sgid);
  if (port == nullptr)
    return Status(ENETUNREACH, "no RoCEv2 port on " + GidString(sgid) + " (the source GID of the address vector)");
  {
    std::lock_guard lock(port->mu);
    SV_RETURN_IF_ERROR(port->udp->Send(AddressOfGid(dgid, RocePort()), 0, pieces));
  }
  counters_.sent.fetch_add(1, std::memory_order_relaxed);
  if (pcap_ != nullptr && pieces.size() == 1)
    Record(sgid, dgid, RocePort(), {static_cast<const uint8_t*>(pieces[0].iov_base), pieces[0].iov_len});
  return Status::Ok();
}

void WireFabric::Register(uint32_t qpn, WireLink* link) {
  std::lock_guard lock(links_mu_);
  links_[qpn] = link;
}

void WireFabric::Unregister(uint32_t qpn, WireLink* link) {
  std::lock_guard lock(links_mu_);
  if (auto it = links_.find(qpn); it != links_.end() && it->second == link) links_.erase(it);
}

Status WireFabric::SendTo(const Port& port, const UdpAddress& to, std::span<const iovec> pieces) {
  {
    std::lock_guard lock(const_cast<Port&>(port).mu);
    SV_RETURN_IF_ERROR(port.udp->Send(to, 0, pieces));
  }
  counters_.sent.fetch_add(1, std::memory_order_relaxed);
  if (pcap_ != nullptr && pieces.size() == 1)
    Record(port.gid, GidOfAddress(to), RocePort(), {static_cast<const uint8_t*>(pieces[0].iov_base), pieces[0].iov_len});
  return Status::Ok();
}

void WireFabric::Record(const Gid16& src, const Gid16& dst, uint16_t src_port, std::span<const uint8_t> packet) {
  // Every record is flushed: a capture is for debugging, and a process may be killed any time.
  if (pcap_->Append(FlowOf(src, dst, src_port, RocePort()), packet).ok()) (void)pcap_->Flush();
}

void WireFabric::Run() {
  constexpr size_t kBatch = 16;
  constexpr uint32_t kBytes = 9216;  // a jumbo frame's datagram
  std::vector<uint8_t> storage(kBatch * kBytes);
  epoll_event events[8];
  for (;;) {
    const int n = epoll_wait(epoll_.get(), events, 8, -1);
    for (int i = 0; i < n; ++i) {
      auto* port = static_cast<Port*>(events[i].data.ptr);
      for (;;) {
        fabric::wire::RxDatagram slots[kBatch];
        for (size_t s = 0; s < kBatch; ++s) slots[s] = {storage.data() + s * kBytes, kBytes};
        Result<size_t> got = 0;
        {
          std::lock_guard lock(port->mu);
          got = port->udp->ReceiveBatch(slots);
        }
        if (!got.ok() || *got == 0) break;
        for (size_t s = 0; s < *got; ++s) Deliver({slots[s].buf, slots[s].length}, slots[s].source, *port);
      }
    }
  }
}

void WireFabric::Deliver(std::span<const uint8_t> datagram, const UdpAddress& from, const Port& to) {
  counters_.received.fetch_add(1, std::memory_order_relaxed);
  const Gid16 source = GidOfAddress(from);
  const packet::IpUdpInfo flow = FlowOf(source, to.gid, from.port(), RocePort());
  if (pcap_ != nullptr) Record(source, to.gid, from.port(), datagram);
  auto parsed = packet::Parse(datagram);
  if (parsed.ok()) {
    // The ICRC covers the IPv4 ID, which a UDP socket does not show: Linux sockets send 0 with
    // DF, the kernel's rxe a per-packet ID, which is then solved for (fabric/packet/icrc.h).
    Status icrc = packet::CheckIcrc(flow, datagram);
    if (!icrc.ok() && !flow.ipv6 && packet::RecoverIpv4Id(flow, datagram).ok()) icrc = Status::Ok();
    if (!icrc.ok()) parsed = icrc;
  }
  if (!parsed.ok()) {
    // Hardware and rxe drop such packets silently; the counters and the trace say why.
    (parsed.status().code() == EBADMSG ? counters_.icrc_errors : counters_.malformed).fetch_add(1, std::memory_order_relaxed);
    SV_LOG(kTrace, "softverbs0: dropped a datagram from %s: %s", from.ToString().c_str(), parsed.status().rule().c_str());
    return;
  }
  auto target = HostTarget::Find(local_, parsed->hdr.bth.dest_qp);
  if (!target.ok()) {
    counters_.unknown_qp.fetch_add(1, std::memory_order_relaxed);  // IBA 9.6.1.1: discarded
    return;
  }
  if (parsed->info->transport == packet::Transport::kUc) return PacketResponder::ReceiveUc(*target, *parsed);
  if (parsed->info->transport == packet::Transport::kRc) {
    const packet::Operation op = parsed->info->operation;
    if (op == packet::Operation::kAcknowledge || op == packet::Operation::kAtomicAcknowledge ||
        op == packet::Operation::kRdmaReadResponse) {
      // A response for one of our requesters: its link matches it (transport/wire/wire_link.h).
      std::lock_guard lock(links_mu_);
      auto link = links_.find(parsed->hdr.bth.dest_qp);
      if (link == links_.end()) {
        // Its QP is another process's: responses are not forwarded yet (docs/wire.md).
        counters_.misdelivered.fetch_add(1, std::memory_order_relaxed);
        return;
      }
      link->second->OnResponse(*parsed);
      return;
    }
    // Responses go to the requester's address at port 4791, whatever its source port was
    // (IBA annex A17.2.1: the destination port is always the RoCEv2 port).
    ResponsePath path;
    path.flow = FlowOf(to.gid, source, RocePort(), RocePort());
    const UdpAddress back = AddressOfGid(source, RocePort());
    path.send = [this, &to, &back](std::span<const uint8_t> bytes) {
      const iovec piece{const_cast<uint8_t*>(bytes.data()), bytes.size()};
      return SendTo(to, back, {&piece, 1});
    };
    return RcResponder::Receive(*target, *parsed, path);
  }
  WireRequest w;
  if (!RequestOfPacket(*parsed, &w)) {
    counters_.unsupported.fetch_add(1, std::memory_order_relaxed);
    SV_LOG(kDebug, "softverbs0: dropped a %s packet from %s: RC does not travel on the wire yet",
           parsed->info->name, from.ToString().c_str());
    return;
  }
  // The GRH a UD receive starts with is the IP header the datagram came in (IBA annex A17.4.5.2).
  Addressing a;
  memcpy(a.sgid, source.data(), 16);
  memcpy(a.dgid, to.gid.data(), 16);
  a.hop_limit = 64;
  uint8_t grh[kGrhBytes];
  BuildGrh(grh, a, static_cast<uint32_t>(w.request.length));
  Responder::Execute(*target, w.request, grh);
}

}  // namespace softverbs::transport
