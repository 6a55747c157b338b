#include "fabric/wire/udp_port.h"

#include <netinet/in.h>
#include <netinet/udp.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/clock.h"
#include "base/log.h"
#include "fabric/packet/icrc.h"
#include "fabric/packet/opcode.h"
#include "fabric/wire/port_conflict.h"

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103  // include/uapi/linux/udp.h
#endif
#ifndef UDP_GRO
#define UDP_GRO 104  // include/uapi/linux/udp.h
#endif
#ifndef UDP_NO_CHECK6_RX
#define UDP_NO_CHECK6_RX 102  // include/uapi/linux/udp.h
#endif

namespace softverbs::fabric::wire {
namespace {

constexpr size_t kMaxBatch = 64;  // datagrams per sendmmsg/recvmmsg call
// UDP_SEGMENT limits (include/linux/udp.h UDP_MAX_SEGMENTS, net/ipv4/udp.c udp_send_skb): at most
// 64 segments on older kernels, and one IP datagram's worth of payload.
constexpr size_t kMaxGsoSegments = 64;
constexpr size_t kMaxGsoBytes = 65000;
constexpr size_t kMaxGsoPieces = 256;

Status Errno(const std::string& what) { return Status(errno, what + ": " + strerror(errno)); }

Status SetInt(int fd, int level, int name, int value, const char* what) {
  if (setsockopt(fd, level, name, &value, sizeof(value)) != 0) return Errno(std::string("setsockopt ") + what);
  return Status::Ok();
}

Status Refused(const UdpAddress& local, Status s) {
  SV_LOG(kError, "UdpPort::Open(%s): %s", local.ToString().c_str(), s.rule().c_str());
  return s;
}

}  // namespace

Status ConfigureRoceSocket(int fd, const UdpAddress& local) {
  SV_RETURN_IF_ERROR(SetInt(fd, SOL_SOCKET, SO_REUSEPORT, 1, "SO_REUSEPORT"));
  if (local.family() == AF_INET6) {
    SV_RETURN_IF_ERROR(SetInt(fd, IPPROTO_IPV6, IPV6_V6ONLY, 1, "IPV6_V6ONLY"));
    // rxe sends a zero UDP checksum over IPv6 too (rxe_net.c prepare_udp_hdr); without this the
    // kernel drops those datagrams (net/ipv6/udp.c). The ICRC protects the payload instead.
    SV_RETURN_IF_ERROR(SetInt(fd, IPPROTO_UDP, UDP_NO_CHECK6_RX, 1, "UDP_NO_CHECK6_RX"));
    SV_RETURN_IF_ERROR(SetInt(fd, IPPROTO_IPV6, IPV6_MTU_DISCOVER, IPV6_PMTUDISC_DO, "IPV6_MTU_DISCOVER"));
  } else {
    // rxe sets DF (rxe_net.c prepare4): RoCE never fragments, a datagram over the path MTU fails.
    SV_RETURN_IF_ERROR(SetInt(fd, IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO, "IP_MTU_DISCOVER"));
  }
  // A message arrives as a burst of packets (a 64 KiB RDMA WRITE is 64 of them at MTU 1024):
  // room for a few MiB, so a burst is not dropped before the receive thread runs. FORCE needs
  // CAP_NET_ADMIN; without it the kernel caps SO_RCVBUF at net.core.rmem_max. Best effort.
  constexpr int kReceiveBuffer = 8 << 20;
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &kReceiveBuffer, sizeof kReceiveBuffer) != 0)
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &kReceiveBuffer, sizeof kReceiveBuffer);
  return Status::Ok();
}

UdpPort::UdpPort(UdpPortOptions options)
    : local_(options.local), steering_(options.steering), member_(options.member),
      misdelivered_(std::move(options.misdelivered)), gso_ok_(options.gso) {}

