// softverbs-relay: a UDP relay for tests, with the wire's fault injector in the path.
//
//   softverbs-relay --listen IP:PORT --to IP:PORT [--faults SPEC] [--max-seconds N]
//
// Datagrams arriving at --listen from anyone but --to go to --to (direction "tx" of the fault
// spec); datagrams from --to go back to the last sender (direction "rx"). It impairs a path
// softverbs does not control: loss, duplication, reordering, delay and corruption exactly as
// SOFTVERBS_FAULTS describes (fabric/wire/README.md), reproducibly from the spec's seed. Prints
// "ready" once bound, and exits after --max-seconds (default 60) at the latest.
#include <poll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/unique_fd.h"
#include "fabric/wire/faults.h"
#include "fabric/wire/udp_port.h"

namespace softverbs::fabric::wire {
namespace {

struct Options {
  UdpAddress listen, to;
  std::string faults;
  unsigned max_seconds = 60;
};

int Usage(const char* why) {
  fprintf(stderr, "softverbs-relay: %s\nusage: softverbs-relay --listen IP:PORT --to IP:PORT "
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
    } else if (arg == "--faults") {
      o.faults = value;
    } else if (arg == "--max-seconds") {
      o.max_seconds = static_cast<unsigned>(strtoul(value.c_str(), nullptr, 10));
      if (o.max_seconds == 0 || o.max_seconds > 3600) return Invalid("--max-seconds is 1..3600");
    } else {
      return Invalid("unknown option " + arg);
    }
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
    if (bind(sock_.get(), o_.listen.sa(), o_.listen.len()) != 0)
      return Status(errno, "bind(" + o_.listen.ToString() + "): " + strerror(errno));
    return Status::Ok();
  }

  void Run() {
    const uint64_t end = ClockNs(CLOCK_MONOTONIC) + uint64_t{o_.max_seconds} * 1000000000ull;
    for (uint64_t now; (now = ClockNs(CLOCK_MONOTONIC)) < end;) {
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

  void SendAll(const std::vector<Datagram>& out) {
    for (const Datagram& dg : out)
      if (sendto(sock_.get(), dg.bytes.data(), dg.bytes.size(), 0, dg.peer.sa(), dg.peer.len()) < 0)
        fprintf(stderr, "softverbs-relay: sendto %s: %s\n", dg.peer.ToString().c_str(), strerror(errno));
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
  UdpAddress last_client_;
};

int Main(int argc, char** argv) {
  Result<Options> o = ParseArgs(argc, argv);
  if (!o.ok()) return Usage(o.status().rule().c_str());
  Result<FaultSpec> spec = FaultSpec::Parse(o->faults);
  if (!spec.ok()) return Usage(spec.status().rule().c_str());
  Relay relay(o.value(), spec.value());
  Status s = relay.Open();
  if (!s.ok()) {
    fprintf(stderr, "softverbs-relay: %s\n", s.rule().c_str());
    return 1;
  }
  printf("ready %s -> %s\n", o->listen.ToString().c_str(), o->to.ToString().c_str());
  fflush(stdout);
  relay.Run();
  relay.Report();
  return 0;
}

}  // namespace
}  // namespace softverbs::fabric::wire

int main(int argc, char** argv) { return softverbs::fabric::wire::Main(argc, argv); }
