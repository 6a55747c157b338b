// softverbs-relay: a UDP relay for tests, with the wire's fault injector in the path.
//
//   softverbs-relay --listen IP:PORT --to IP:PORT [--faults SPEC] [--max-seconds N]
//   softverbs-relay --transparent IP --listen 0.0.0.0:PORT [--faults SPEC] [--max-seconds N]
//
// Datagrams arriving at --listen from anyone but --to go to --to (direction "tx" of the fault
// spec); datagrams from --to go back to the last sender (direction "rx"). It impairs a path
// softverbs does not control: loss, duplication, reordering, delay and corruption exactly as
// SOFTVERBS_FAULTS describes (fabric/wire/README.md), reproducibly from the spec's seed. Prints
// "ready" once bound, and exits after --max-seconds (default 60) at the latest, or at SIGTERM;
// either way it prints what it did per direction (seen, lost, duplicated, ...) on stderr.
//
// --transparent (IPv4, root): a bump in the wire for RoCEv2, whose ICRC covers the IP addresses
// (IBA annex A17.3.3), so a relay may not change them. The relay runs on a router whose policy
// routing delivers the forwarded UDP datagrams locally (`ip rule ... ipproto udp dport PORT
// lookup T` with `local 0.0.0.0/0 dev lo table T`); each goes on to its original destination
// (IP_RECVORIGDSTADDR) with its original source address (IP_TRANSPARENT, IP_PKTINFO), from the
// relay's port, PORT (softverbs sends from 4791). Datagrams from the IP given are direction
// "tx", all others "rx".
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/unique_fd.h"
#include "fabric/wire/faults.h"
#include "fabric/wire/udp_port.h"

namespace softverbs::fabric::wire {
namespace {

volatile sig_atomic_t g_stop = 0;  // SIGTERM/SIGINT: report and exit

struct Options {
  UdpAddress listen, to;
  std::string faults;
  unsigned max_seconds = 60;
  std::string transparent;  // --transparent: the IP whose datagrams are "tx"
};

int Usage(const char* why) {
  fprintf(stderr, "softverbs-relay: %s\nusage: softverbs-relay --listen IP:PORT --to IP:PORT "
                  "[--faults SPEC] [--max-seconds N]\n       softverbs-relay --transparent IP --listen 0.0.0.0:PORT "
                  "[--faults SPEC] [--max-seconds N]\n", why);
  return 2;
}

// "10.0.0.1:4791" or "[fd00::1]:4791".
Result<UdpAddress> ParseEndpoint(const std::string& s) {
  const size_t colon = s.rfind(':');
  if (colon == std::string::npos) return Invalid("'" + s + "' is not IP:PORT");
  std::string ip = s.substr(0, colon);
  if (ip.size() >= 2 && ip.front() == '[' && ip.back() == ']') ip = ip.substr(1, ip.size() - 2);
  char* end = nullptr;
  const unsigned long port = strtoul(s.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || port == 0 || port > 65535) return Invalid("'" + s + "' has no valid port");
  return UdpAddress::Parse(ip, static_cast<uint16_t>(port));
}

Result<Options> ParseArgs(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) return Invalid(arg + " needs a value");
    const std::string value = argv[++i];
    if (arg == "--listen" || arg == "--to") {
      Result<UdpAddress> a = ParseEndpoint(value);
      if (!a.ok()) return a.status();
      (arg == "--listen" ? o.listen : o.to) = a.value();
    } else if (arg == "--transparent") {
      o.transparent = value;
    } else if (arg == "--faults") {
      o.faults = value;
    } else if (arg == "--max-seconds") {
      o.max_seconds = static_cast<unsigned>(strtoul(value.c_str(), nullptr, 10));
      if (o.max_seconds == 0 || o.max_seconds > 3600) return Invalid("--max-seconds is 1..3600");
    } else {
      return Invalid("unknown option " + arg);
    }
  }
  if (!o.transparent.empty()) {
    if (o.listen.empty() || o.listen.family() != AF_INET || !o.to.empty())
      return Invalid("--transparent takes an IPv4 --listen and no --to");
    Result<UdpAddress> a = UdpAddress::Parse(o.transparent, 0);
    if (!a.ok() || a->family() != AF_INET) return Invalid("--transparent takes an IPv4 address");
    return o;
  }
  if (o.listen.empty() || o.to.empty()) return Invalid("--listen and --to are required");
  if (o.listen.family() != o.to.family()) return Invalid("--listen and --to must be the same IP version");
  return o;
}

class Relay {
 public:
  Relay(Options o, FaultSpec spec) : o_(std::move(o)), faults_(std::move(spec)) {}

