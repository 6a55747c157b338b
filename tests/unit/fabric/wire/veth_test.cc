// The wire between two network namespaces joined by a veth pair this test creates (and deletes),
// with softverbs-relay impairing the path. Root only: it creates namespaces and devices.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>

#include <cstdio>
#include <functional>
#include <set>

#include <gtest/gtest.h>

#include "tests/unit/fabric/wire/wire_test_util.h"

namespace softverbs::fabric::wire {
namespace {

using namespace testing_util;

// Runs `fn` with this thread in network namespace `ns` (sockets stay in the namespace they were
// created in, so ports opened here keep working after we return).
void InNamespace(const std::string& ns, const std::function<void()>& fn) {
  UniqueFd self(open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
  UniqueFd target(open(("/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(self.valid() && target.valid()) << ns;
  ASSERT_EQ(setns(target.get(), CLONE_NEWNET), 0) << strerror(errno);
  fn();
  ASSERT_EQ(setns(self.get(), CLONE_NEWNET), 0) << strerror(errno);
}

class VethTest : public testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root to create network namespaces and a veth pair";
    const std::string id = std::to_string(getpid());
    ns_a_ = "svwire-a-" + id;
    ns_b_ = "svwire-b-" + id;
    const std::string dev_a = "svwa" + id, dev_b = "svwb" + id;  // <= 15 bytes (IFNAMSIZ)
    const unsigned net = static_cast<unsigned>(getpid()) % 64 * 4;  // a /30 of 10.77.<pid>.0/24
    const std::string v4 = "10.77." + std::to_string(getpid() % 256) + ".";
    ip_a_ = v4 + std::to_string(net + 1);
    ip_b_ = v4 + std::to_string(net + 2);
    char v6[32];
    snprintf(v6, sizeof(v6), "fd00:77:%x::", static_cast<unsigned>(getpid()) & 0xffff);
    ip6_a_ = std::string(v6) + "1";
    ip6_b_ = std::string(v6) + "2";
    created_ = true;  // from here on TearDown deletes whatever exists of it
    Ip("netns add " + ns_a_);
    Ip("netns add " + ns_b_);
    Ip("link add " + dev_a + " type veth peer name " + dev_b);
    Ip("link set " + dev_a + " netns " + ns_a_);
    Ip("link set " + dev_b + " netns " + ns_b_);
    // MTU 9000: the IB MTU 4096 that rxe uses on such a link (netdev MTU - 80, rxe_param.h).
    for (const auto& [ns, dev, ip, ip6] : {std::tuple{ns_a_, dev_a, ip_a_, ip6_a_}, std::tuple{ns_b_, dev_b, ip_b_, ip6_b_}}) {
      Ip("-n " + ns + " link set lo up");
      Ip("-n " + ns + " link set " + dev + " mtu 9000 up");
      Ip("-n " + ns + " addr add " + ip + "/30 dev " + dev);
      Ip("-n " + ns + " addr add " + ip6 + "/64 dev " + dev + " nodad");
    }
  }

  void TearDown() override {
    if (relay_pid_ > 0) {
      kill(relay_pid_, SIGTERM);
      waitpid(relay_pid_, nullptr, 0);
    }
    if (!created_) return;
    // Deleting a namespace deletes the veth end in it, and with it the pair.
    for (const std::string& ns : {ns_a_, ns_b_}) Sh("ip netns del " + ns);
  }

  static int Sh(const std::string& cmd) { return system(("timeout 20 " + cmd + " >/dev/null 2>&1").c_str()); }
  static void Ip(const std::string& args) { ASSERT_EQ(Sh("ip " + args), 0) << "ip " << args; }

  std::unique_ptr<UdpPort> OpenIn(const std::string& ns, const std::string& ip, uint16_t port,
                                  std::string faults = "") {
    std::unique_ptr<UdpPort> out;
    InNamespace(ns, [&] {
      UdpPortOptions o;
      o.local = Addr(ip, port);
      o.faults = faults;
      Result<std::unique_ptr<UdpPort>> p = UdpPort::Open(o);
      ASSERT_TRUE(p.ok()) << p.status().rule();
      out = std::move(p.value());
    });
    return out;
  }

  // Starts softverbs-relay in namespace `ns`; returns once it printed "ready".
  void StartRelay(const std::string& ns, const std::string& listen, const std::string& to, const std::string& faults) {
    int out[2];
    ASSERT_EQ(pipe2(out, O_CLOEXEC), 0);
    relay_pid_ = fork();
    ASSERT_GE(relay_pid_, 0);
    if (relay_pid_ == 0) {
      UniqueFd target(open(("/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC));
      if (!target.valid() || setns(target.get(), CLONE_NEWNET) != 0) _exit(127);
      dup2(out[1], STDOUT_FILENO);
      execl(SV_RELAY_PATH, "softverbs-relay", "--listen", listen.c_str(), "--to", to.c_str(), "--faults",
            faults.c_str(), "--max-seconds", "60", static_cast<char*>(nullptr));
      _exit(127);
    }
    close(out[1]);
    UniqueFd reader(out[0]);
    pollfd p{reader.get(), POLLIN, 0};
    ASSERT_EQ(poll(&p, 1, 10000), 1) << "softverbs-relay did not start";
    char line[128] = {};
    ASSERT_GT(read(reader.get(), line, sizeof(line) - 1), 0);
    ASSERT_EQ(std::string(line).rfind("ready", 0), 0u) << line;
  }

  // A sends `count` datagrams of 1..4 KiB to B (one warm-up first, so ARP/ND is resolved) and B
  // gets them all, from A's address and port.
  void ExpectExchange(UdpPort& a, UdpPort& b, int count) {
    const UdpAddress to = b.local();
    std::vector<std::vector<uint8_t>> payloads;
    for (int i = 0; i < count + 1; ++i) payloads.push_back(Bth(0x42, static_cast<uint32_t>(i), 1024 + (i * 977) % 3073));
    iovec warm{payloads[0].data(), payloads[0].size()};
    ASSERT_TRUE(a.Send(to, 0, std::span<const iovec>(&warm, 1)).ok());
    ASSERT_EQ(Drain(b, 1).size(), 1u);
    std::vector<iovec> iov;
    std::vector<TxDatagram> batch;
    for (int i = 1; i <= count; ++i) iov.push_back({payloads[i].data(), payloads[i].size()});
    for (int i = 0; i < count; ++i) batch.push_back({&to, 0, std::span<const iovec>(&iov[i], 1)});
    for (size_t done = 0; done < batch.size();) {
      Result<size_t> n = a.SendBatch(std::span<const TxDatagram>(batch).subspan(done));
      ASSERT_TRUE(n.ok()) << n.status().rule();
      done += *n;
    }
    std::vector<Received> got = Drain(b, static_cast<size_t>(count));
    ASSERT_EQ(got.size(), static_cast<size_t>(count));
    for (const Received& r : got) {
      EXPECT_EQ(r.source, a.local());
      // Over IPv4 a datagram sent in a GSO run carries its ICRC moved to its segment's ID.
      const std::optional<uint16_t> id = IcrcMovedTo(r.bytes, payloads[SeqOf(r.bytes)]);
      ASSERT_TRUE(id.has_value()) << "datagram " << SeqOf(r.bytes) << " changed";
      if (a.local().family() == AF_INET6) {
        EXPECT_EQ(*id, 0);
      }
    }
  }

  // A batch of equal-sized datagrams (one UDP_SEGMENT send when the route takes GSO) arrives as
  // the same separate datagrams, the shorter last one included.
  void ExpectEqualSizedBatch(UdpPort& a, UdpPort& b) {
    const UdpAddress to = b.local();
    std::vector<std::vector<uint8_t>> payloads;
    for (uint32_t i = 0; i < 15; ++i) payloads.push_back(Bth(0x43, i, i < 14 ? 4096 : 100));
    std::vector<iovec> iov;
    for (auto& p : payloads) iov.push_back({p.data(), p.size()});
    std::vector<TxDatagram> batch;
    for (auto& v : iov) batch.push_back({&to, 0, std::span<const iovec>(&v, 1)});
    Result<size_t> n = a.SendBatch(batch);
    ASSERT_TRUE(n.ok()) << n.status().rule();
    ASSERT_EQ(*n, batch.size());
    std::vector<Received> got = Drain(b, batch.size());
    ASSERT_EQ(got.size(), batch.size());
    // One run: over IPv4 datagram k carries its ICRC for IPv4 ID k; IPv6 has no ID.
    const bool ipv4 = a.local().family() == AF_INET;
    for (const Received& r : got) {
      const uint32_t seq = SeqOf(r.bytes);
      EXPECT_EQ(IcrcMovedTo(r.bytes, payloads.at(seq)), std::optional<uint16_t>(ipv4 ? seq : 0)) << "datagram " << seq;
    }
  }

  bool created_ = false;
  pid_t relay_pid_ = -1;
  std::string ns_a_, ns_b_, ip_a_, ip_b_, ip6_a_, ip6_b_;
};

TEST_F(VethTest, Ipv4DatagramsCrossTheVethOnTheRocePort) {
  auto a = OpenIn(ns_a_, ip_a_, kRoceV2Port);
  auto b = OpenIn(ns_b_, ip_b_, kRoceV2Port);
  ASSERT_TRUE(a && b);
  ExpectExchange(*a, *b, 48);
  ExpectExchange(*b, *a, 16);
  ExpectEqualSizedBatch(*a, *b);
  // DF is set: a datagram over the path MTU is refused, never fragmented.
  std::vector<uint8_t> big = Bth(0x42, 0, 9100);
  iovec v{big.data(), big.size()};
  Status s = a->Send(b->local(), 0, std::span<const iovec>(&v, 1));
  EXPECT_EQ(s.code(), EMSGSIZE) << s.rule();
}

TEST_F(VethTest, Ipv6DatagramsCrossTheVeth) {
  auto a = OpenIn(ns_a_, ip6_a_, kRoceV2Port);
  auto b = OpenIn(ns_b_, ip6_b_, kRoceV2Port);
  ASSERT_TRUE(a && b);
  ExpectExchange(*a, *b, 48);
  ExpectExchange(*b, *a, 16);
}

// The relay's decisions are the FaultInjector's: the test predicts exactly which datagrams arrive
// (and how often) from the same spec and seed.
TEST_F(VethTest, RelayDropsDuplicatesAndReordersReproducibly) {
  const std::string spec = "tx:loss=20%,tx:dup=20%,tx:reorder=10%,seed=7";
  auto a = OpenIn(ns_a_, ip_a_, kRoceV2Port);
  auto b = OpenIn(ns_b_, ip_b_, kRoceV2Port);
  ASSERT_TRUE(a && b);
  StartRelay(ns_a_, ip_a_ + ":9999", ip_b_ + ":4791", spec);
  const UdpAddress relay = Addr(ip_a_, 9999);
  constexpr uint32_t kCount = 200;

  Result<FaultSpec> parsed = FaultSpec::Parse(spec);
  ASSERT_TRUE(parsed.ok());
  FaultInjector predict(parsed.value());
  std::vector<Datagram> predicted;
  for (uint32_t i = 0; i < kCount; ++i) predict.Process(Direction::kTx, Datagram{relay, 0, Bth(0x123, i, 1024)}, 0, predicted);
  predict.ReleaseDue(Direction::kTx, UINT64_MAX - 1, predicted);
  std::multiset<uint32_t> want, got;
  for (const Datagram& d : predicted) want.insert(SeqOf(d.bytes));
  ASSERT_LT(want.size(), kCount * 12 / 10);  // the spec does drop and duplicate
  ASSERT_NE(want.size(), kCount);

  // In chunks, so no socket buffer on the way overflows (only the relay may lose datagrams).
  for (uint32_t first = 0; first < kCount; first += 20) {
    for (uint32_t i = first; i < first + 20; ++i) {
      std::vector<uint8_t> d = Bth(0x123, i, 1024);
      iovec v{d.data(), d.size()};
      ASSERT_TRUE(a->Send(relay, 0, std::span<const iovec>(&v, 1)).ok());
    }
    for (const Received& r : Drain(*b, want.size() - got.size(), 300)) {
      got.insert(SeqOf(r.bytes));
      EXPECT_EQ(r.source, relay);
    }
  }
  for (const Received& r : Drain(*b, want.size() - got.size(), 2000)) got.insert(SeqOf(r.bytes));
  EXPECT_EQ(got, want);

  // The reverse direction (B back to the relay, on to A) has no rules: nothing is impaired.
  for (uint32_t i = 0; i < 5; ++i) {
    std::vector<uint8_t> d = Bth(0x77, 1000 + i);
    iovec v{d.data(), d.size()};
    ASSERT_TRUE(b->Send(relay, 0, std::span<const iovec>(&v, 1)).ok());
  }
  std::vector<Received> back = Drain(*a, 5);
  ASSERT_EQ(back.size(), 5u);
  for (const Received& r : back) EXPECT_EQ(r.source, relay);
}

}  // namespace
}  // namespace softverbs::fabric::wire
