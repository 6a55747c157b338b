#include "transport/wire/wire_fabric.h"

#include <arpa/inet.h>
#include <poll.h>
#include <time.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "base/log.h"
#include "fabric/packet/icrc.h"
#include "fabric/host/process_token.h"
#include "fabric/packet/packet.h"
#include "transport/grh.h"
#include "transport/host/host_target.h"
#include "transport/responder.h"
#include "transport/wire/capture.h"
#include "transport/wire/packet_responder.h"
#include "transport/wire/rc_responder.h"
#include "transport/wire/wire_link.h"
#include "transport/wire/wire_packets.h"

namespace softverbs::transport {
namespace {
// Set while this thread handles a receive batch (Drain): a QP destroyed from there (never by the
// library itself, but a callback could) must not wait for its own batch.
thread_local bool t_draining = false;
struct ScopedFlag {
  explicit ScopedFlag(bool& flag) : flag_(flag), old_(flag) { flag_ = true; }
  ~ScopedFlag() { flag_ = old_; }
  bool& flag_;
  const bool old_;
};

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

// The fabric busy pollers use, with the fork generation it belongs to (a child of fork() must
// not read its parent's sockets).
std::atomic<WireFabric*> g_receiving{nullptr};
std::atomic<uint32_t> g_receiving_generation{0};

bool BusyPollingWanted() {
  static const bool wanted = [] {
    const char* env = getenv("SOFTVERBS_WIRE_POLL");
    return env == nullptr || strcmp(env, "0") != 0;
  }();
  return wanted;
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
  static const uint16_t port = [] {  // read once: every packet sent and received asks
    const char* env = getenv("SOFTVERBS_ROCE_PORT");
    const long p = env != nullptr ? strtol(env, nullptr, 10) : 0;
    return p > 0 && p < 65536 ? static_cast<uint16_t>(p) : fabric::wire::kRoceV2Port;
  }();
  return port;
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

WireFabric::WireFabric(fabric::LocalProcess& local)
    : local_(local), generation_(fabric::LocalProcess::ForkGeneration()), epoll_(epoll_create1(EPOLL_CLOEXEC)) {
  pcap_ = ProcessCapture();  // SOFTVERBS_PCAP (transport/wire/capture.h)
  auto channel = fabric::ProcessChannel::Open(local.registry().name(), local.slot());
  if (channel.ok()) {
    channel_ = std::move(channel.value());
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = nullptr;  // the channel; ports carry their Port*
    epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, channel_->fd(), &ev);
  } else {
    SV_LOG(kError, "softverbs0: this process's channel is unavailable (%s): RoCEv2 responses the kernel hands "
           "to another process of this host are lost, and `softverbs status` cannot ask this process",
           channel.status().rule().c_str());
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

void WireFabric::BusyPollFromNowOn() {
  // Not at Listen: every process with a QP listens, and a same-host-only process would then pay
  // a receive system call per empty ibv_poll_cq for nothing (ib_send_lat on one host: 0.9 us
  // became 2.4 us). From the first datagram sent or received on, it is worth it.
  if (g_receiving.load(std::memory_order_relaxed) == this || !BusyPollingWanted()) return;
  g_receiving_generation.store(generation_, std::memory_order_relaxed);
  g_receiving.store(this, std::memory_order_release);
}

WireFabric::Port* WireFabric::Find(const Gid16& gid) {
  std::lock_guard lock(mu_);
  for (const auto& p : ports_)
    if (p->gid == gid) return p.get();
  return nullptr;
}

uint16_t WireFabric::SourcePortFor(const Gid16& sgid, uint32_t qpn) {
  Port* port = Find(sgid);
  if (port == nullptr) return RocePort();
  const uint16_t wanted = static_cast<uint16_t>(0xc000 | ((qpn * 0x9e3779b1u) >> 26));
  std::lock_guard lock(port->mu);
  return port->udp->UsableSourcePort(wanted);
}

Status WireFabric::Send(const Gid16& sgid, const Gid16& dgid, std::span<const iovec> pieces, uint16_t src_port) {
  // One datagram gathered from `pieces`.
  Port* port = Find(sgid);
  if (port == nullptr)
    return Status(ENETUNREACH, "no RoCEv2 port on " + GidString(sgid) + " (the source GID of the address vector)");
  const UdpAddress to = AddressOfGid(dgid, RocePort());
  {
    std::lock_guard lock(port->mu);
    SV_RETURN_IF_ERROR(port->udp->Send(to, src_port, pieces));
  }
  counters_.sent.fetch_add(1, std::memory_order_relaxed);
  if (pcap_ != nullptr) Record(sgid, dgid, src_port != 0 ? src_port : RocePort(), pieces);
  return Status::Ok();
}

Status WireFabric::SendBatch(const Gid16& sgid, const Gid16& dgid, std::span<const iovec> datagrams,
                             uint16_t src_port) {
  return SendGathered(sgid, dgid, datagrams, {}, src_port);
}

Status WireFabric::SendGathered(const Gid16& sgid, const Gid16& dgid, std::span<const iovec> pieces,
                                std::span<const uint16_t> piece_counts, uint16_t src_port) {
  Port* port = Find(sgid);
  if (port == nullptr)
    return Status(ENETUNREACH, "no RoCEv2 port on " + GidString(sgid) + " (the source GID of the address vector)");
  return SendDatagrams(*port, AddressOfGid(dgid, RocePort()), pieces, piece_counts, src_port);
}

Status WireFabric::SendDatagrams(Port& port, const UdpAddress& to, std::span<const iovec> datagrams,
                                 uint16_t src_port) {
  return SendDatagrams(port, to, datagrams, {}, src_port);
}

Status WireFabric::SendDatagrams(Port& port, const UdpAddress& to, std::span<const iovec> pieces,
                                 std::span<const uint16_t> counts, uint16_t src_port) {
  constexpr size_t kMax = 64;
  const size_t total = counts.empty() ? pieces.size() : counts.size();
  fabric::wire::TxDatagram batch[kMax];
  size_t done = 0, at = 0;  // datagrams sent; their pieces
  Status result = Status::Ok();
  for (int waits = 0; done < total;) {
    const size_t n = std::min(kMax, total - done);
    for (size_t i = 0, p = at; i < n; ++i) {
      const size_t c = counts.empty() ? 1 : counts[done + i];
      batch[i] = {&to, src_port, pieces.subspan(p, c)};
      p += c;
    }
    Result<size_t> sent = 0;
    {
      std::lock_guard lock(port.mu);
      sent = port.udp->SendBatch({batch, n});
    }
    if (sent.ok() && *sent > 0) {
      for (size_t i = 0; i < *sent; ++i) {
        if (pcap_ != nullptr) Record(port.gid, GidOfAddress(to), src_port != 0 ? src_port : RocePort(), batch[i].pieces);
        at += batch[i].pieces.size();
      }
      done += *sent;
      continue;
    }
    if (sent.ok() || sent.status().code() != EAGAIN || ++waits > 20) {
      result = sent.ok() ? Status(EAGAIN, "send: the socket buffer stays full") : sent.status();
      break;
    }
    pollfd p{port.udp->fd(), POLLOUT, 0};
    (void)poll(&p, 1, 1);  // the socket buffer drains as the peer receives
  }
  counters_.sent.fetch_add(done, std::memory_order_relaxed);
  if (done != 0) BusyPollFromNowOn();
  return result;
}


void WireFabric::Register(uint32_t qpn, WireLink* link) {
  std::lock_guard lock(links_mu_);
  links_[qpn] = link;
}

void WireFabric::Unregister(uint32_t qpn, WireLink* link) {
  {
    std::lock_guard lock(links_mu_);
    if (auto it = links_.find(qpn); it != links_.end() && it->second == link) links_.erase(it);
  }
  // A receive batch in progress may hold this QP's ACK (HoldAck) after its receive completion is
  // already visible: an application that saw its last completion and destroyed its QPs and
  // exited took the ACK with it, and its peer's send ended in RETRY_EXC_ERR. rxe's destroy, too,
  // waits for the QP's responder task, so its last ACK goes out. Wait for the batch to end.
  // (Ports are never removed; a batch takes mu_ under rx_mu, so mu_ is not held while waiting.)
  if (t_draining) return;
  std::vector<Port*> ports;
  {
    std::lock_guard lock(mu_);
    for (const auto& port : ports_) ports.push_back(port.get());
  }
  for (Port* port : ports) std::lock_guard rx(port->rx_mu);
}

void WireFabric::Record(const Gid16& src, const Gid16& dst, uint16_t src_port, std::span<const iovec> pieces) {
  if (pieces.size() == 1) return Record(src, dst, src_port, {static_cast<const uint8_t*>(pieces[0].iov_base), pieces[0].iov_len});
  std::vector<uint8_t> packet;
  for (const iovec& v : pieces)
    packet.insert(packet.end(), static_cast<const uint8_t*>(v.iov_base), static_cast<const uint8_t*>(v.iov_base) + v.iov_len);
  Record(src, dst, src_port, packet);
}

void WireFabric::Record(const Gid16& src, const Gid16& dst, uint16_t src_port, std::span<const uint8_t> packet) {
  // Every record is flushed: a capture is for debugging, and a process may be killed any time.
  if (pcap_->Append(FlowOf(src, dst, src_port, RocePort()), packet).ok()) (void)pcap_->Flush();
}

namespace {
int64_t MonotonicNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);  // vDSO: no system call
  return ts.tv_sec * 1000000000ll + ts.tv_nsec;
}
// A poller that polled this recently is spinning on its CQ and takes the datagrams itself.
constexpr int64_t kSpinningNs = 30000;
}  // namespace

void WireFabric::Run() {
  epoll_event events[8];
  for (;;) {
    const int n = epoll_wait(epoll_.get(), events, 8, -1);
    // An application spinning on its CQ takes its datagrams itself (PollOnce). While one does,
    // this thread keeps out of its way -- on two cores, waking to race it for each datagram
    // costs the spinner its core -- and looks again shortly. One that polls only now and then
    // (ib_write_lat watches memory, not its CQ) is not waited for. The channel (forwarded
    // responses, questions) is this thread's alone: served either way.
    const bool spinning = MonotonicNs() - last_poll_ns_.load(std::memory_order_relaxed) < kSpinningNs;
    for (int i = 0; i < n; ++i) {
      if (events[i].data.ptr == nullptr) {
        ServeChannel();
        continue;
      }
      if (spinning) continue;
      auto* port = static_cast<Port*>(events[i].data.ptr);
      while (Drain(*port, /*wait=*/true) != 0) {
      }
    }
    if (spinning) usleep(50);  // datagrams still pending wake epoll_wait at once: looked at again
  }
}

size_t WireFabric::Drain(Port& port, bool wait) {
  const ScopedFlag draining(t_draining);
  constexpr size_t kBatch = 16;
  std::unique_lock rx(port.rx_mu, std::defer_lock);
  if (wait)
    rx.lock();
  else if (!rx.try_lock())
    return 0;
  const uint32_t bytes = port.udp->receive_bytes();  // 64 KiB with GRO: 16 packets of 4 KiB
  if (port.storage.empty()) port.storage.resize(kBatch * bytes);
  fabric::wire::RxDatagram slots[kBatch];
  for (size_t s = 0; s < kBatch; ++s) slots[s] = {port.storage.data() + s * bytes, bytes};
  Result<size_t> got = 0;
  {
    std::lock_guard lock(port.mu);
    got = port.udp->ReceiveBatch(slots);
  }
  if (!got.ok()) return 0;
  if (*got != 0) BusyPollFromNowOn();
  for (size_t s = 0; s < *got; ++s) {
    // GRO may have joined a burst of one sender's datagrams (udp(7) UDP_GRO): cut them apart.
    const uint32_t length = slots[s].length, step = slots[s].segment != 0 ? slots[s].segment : length;
    for (uint32_t at = 0; at < length; at += step)
      Deliver({slots[s].buf + at, std::min(step, length - at)}, slots[s].source, port);
  }
  SendHeldAcks(port);
  return *got;
}

void WireFabric::HoldAck(Port& port, const UdpAddress& to, std::span<const uint8_t> ack) {
  if (ack.size() > sizeof(Port::HeldAck::bytes) || ack.size() < 8) return;
  const uint32_t qpn = uint32_t{ack[5]} << 16 | uint32_t{ack[6]} << 8 | ack[7];  // BTH DestQP (IBA 9.2)
  Port::HeldAck* held = nullptr;
  for (auto& h : port.held_acks)
    if (h.qpn == qpn && h.to == to) held = &h;
  if (held == nullptr) {
    held = &port.held_acks.emplace_back();
    held->to = to;
    held->qpn = qpn;
  } else {
    counters_.acks_coalesced.fetch_add(1, std::memory_order_relaxed);
  }
  memcpy(held->bytes, ack.data(), ack.size());
  held->length = ack.size();
}

void WireFabric::SendHeldAcks(Port& port) {
  for (const auto& h : port.held_acks) {
    const iovec one{const_cast<uint8_t*>(h.bytes), h.length};
    (void)SendDatagrams(port, h.to, {&one, 1});  // a lost ACK is made up by the next one or a retry
  }
  port.held_acks.clear();
}

WireFabric* WireFabric::Receiving() {
  WireFabric* f = g_receiving.load(std::memory_order_acquire);
  if (f == nullptr || g_receiving_generation.load(std::memory_order_relaxed) != fabric::LocalProcess::ForkGeneration())
    return nullptr;
  return f;
}

bool WireFabric::PollOnce() {
  last_poll_ns_.store(MonotonicNs(), std::memory_order_relaxed);  // the receive thread watches it
  Port* ports[8];
  size_t count = 0;
  {
    std::lock_guard lock(mu_);
    for (const auto& p : ports_)
      if (count < std::size(ports)) ports[count++] = p.get();
  }
  size_t handled = 0;
  for (size_t i = 0; i < count; ++i) handled += Drain(*ports[i], /*wait=*/false);
  return handled != 0;
}

void WireFabric::DeliverResponse(const packet::ParsedPacket& p, std::span<const uint8_t> datagram,
                                 uint32_t owner_slot) {
  // A response for a requester: its link matches it (transport/wire/wire_link.h). The kernel
  // gives a datagram to any member of the UDP 4791 group (fabric/wire/README.md): one for a
  // QP of another process goes on to that process through its channel (docs/wire.md).
  if (owner_slot != local_.slot() && channel_ != nullptr) {
    if (channel_->Send(local_.registry().name(), owner_slot, fabric::ChannelKind::kForward, datagram).ok()) {
      counters_.forwarded.fetch_add(1, std::memory_order_relaxed);
      return;
    }
  } else {
    std::lock_guard lock(links_mu_);
    if (auto link = links_.find(p.hdr.bth.dest_qp); link != links_.end()) return link->second->OnResponse(p);
  }
  counters_.misdelivered.fetch_add(1, std::memory_order_relaxed);  // a loss: RC retries
}

void WireFabric::SetQp1Handler(Qp1Handler* handler) {
  std::lock_guard lock(qp1_mu_);
  qp1_handler_ = handler;
}

void WireFabric::DeliverQp1(const packet::ParsedPacket& p, const UdpAddress& from, const Gid16& source,
                            const Gid16& local) {
  if (Status ok = CheckQp1Packet(p); !ok.ok()) {
    counters_.qp1_refused.fetch_add(1, std::memory_order_relaxed);  // rxe drops it silently
    SV_LOG(kTrace, "softverbs0: dropped a datagram from %s: %s", from.ToString().c_str(), ok.rule().c_str());
    return;
  }
  std::lock_guard lock(qp1_mu_);
  if (qp1_handler_ == nullptr) {
    // A process without a CM agent is still a member of the address's UDP group: the MAD goes
    // to the host's other processes, whose agents keep what is theirs (cm/agent.h).
    if (ForwardMad(kEveryOtherProcess, source, local, p.payload).ok()) return;
    counters_.qp1_unhandled.fetch_add(1, std::memory_order_relaxed);  // IBA 9.6.1.1: discarded
    SV_LOG(kTrace, "softverbs0: dropped a MAD from %s: no CM agent in this process nor another", from.ToString().c_str());
    return;
  }
  Qp1Datagram d;
  d.sgid = source;
  d.dgid = local;
  d.from = from;
  d.src_qp = p.hdr.deth.src_qp;
  d.pkey = p.hdr.bth.pkey;
  d.mad = p.payload;
  counters_.qp1_received.fetch_add(1, std::memory_order_relaxed);
  qp1_handler_->OnMad(d);
}

Status WireFabric::SendMad(const Gid16& sgid, const Gid16& dgid, std::span<const uint8_t> mad) {
  Port* port = Find(sgid);
  if (port == nullptr)
    return Status(ENETUNREACH, "no RoCEv2 port on " + GidString(sgid) + " to send a MAD from");
  uint16_t src_port;
  {
    std::lock_guard lock(port->mu);
    src_port = port->udp->UsableSourcePort(kQp1SourcePort);
  }
  uint8_t buffer[kMadBytes + 64];
  auto built = BuildMadPacket(mad, qp1_psn_.fetch_add(1, std::memory_order_relaxed),
                              FlowOf(sgid, dgid, src_port, RocePort()), buffer);
  if (!built.ok()) return built.status();
  const iovec one{buffer, *built};
  SV_RETURN_IF_ERROR(Send(sgid, dgid, {&one, 1}, src_port));
  counters_.qp1_sent.fetch_add(1, std::memory_order_relaxed);
  return Status::Ok();
}

Status WireFabric::ForwardMad(uint32_t slot, const Gid16& sgid, const Gid16& dgid, std::span<const uint8_t> mad) {
  if (channel_ == nullptr) return Status(ENOTCONN, "this process has no host channel to forward a MAD on");
  if (mad.empty() || mad.size() > kMadBytes) return Status(EINVAL, "a MAD is 1 to 256 bytes");
  uint8_t body[2 * sizeof(Gid16) + kMadBytes];  // sgid, dgid, the MAD
  memcpy(body, sgid.data(), sizeof(Gid16));
  memcpy(body + sizeof(Gid16), dgid.data(), sizeof(Gid16));
  memcpy(body + 2 * sizeof(Gid16), mad.data(), mad.size());
  const std::span<const uint8_t> message(body, 2 * sizeof(Gid16) + mad.size());
  fabric::HostRegistry& r = local_.registry();
  size_t taken = 0;
  for (uint32_t s = 0; s < r.processes().extent(); ++s) {
    if (slot == kEveryOtherProcess ? s == local_.slot() : s != slot) continue;
    const uint64_t owner = r.processes().slot(s).owner.load(std::memory_order_acquire);
    if (owner == 0 || !fabric::ProcessToken(owner).IsAlive()) continue;
    if (channel_->Send(r.name(), s, fabric::ChannelKind::kMad, message).ok()) ++taken;
  }
  if (taken == 0) return Status(EHOSTUNREACH, "no live process of this host took the MAD");
  counters_.qp1_forwarded.fetch_add(1, std::memory_order_relaxed);
  return Status::Ok();
}

void WireFabric::DeliverForwardedMad(std::span<const uint8_t> body) {
  // Anyone on the host may write to the channel: sized before use, as a datagram is.
  constexpr size_t kGids = 2 * sizeof(Gid16);
  if (body.size() <= kGids || body.size() > kGids + kMadBytes) {
    counters_.malformed.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  std::lock_guard lock(qp1_mu_);
  if (qp1_handler_ == nullptr) {
    counters_.qp1_unhandled.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  Qp1Datagram d;
  memcpy(d.sgid.data(), body.data(), sizeof(Gid16));
  memcpy(d.dgid.data(), body.data() + sizeof(Gid16), sizeof(Gid16));
  d.mad = body.subspan(kGids);
  d.forwarded = true;
  qp1_handler_->OnMad(d);
}

void WireFabric::ServeChannel() {
  std::vector<uint8_t> buffer(fabric::ProcessChannel::kMaxMessage);
  for (;;) {
    fabric::ChannelMessage m;
    auto got = channel_->Receive(buffer, &m);
    if (!got.ok() || !*got) return;
    if (m.kind == fabric::ChannelKind::kQuestion) {
      const std::string report = Report();
      (void)channel_->Answer(m, {reinterpret_cast<const uint8_t*>(report.data()), report.size()});
      continue;
    }
    if (m.kind == fabric::ChannelKind::kMad) {
      DeliverForwardedMad(m.body);
      continue;
    }
    if (m.kind != fabric::ChannelKind::kForward) continue;
    // Checked by the member that received it (ICRC included); parsed again, as anything written
    // to this socket may be (a local user can send here what it could send to UDP 4791).
    auto parsed = packet::Parse(m.body);
    if (!parsed.ok() || parsed->info->transport != packet::Transport::kRc) {
      counters_.malformed.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    DeliverResponse(*parsed, m.body, local_.slot());
  }
}

std::string WireFabric::Report() {
  auto line = [](std::string* out, const char* fmt, auto... v) {
    char b[512];
    snprintf(b, sizeof b, fmt, v...);
    *out += b;
  };
  std::string out;
  const WireCounters& c = counters_;
  auto n = [](const std::atomic<uint64_t>& a) { return static_cast<unsigned long long>(a.load(std::memory_order_relaxed)); };
  line(&out, "pid %d\n", static_cast<int>(getpid()));
  {
    std::lock_guard lock(mu_);
    for (const auto& p : ports_) line(&out, "  port %s\n", p->udp->local().ToString().c_str());
  }
  line(&out, "  device sent=%llu received=%llu icrc_errors=%llu malformed=%llu unknown_qp=%llu unsupported=%llu "
       "forwarded=%llu misdelivered=%llu acks_coalesced=%llu busy_polling=%d\n", n(c.sent), n(c.received),
       n(c.icrc_errors), n(c.malformed), n(c.unknown_qp), n(c.unsupported), n(c.forwarded), n(c.misdelivered),
       n(c.acks_coalesced), Receiving() == this ? 1 : 0);
  line(&out, "  qp1 received=%llu refused=%llu unhandled=%llu sent=%llu forwarded=%llu\n", n(c.qp1_received),
       n(c.qp1_refused), n(c.qp1_unhandled), n(c.qp1_sent), n(c.qp1_forwarded));
  {
    std::lock_guard lock(qp1_mu_);
    if (qp1_handler_ != nullptr) out += qp1_handler_->Report();
  }
  std::lock_guard lock(links_mu_);
  for (const auto& [qpn, link] : links_) {
    const WireRequesterCounters& r = link->counters();
    line(&out, "  qp 0x%x requester packets=%llu retransmitted=%llu acks=%llu read_responses=%llu atomic_acks=%llu "
         "naks_sequence=%llu naks_rnr=%llu naks_error=%llu\n", qpn, n(r.packets), n(r.retransmitted), n(r.acks),
         n(r.read_responses), n(r.atomic_acks), n(r.naks_sequence), n(r.naks_rnr), n(r.naks_error));
  }
  // The responder side of this process's QPs (counted by whichever process received).
  fabric::HostRegistry& registry = local_.registry();
  for (uint32_t i = 0; i < registry.qps().extent(); ++i) {
    auto& entry = fabric::EntryOf<fabric::QpEntry>(registry.qps().slot(i));
    const uint32_t qpn = entry.qp_num.load(std::memory_order_acquire);
    if (qpn == 0 || entry.process_slot.load(std::memory_order_relaxed) != local_.slot()) continue;
    const auto* e = static_cast<const QpEndpoint*>(local_.At(entry.block));
    if (e == nullptr || e->qp_num != qpn) continue;
    const WireResponderCounters& w = e->wire.counters;
    if (n(w.packets) == 0) continue;
    line(&out, "  qp 0x%x responder packets=%llu out_of_sequence=%llu duplicates=%llu acks=%llu naks_sequence=%llu "
         "naks_rnr=%llu naks_error=%llu dropped=%llu\n", qpn, n(w.packets), n(w.out_of_sequence), n(w.duplicates),
         n(w.acks), n(w.naks_sequence), n(w.naks_rnr), n(w.naks_error), n(w.dropped));
  }
  return out;
}

void WireFabric::Deliver(std::span<const uint8_t> datagram, const UdpAddress& from, const Port& to) {
  counters_.received.fetch_add(1, std::memory_order_relaxed);
  const Gid16 source = GidOfAddress(from);
  const packet::IpUdpInfo flow = FlowOf(source, to.gid, from.port(), RocePort());
  if (pcap_ != nullptr) Record(source, to.gid, from.port(), datagram);
  auto parsed = packet::Parse(datagram);
  if (parsed.ok()) {
    // The ICRC covers the IPv4 ID, which a UDP socket does not show: a Linux socket's DF
    // datagram carries 0, a GSO segment its index, the kernel's rxe a per-packet ID; it is solved
    // for, from one CRC pass (fabric/packet/icrc.h).
    Status icrc = flow.ipv6 ? packet::CheckIcrc(flow, datagram) : packet::RecoverIpv4Id(flow, datagram).status();
    if (!icrc.ok()) parsed = icrc;
  }
  if (!parsed.ok()) {
    // Hardware and rxe drop such packets silently; the counters and the trace say why.
    (parsed.status().code() == EBADMSG ? counters_.icrc_errors : counters_.malformed).fetch_add(1, std::memory_order_relaxed);
    SV_LOG(kTrace, "softverbs0: dropped a datagram from %s: %s", from.ToString().c_str(), parsed.status().rule().c_str());
    return;
  }
  // QP1 is the GSI QP of the port, not a QP of the host registry (rxe_recv.c hdr_check: "qpn == 1"
  // selects port->qp_gsi_index).
  if (parsed->hdr.bth.dest_qp == kQp1) return DeliverQp1(*parsed, from, source, to.gid);
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
      return DeliverResponse(*parsed, datagram, target->process_slot());
    }
    // Responses go to the requester's address at port 4791, whatever its source port was
    // (IBA annex A17.2.1: the destination port is always the RoCEv2 port).
    ResponsePath path;
    path.flow = FlowOf(to.gid, source, RocePort(), RocePort());
    const UdpAddress back = AddressOfGid(source, RocePort());
    Port& port = const_cast<Port&>(to);
    path.send = [this, &port, &back](std::span<const iovec> pieces, std::span<const uint16_t> counts) {
      SendHeldAcks(port);  // responses leave in the order they were made
      return SendDatagrams(port, back, pieces, counts, 0);
    };
    path.coalesce_ack = [this, &port, &back](std::span<const uint8_t> ack) { HoldAck(port, back, ack); };
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