Result<std::unique_ptr<UdpPort>> UdpPort::Open(UdpPortOptions options) {
  const UdpAddress local = options.local;
  if (local.empty() || local.IsWildcard())
    return Refused(local, Invalid("a group member binds the advertised GID's IP, never a wildcard: steering "
                                  "and the source address (rxe check_addr) are per IP"));
  if (options.steering != nullptr && options.member == kNoMember)
    return Refused(local, Invalid("a steered member needs a member id"));
  std::optional<FaultSpec> spec;
  if (options.faults) {
    Result<FaultSpec> parsed = FaultSpec::Parse(*options.faults);
    if (!parsed.ok()) return Refused(local, parsed.status());
    spec = std::move(parsed.value());
  } else {
    Result<std::optional<FaultSpec>> env = FaultSpec::FromEnvironment();
    if (!env.ok()) return Refused(local, env.status());
    spec = std::move(env.value());
  }
  const bool gro = options.gro && options.steering == nullptr;
  std::unique_ptr<UdpPort> port(new UdpPort(std::move(options)));
  port->sock_.reset(socket(local.family(), SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_UDP));
  if (!port->sock_.valid()) return Refused(local, Errno("socket"));
  Status s = ConfigureRoceSocket(port->sock_.get(), local);
  // A burst sent with UDP_SEGMENT then crosses a veth (or any device taking GSO) as one buffer and
  // reaches this socket in one piece instead of being cut apart for it (net/ipv4/udp.c
  // udp_unexpected_gso). Best effort: a kernel without UDP_GRO delivers datagrams one by one.
  if (s.ok() && gro) port->gro_ = SetInt(port->sock_.get(), IPPROTO_UDP, UDP_GRO, 1, "UDP_GRO").ok();
  if (s.ok()) s = port->Join();
  if (s.ok() && spec && (spec->Affects(Direction::kTx) || spec->Affects(Direction::kRx))) s = port->SetUpFaults(*spec);
  if (!s.ok()) return Refused(local, s);
  return port;
}

// bind() appends the socket to the kernel's group; recording it and re-attaching the program
// happen under the group lock, so every member's view of the slot order stays the kernel's.
Status UdpPort::Join() {
  auto bind_socket = [this]() -> Status {
    if (bind(sock_.get(), local_.sa(), local_.len()) == 0) return Status::Ok();
    if (errno == EADDRINUSE) return PortTakenStatus(local_);
    return Errno("bind(" + local_.ToString() + ")");
  };
  if (steering_ == nullptr) return bind_socket();
  SteeringLock lock(*steering_);
  SV_RETURN_IF_ERROR(bind_socket());
  Status s = steering_->Joined(member_, sock_.get());
  if (!s.ok()) {
    sock_.reset();  // never joined as far as the table knows: leave the kernel group too
    return s;
  }
  return AttachLocked(sock_.get());
}

Status UdpPort::SetUpFaults(const FaultSpec& spec) {
  faults_ = std::make_unique<FaultInjector>(spec);
  timer_.reset(timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
  epoll_.reset(epoll_create1(EPOLL_CLOEXEC));
  if (!timer_.valid() || !epoll_.valid()) return Errno("timerfd/epoll for held datagrams");
  for (int fd : {sock_.get(), timer_.get()}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) return Errno("epoll_ctl");
  }
  SV_LOG(kInfo, "UdpPort(%s): fault injection on, seed %llu", local_.ToString().c_str(),
         static_cast<unsigned long long>(spec.seed()));
  return Status::Ok();
}

UdpPort::~UdpPort() {
  if (steering_ == nullptr || !sock_.valid()) return;
  SteeringLock lock(*steering_);
  sock_.reset();  // the kernel moves the group's last socket into our slot...
  steering_->Left(member_);  // ...and the table does the same
  // The program is the group's: re-attach it through any remaining member's socket.
  UniqueFd other = steering_->AnyMemberSocket();
  if (other.valid()) {
    Status s = AttachLocked(other.get());
    if (!s.ok()) SV_LOG(kError, "UdpPort::~UdpPort(%s): re-steering the group failed: %s", local_.ToString().c_str(), s.rule().c_str());
  }
}

Status UdpPort::Resteer() {
  if (steering_ == nullptr) return Status::Ok();
  SteeringLock lock(*steering_);
  return AttachLocked(sock_.get());
}

Status UdpPort::AttachLocked(int fd) {
  std::vector<sock_filter> prog = BuildSteeringProgram(steering_->SlotRanges());
  if (prog.size() > kMaxSteeringInstructions)
    return Status(E2BIG, "the steering program needs " + std::to_string(prog.size()) +
                             " instructions, more than cBPF's 4096: too many fragmented QPN ranges");
  sock_fprog fprog{static_cast<unsigned short>(prog.size()), prog.data()};
  if (setsockopt(fd, SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &fprog, sizeof(fprog)) != 0)
    return Errno("SO_ATTACH_REUSEPORT_CBPF");
  return Status::Ok();
}

// ---- send ----