  Status Open() {
    sock_.reset(socket(o_.listen.family(), SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    timer_.reset(timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
    if (!sock_.valid() || !timer_.valid()) return Status(errno, "socket/timerfd failed");
    SV_RETURN_IF_ERROR(ConfigureRoceSocket(sock_.get(), o_.listen));  // accepts rxe's zero IPv6 checksums
    const int one = 1;
    if (!o_.transparent.empty() &&
        (setsockopt(sock_.get(), SOL_IP, IP_TRANSPARENT, &one, sizeof one) != 0 ||
         setsockopt(sock_.get(), SOL_IP, IP_RECVORIGDSTADDR, &one, sizeof one) != 0))
      return Status(errno, std::string("IP_TRANSPARENT/IP_RECVORIGDSTADDR: ") + strerror(errno) + " (needs CAP_NET_ADMIN)");
    if (bind(sock_.get(), o_.listen.sa(), o_.listen.len()) != 0)
      return Status(errno, "bind(" + o_.listen.ToString() + "): " + strerror(errno));
    return Status::Ok();
  }

  void Run() {
    const uint64_t end = ClockNs(CLOCK_MONOTONIC) + uint64_t{o_.max_seconds} * 1000000000ull;
    for (uint64_t now; !g_stop && (now = ClockNs(CLOCK_MONOTONIC)) < end;) {
      pollfd p[2] = {{sock_.get(), POLLIN, 0}, {timer_.get(), POLLIN, 0}};
      const int wait_ms = static_cast<int>((end - now) / 1000000 + 1);
      if (poll(p, 2, wait_ms) < 0 && errno != EINTR) break;
      if (p[0].revents & POLLIN) ReceiveAll();
      if (p[1].revents & POLLIN) {
        uint64_t expirations;
        ssize_t ignored = read(timer_.get(), &expirations, sizeof(expirations));
        (void)ignored;
      }
      std::vector<Datagram> out;
      faults_.ReleaseDue(Direction::kTx, ClockNs(CLOCK_MONOTONIC), out);
      faults_.ReleaseDue(Direction::kRx, ClockNs(CLOCK_MONOTONIC), out);
      SendAll(out);
      ArmTimer();
    }
  }

  void Report() const {
    for (Direction d : {Direction::kTx, Direction::kRx}) {
      const FaultStats& s = faults_.stats(d);
      fprintf(stderr, "softverbs-relay %s: seen %llu lost %llu duplicated %llu reordered %llu delayed %llu corrupted %llu\n",
              d == Direction::kTx ? "tx" : "rx", (unsigned long long)s.seen, (unsigned long long)s.lost,
              (unsigned long long)s.duplicated, (unsigned long long)s.reordered, (unsigned long long)s.delayed,
              (unsigned long long)s.corrupted);
    }
  }

 private:
  void ReceiveAll() {
    if (!o_.transparent.empty()) return ReceiveTransparent();
    std::vector<uint8_t> buf(65536);
    std::vector<Datagram> out;
    for (;;) {
      sockaddr_storage ss{};
      socklen_t len = sizeof(ss);
      const ssize_t n = recvfrom(sock_.get(), buf.data(), buf.size(), 0, reinterpret_cast<sockaddr*>(&ss), &len);
      if (n < 0) break;
      const UdpAddress from = UdpAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&ss), len);
      const bool reverse = from == o_.to;
      if (!reverse) last_client_ = from;
      if (reverse && last_client_.empty()) continue;  // nobody to send it back to yet
      faults_.Process(reverse ? Direction::kRx : Direction::kTx,
                      Datagram{reverse ? last_client_ : o_.to, 0, {buf.begin(), buf.begin() + n}},
                      ClockNs(CLOCK_MONOTONIC), out);
    }
    SendAll(out);
  }

  // --transparent: each datagram keeps its addresses (the ICRC covers them).
  void ReceiveTransparent() {
    std::vector<uint8_t> buf(65536);
    std::vector<Datagram> out;
    const UdpAddress side_a = UdpAddress::Parse(o_.transparent, 0).value();
    for (;;) {
      sockaddr_in from{};
      alignas(cmsghdr) char control[CMSG_SPACE(sizeof(sockaddr_in))];
      iovec iov{buf.data(), buf.size()};
      msghdr msg{};
      msg.msg_name = &from;
      msg.msg_namelen = sizeof from;
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      msg.msg_control = control;
      msg.msg_controllen = sizeof control;
      const ssize_t n = recvmsg(sock_.get(), &msg, 0);
      if (n < 0) break;
      UdpAddress to;
      for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c))
        if (c->cmsg_level == SOL_IP && c->cmsg_type == IP_ORIGDSTADDR)
          to = UdpAddress::FromSockaddr(reinterpret_cast<const sockaddr*>(CMSG_DATA(c)), sizeof(sockaddr_in));
      if (to.empty()) continue;
      UdpAddress source = UdpAddress::FromSockaddr(reinterpret_cast<const sockaddr*>(&from), sizeof from);
      const bool tx = source.IpString() == side_a.IpString();
      faults_.Process(tx ? Direction::kTx : Direction::kRx, Datagram{to, 0, {buf.begin(), buf.begin() + n}, source},
                      ClockNs(CLOCK_MONOTONIC), out);
    }
    SendAll(out);
  }

  // Sends from the original source address and port (the ICRC covers both). A source port other
  // than the relay's own (a requester's per-QP port, 0xc000..) gets a socket of its own bound to
  // that foreign address (IP_TRANSPARENT); nothing is ever sent to such a port, so the socket
  // takes no traffic from the listener. The listener's own port goes out of the listener with
  // IP_PKTINFO (IP_TRANSPARENT allows the foreign source address).
  bool SendAs(const Datagram& dg) {
    if (dg.source.port() != o_.listen.port()) {
      const int fd = SenderFor(dg.source);
      return fd >= 0 && sendto(fd, dg.bytes.data(), dg.bytes.size(), 0, dg.peer.sa(), dg.peer.len()) >= 0;
    }
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(in_pktinfo))] = {};
    iovec iov{const_cast<uint8_t*>(dg.bytes.data()), dg.bytes.size()};
    msghdr msg{};
    msg.msg_name = const_cast<sockaddr*>(dg.peer.sa());
    msg.msg_namelen = dg.peer.len();
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_IP;
    c->cmsg_type = IP_PKTINFO;
    c->cmsg_len = CMSG_LEN(sizeof(in_pktinfo));
    in_pktinfo info{};
    info.ipi_spec_dst = reinterpret_cast<const sockaddr_in*>(dg.source.sa())->sin_addr;
    memcpy(CMSG_DATA(c), &info, sizeof info);
    return sendmsg(sock_.get(), &msg, 0) >= 0;
  }

  int SenderFor(const UdpAddress& source) {
    const std::string key = source.ToString();
    if (auto it = senders_.find(key); it != senders_.end()) return it->second.get();
    UniqueFd fd(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    const int one = 1;
    if (!fd.valid() || setsockopt(fd.get(), SOL_IP, IP_TRANSPARENT, &one, sizeof one) != 0 ||
        setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        ConfigureRoceSocket(fd.get(), source).code() != 0 || bind(fd.get(), source.sa(), source.len()) != 0) {
      fprintf(stderr, "softverbs-relay: cannot send as %s: %s\n", key.c_str(), strerror(errno));
      return -1;
    }
    const int raw = fd.get();
    senders_.emplace(key, std::move(fd));
    return raw;
  }

  void SendAll(const std::vector<Datagram>& out) {
    for (const Datagram& dg : out) {
      if (!dg.source.empty()) {
        if (!SendAs(dg))
          fprintf(stderr, "softverbs-relay: sendmsg %s as %s: %s\n", dg.peer.ToString().c_str(),
                  dg.source.ToString().c_str(), strerror(errno));
      } else if (sendto(sock_.get(), dg.bytes.data(), dg.bytes.size(), 0, dg.peer.sa(), dg.peer.len()) < 0) {
        fprintf(stderr, "softverbs-relay: sendto %s: %s\n", dg.peer.ToString().c_str(), strerror(errno));
      }
    }
  }

  void ArmTimer() {
    const uint64_t at = faults_.NextDeadline();
    itimerspec spec{};
    if (at != UINT64_MAX) {
      spec.it_value.tv_sec = static_cast<time_t>(at / 1000000000);
      spec.it_value.tv_nsec = static_cast<long>(at % 1000000000);
    }
    timerfd_settime(timer_.get(), TFD_TIMER_ABSTIME, &spec, nullptr);
  }

  Options o_;
  FaultInjector faults_;
  UniqueFd sock_, timer_;
  std::map<std::string, UniqueFd> senders_;  // --transparent: by foreign source address:port
  UdpAddress last_client_;
};

int Main(int argc, char** argv) {
  Result<Options> o = ParseArgs(argc, argv);
  if (!o.ok()) return Usage(o.status().rule().c_str());
  Result<FaultSpec> spec = FaultSpec::Parse(o->faults);
  if (!spec.ok()) return Usage(spec.status().rule().c_str());
  struct sigaction sa{};
  sa.sa_handler = [](int) { g_stop = 1; };  // no SA_RESTART: poll returns EINTR
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  Relay relay(o.value(), spec.value());
  Status s = relay.Open();
  if (!s.ok()) {
    fprintf(stderr, "softverbs-relay: %s\n", s.rule().c_str());
    return 1;
  }
  if (o->transparent.empty())
    printf("ready %s -> %s\n", o->listen.ToString().c_str(), o->to.ToString().c_str());
  else
    printf("ready %s transparent\n", o->listen.ToString().c_str());
  fflush(stdout);
  relay.Run();
  relay.Report();
  return 0;
}

}  // namespace
}  // namespace softverbs::fabric::wire

int main(int argc, char** argv) { return softverbs::fabric::wire::Main(argc, argv); }