Result<int> UdpPort::SenderFor(uint16_t src_port) {
  if (src_port == 0 || src_port == local_.port()) return sock_.get();
  auto it = senders_.find(src_port);
  if (it != senders_.end()) return it->second.get();
  // Bound to the same IP so the source address is still the GID's (rxe check_addr); SO_REUSEPORT
  // so this user's processes can share a source port. Nothing is ever read from it.
  UdpAddress from = local_;
  from.set_port(src_port);
  UniqueFd fd(socket(from.family(), SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_UDP));
  if (!fd.valid()) return Errno("socket");
  SV_RETURN_IF_ERROR(ConfigureRoceSocket(fd.get(), from));
  SV_RETURN_IF_ERROR(SetInt(fd.get(), SOL_SOCKET, SO_RCVBUF, 1, "SO_RCVBUF"));
  if (bind(fd.get(), from.sa(), from.len()) != 0)
    return errno == EADDRINUSE ? PortTakenStatus(from) : Errno("bind(" + from.ToString() + ")");
  const int raw = fd.get();
  senders_.emplace(src_port, std::move(fd));
  return raw;
}

uint16_t UdpPort::UsableSourcePort(uint16_t wanted) {
  Result<int> fd = SenderFor(wanted);
  if (fd.ok()) return wanted;
  SV_LOG(kDebug, "softverbs0: RoCEv2 source port %u on %s is unavailable (%s): sending from %u", wanted,
         local_.ToString().c_str(), fd.status().rule().c_str(), local_.port());
  return local_.port();
}

Status UdpPort::Send(const UdpAddress& dest, uint16_t src_port, std::span<const iovec> pieces) {
  const TxDatagram one{&dest, src_port, pieces};
  Result<size_t> n = SendBatch(std::span<const TxDatagram>(&one, 1));
  if (!n.ok()) return n.status();
  return Status::Ok();
}

static size_t DatagramLength(const TxDatagram& t) {
  size_t n = 0;
  for (const iovec& v : t.pieces) n += v.iov_len;
  return n;
}

// How many datagrams from the start of `b` one UDP_SEGMENT send can carry: same source port and
// destination, equal lengths (the last may be shorter, as a message's LAST packet after MIDDLEs).
// Over IPv4 each datagram takes one more piece: its ICRC, moved to the segment's IP ID.
size_t UdpPort::GsoRunLength(std::span<const TxDatagram> b) const {
  const size_t extra = local_.family() == AF_INET ? 1 : 0;
  const size_t seg = DatagramLength(b[0]);
  size_t total = seg, pieces = b[0].pieces.size() + extra, i = 1;
  for (; i < b.size() && i < kMaxGsoSegments; ++i) {
    const size_t len = DatagramLength(b[i]);
    if (b[i].src_port != b[0].src_port || !(*b[i].dest == *b[0].dest) || len > seg || len == 0 ||
        total + len > kMaxGsoBytes || pieces + b[i].pieces.size() + extra > kMaxGsoPieces)
      break;
    total += len;
    pieces += b[i].pieces.size() + extra;
    if (len < seg) return i + 1;
  }
  return i;
}

Result<size_t> UdpPort::SendBatch(std::span<const TxDatagram> batch) {
  ServiceFaults();
  if (faults_ && faults_->Affects(Direction::kTx)) return SendFaulty(batch);
  size_t done = 0;
  while (done < batch.size()) {
    Result<int> fd = SenderFor(batch[done].src_port);
    if (!fd.ok()) return done > 0 ? Result<size_t>(done) : Result<size_t>(fd.status());
    const size_t gso = gso_ok_ ? GsoRunLength(batch.subspan(done)) : 1;
    // Otherwise one sendmmsg per run from the same source port, up to where a GSO run starts.
    size_t end = done + 1;
    while (gso < 2 && end < batch.size() && end - done < kMaxBatch && batch[end].src_port == batch[done].src_port &&
           !(gso_ok_ && GsoRunLength(batch.subspan(end)) >= 2))
      ++end;
    const size_t run = gso >= 2 ? gso : end - done;
    Result<size_t> n = gso >= 2 ? SendGso(*fd, batch.subspan(done, run)) : SendRun(*fd, batch.subspan(done, run));
    if (!n.ok()) return done > 0 ? Result<size_t>(done) : n;
    done += *n;
    if (*n < run) break;  // the socket took only part of the run
  }
  return done;
}

static Status SendError(const UdpAddress& dest) {
  if (errno == EAGAIN || errno == ENOBUFS) return Status(EAGAIN, "send: the socket buffer is full");
  if (errno == EMSGSIZE)
    return Status(EMSGSIZE, "send to " + dest.ToString() + ": the datagram exceeds the path MTU (DF is set, as rxe does)");
  return Errno("send to " + dest.ToString());
}

Result<size_t> UdpPort::SendRun(int fd, std::span<const TxDatagram> run) {
  mmsghdr msgs[kMaxBatch];
  for (size_t i = 0; i < run.size(); ++i) {
    msgs[i] = mmsghdr{};
    msgs[i].msg_hdr.msg_name = const_cast<sockaddr*>(run[i].dest->sa());
    msgs[i].msg_hdr.msg_namelen = run[i].dest->len();
    msgs[i].msg_hdr.msg_iov = const_cast<iovec*>(run[i].pieces.data());
    msgs[i].msg_hdr.msg_iovlen = run[i].pieces.size();
  }
  int n;
  do n = sendmmsg(fd, msgs, static_cast<unsigned>(run.size()), 0);
  while (n < 0 && errno == EINTR);
  if (n < 0) return SendError(*run[0].dest);
  stats_.sent += static_cast<uint64_t>(n);
  return static_cast<size_t>(n);
}

// Appends datagram `t`'s pieces to `iov` without its last `cut` bytes; returns the new count.
static size_t AppendTrimmed(const TxDatagram& t, size_t cut, iovec* iov, size_t at) {
  size_t keep = DatagramLength(t) - cut;
  for (const iovec& v : t.pieces) {
    if (keep == 0) break;
    const size_t n = std::min(keep, v.iov_len);
    iov[at++] = iovec{v.iov_base, n};
    keep -= n;
  }
  return at;
}

// The last 4 bytes of datagram `t` (its ICRC), wherever its pieces put them.
static uint32_t TrailingIcrc(const TxDatagram& t) {
  uint8_t tail[packet::kIcrcBytes];
  size_t want = sizeof(tail), skip = DatagramLength(t) - sizeof(tail);
  for (const iovec& v : t.pieces) {
    const auto* p = static_cast<const uint8_t*>(v.iov_base);
    const size_t from = std::min(skip, v.iov_len);
    skip -= from;
    const size_t n = std::min(want, v.iov_len - from);
    memcpy(tail + sizeof(tail) - want, p + from, n);
    want -= n;
  }
  return packet::LoadIcrc(tail);
}

// One sendmsg with UDP_SEGMENT (udp(7)): the stack cuts it into datagrams of the first one's size,
// so a receiver sees ordinary datagrams. Measured on veth (README "GSO/GRO"): 4-5x less CPU per
// datagram than sendmmsg for 1-4 KiB. Over IPv4 segment k leaves with IP ID k, which its ICRC
// must cover (built for ID 0): the ICRC goes out from a copy moved to that ID (icrc.h), the
// caller's bytes stay as they are.
Result<size_t> UdpPort::SendGso(int fd, std::span<const TxDatagram> run) {
  iovec iov[kMaxGsoPieces];
  uint8_t icrcs[kMaxGsoSegments][packet::kIcrcBytes];
  size_t pieces = 0;
  const bool ipv4 = local_.family() == AF_INET;
  for (size_t k = 0; k < run.size(); ++k) {
    const TxDatagram& t = run[k];
    if (!ipv4 || k == 0 || DatagramLength(t) < packet::kIcrcBytes) {  // ID 0: as built
      for (const iovec& v : t.pieces) iov[pieces++] = v;
      continue;
    }
    const uint32_t icrc = TrailingIcrc(t) ^ packet::Ipv4IdIcrcEffect(static_cast<uint16_t>(k), DatagramLength(t));
    packet::StoreIcrc(icrc, icrcs[k]);
    pieces = AppendTrimmed(t, packet::kIcrcBytes, iov, pieces);
    iov[pieces++] = iovec{icrcs[k], packet::kIcrcBytes};
  }
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(uint16_t))] = {};
  msghdr h{const_cast<sockaddr*>(run[0].dest->sa()), run[0].dest->len(), iov, pieces, control, sizeof(control), 0};
  cmsghdr* c = CMSG_FIRSTHDR(&h);
  c->cmsg_level = SOL_UDP;
  c->cmsg_type = UDP_SEGMENT;
  c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
  const uint16_t seg = static_cast<uint16_t>(DatagramLength(run[0]));
  memcpy(CMSG_DATA(c), &seg, sizeof(seg));
  ssize_t n;
  do n = sendmsg(fd, &h, 0);
  while (n < 0 && errno == EINTR);
  if (n >= 0) {
    stats_.sent += run.size();
    return run.size();
  }
  // EIO: the route's device cannot take GSO (udp_send_skb); EINVAL: a segment over the MTU (the
  // plain send reports EMSGSIZE) or an old kernel. Either way send this run datagram by datagram.
  if (errno == EIO || errno == ENOPROTOOPT) gso_ok_ = false;
  if (errno == EIO || errno == EINVAL || errno == ENOPROTOOPT) return SendRun(fd, run);
  return SendError(*run[0].dest);
}

// With faults the datagrams are copied: the injector may hold them past this call.
Result<size_t> UdpPort::SendFaulty(std::span<const TxDatagram> batch) {
  std::vector<Datagram> out;
  const uint64_t now = ClockNs(CLOCK_MONOTONIC);
  for (const TxDatagram& t : batch) {
    Datagram dg{*t.dest, t.src_port, {}};
    for (const iovec& v : t.pieces) {
      const auto* p = static_cast<const uint8_t*>(v.iov_base);
      dg.bytes.insert(dg.bytes.end(), p, p + v.iov_len);
    }
    faults_->Process(Direction::kTx, std::move(dg), now, out);
  }
  Status first_error;
  size_t sent = 0;
  for (const Datagram& dg : out) {
    Status s = SendOne(dg);
    sent += s.ok();
    if (!s.ok() && first_error.ok()) first_error = s;
  }
  ArmTimer();
  // Like a lossy wire, lost datagrams count as taken; a local error with nothing sent still reports.
  if (!first_error.ok() && sent == 0) return first_error;
  return batch.size();
}

Status UdpPort::SendOne(const Datagram& dg) {
  iovec piece{const_cast<uint8_t*>(dg.bytes.data()), dg.bytes.size()};
  const TxDatagram t{&dg.peer, dg.local_port, std::span<const iovec>(&piece, 1)};
  Result<int> fd = SenderFor(dg.local_port);
  if (!fd.ok()) return fd.status();
  Result<size_t> n = SendRun(*fd, std::span<const TxDatagram>(&t, 1));
  return n.ok() ? Status::Ok() : n.status();
}

// ---- faults: held datagrams ----

void UdpPort::ServiceFaults() {
  if (!faults_) return;
  uint64_t expirations;
  ssize_t ignored = read(timer_.get(), &expirations, sizeof(expirations));  // re-armed below
  (void)ignored;
  const uint64_t now = ClockNs(CLOCK_MONOTONIC);
  std::vector<Datagram> tx;
  faults_->ReleaseDue(Direction::kTx, now, tx);
  for (const Datagram& dg : tx) {
    Status s = SendOne(dg);
    if (!s.ok()) SV_LOG(kWarn, "UdpPort(%s): a held datagram was not sent: %s", local_.ToString().c_str(), s.rule().c_str());
  }
  faults_->ReleaseDue(Direction::kRx, now, rx_ready_);
  ArmTimer();
}

// The timer fires at the next held datagram's deadline, or at once while released datagrams wait
// to be taken, so that fd() stays readable exactly while ReceiveBatch has work.
void UdpPort::ArmTimer() {
  uint64_t at = faults_->NextDeadline();
  if (!rx_ready_.empty()) at = 1;  // an absolute time long past: expires at once
  itimerspec spec{};
  if (at != UINT64_MAX) {
    spec.it_value.tv_sec = static_cast<time_t>(at / 1000000000);
    spec.it_value.tv_nsec = static_cast<long>(at % 1000000000);
  }
  timerfd_settime(timer_.get(), TFD_TIMER_ABSTIME, &spec, nullptr);
}

// ---- receive ----

bool UdpPort::Accept(RxDatagram& d) {
  const std::optional<uint32_t> qp = DestQpOf(std::span<const uint8_t>(d.buf, d.length));
  if (!qp) {
    ++stats_.runts;  // not RoCEv2: a BTH is 12 bytes
    return false;
  }
  if (steering_ == nullptr) return true;
  const MemberId owner = steering_->Owner(*qp);
  if (owner == member_) return true;
  // Steering was stale (a member joined or left, or a QPN moved) or nobody owns the QPN.
  ++stats_.misdelivered;
  if (misdelivered_) misdelivered_(std::span<const uint8_t>(d.buf, d.length), d.source, owner);
  return false;
}

size_t UdpPort::TakeReady(std::span<RxDatagram> slots) {
  size_t n = 0, used = 0;
  for (; used < rx_ready_.size() && n < slots.size(); ++used) {
    Datagram& dg = rx_ready_[used];
    if (dg.bytes.size() > slots[n].capacity) {
      ++stats_.truncated;
      continue;
    }
    memcpy(slots[n].buf, dg.bytes.data(), dg.bytes.size());
    slots[n].length = static_cast<uint32_t>(dg.bytes.size());
    slots[n].segment = 0;
    slots[n].source = dg.peer;
    if (Accept(slots[n])) ++n;
  }
  rx_ready_.erase(rx_ready_.begin(), rx_ready_.begin() + static_cast<ptrdiff_t>(used));
  return n;
}

// A received datagram into the fault injector, cut apart first if GRO joined several: faults
// act on the datagrams a wire would carry.
void UdpPort::InjectReceived(const RxDatagram& d, uint64_t now) {
  const uint32_t step = d.segment != 0 ? d.segment : d.length;
  for (uint32_t at = 0; at < d.length; at += step) {
    const uint32_t n = std::min(step, d.length - at);
    faults_->Process(Direction::kRx, Datagram{d.source, 0, {d.buf + at, d.buf + at + n}}, now, rx_ready_);
  }
}

// The size of the datagrams GRO joined into this message (the UDP_GRO control message), or 0.
static uint32_t GroSegment(const msghdr& h, uint32_t length) {
  for (cmsghdr* c = CMSG_FIRSTHDR(&h); c != nullptr; c = CMSG_NXTHDR(const_cast<msghdr*>(&h), c)) {
    if (c->cmsg_level != SOL_UDP || c->cmsg_type != UDP_GRO || c->cmsg_len < CMSG_LEN(sizeof(int))) continue;
    int size;
    memcpy(&size, CMSG_DATA(c), sizeof(size));
    return size > 0 && static_cast<uint32_t>(size) < length ? static_cast<uint32_t>(size) : 0;
  }
  return 0;
}

Result<size_t> UdpPort::ReceiveBatch(std::span<RxDatagram> slots) {
  ServiceFaults();
  const bool faulty = faults_ && faults_->Affects(Direction::kRx);
  size_t n = faulty ? TakeReady(slots) : 0;
  const size_t want = std::min(slots.size() - n, kMaxBatch);
  if (want == 0) return n;
  mmsghdr msgs[kMaxBatch];
  iovec iov[kMaxBatch];
  sockaddr_storage from[kMaxBatch];
  struct alignas(cmsghdr) Control {
    char bytes[CMSG_SPACE(sizeof(int))];
  };
  Control control[kMaxBatch];
  for (size_t i = 0; i < want; ++i) {
    iov[i] = iovec{slots[n + i].buf, slots[n + i].capacity};
    msgs[i] = mmsghdr{};
    msgs[i].msg_hdr = msghdr{&from[i], sizeof(from[i]), &iov[i], 1, gro_ ? control[i].bytes : nullptr,
                             gro_ ? sizeof(control[i].bytes) : 0, 0};
  }
  int got;
  do got = recvmmsg(sock_.get(), msgs, static_cast<unsigned>(want), MSG_DONTWAIT, nullptr);
  while (got < 0 && errno == EINTR);
  if (got < 0) {
    if (errno == EAGAIN) return n;
    return Errno("recvmmsg on " + local_.ToString());
  }
  const uint64_t now = faulty ? ClockNs(CLOCK_MONOTONIC) : 0;
  const size_t base = n;
  for (size_t i = 0; i < static_cast<size_t>(got); ++i) {
    RxDatagram& d = slots[base + i];
    d.length = msgs[i].msg_len;
    d.segment = gro_ ? GroSegment(msgs[i].msg_hdr, d.length) : 0;
    d.source = UdpAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&from[i]), msgs[i].msg_hdr.msg_namelen);
    stats_.received += d.segment != 0 ? (d.length + d.segment - 1) / d.segment : 1;
    if (msgs[i].msg_hdr.msg_flags & MSG_TRUNC) {
      ++stats_.truncated;
    } else if (faulty) {
      InjectReceived(d, now);
    } else if (Accept(d)) {
      if (n != base + i) std::swap(slots[n], d);  // keep the accepted ones at the front
      ++n;
    }
  }
  if (faulty) n += TakeReady(slots.subspan(n));
  if (faults_) ArmTimer();
  return n;
}

}  // namespace softverbs::fabric::wire
