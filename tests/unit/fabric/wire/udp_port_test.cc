#include "fabric/wire/udp_port.h"

#include <sys/wait.h>

#include <map>
#include <memory>
#include <set>

#include <gtest/gtest.h>

#include "tests/unit/fabric/wire/wire_test_util.h"

namespace softverbs::fabric::wire {
namespace {

using namespace testing_util;

constexpr int kMembers = 4;
// Member k (id k + 1) owns QPNs [First(k), First(k) + 0xff].
uint32_t First(int k) { return 0x100 * static_cast<uint32_t>(k + 1); }

struct Misdelivery {
  int at;  // the member that got it
  uint32_t qpn;
  MemberId owner;
};

// Four members of one group on 127.0.0.1:<free port>, each owning a QPN range.
class SteeredGroupTest : public testing::Test {
 protected:
  void SetUp() override {
    port_ = FreePort(ip_);
    ASSERT_NE(port_, 0);
    for (int k = 0; k < kMembers; ++k) {
      ASSERT_TRUE(table_.Assign(First(k), First(k) + 0xff, k + 1).ok());
      ports_.push_back(OpenMember(k));
      ASSERT_NE(ports_.back(), nullptr);
    }
    // Several source ports, so that the hash alone would spread datagrams over the members.
    for (int i = 0; i < 4; ++i) senders_.push_back(PlainSocket(ip_));
  }

  std::unique_ptr<UdpPort> OpenMember(int k) {
    UdpPortOptions o;
    o.local = Addr(ip_, port_);
    o.steering = &table_;
    o.member = static_cast<MemberId>(k + 1);
    o.faults = "";
    o.misdelivered = [this, k](std::span<const uint8_t> d, const UdpAddress&, MemberId owner) {
      misdelivered_.push_back({k, DestQpOf(d).value_or(~0u), owner});
    };
    Result<std::unique_ptr<UdpPort>> p = UdpPort::Open(std::move(o));
    EXPECT_TRUE(p.ok()) << p.status().rule();
    return p.ok() ? std::move(p.value()) : nullptr;
  }

  // Sends 8 datagrams into each listed member's range and checks each reached its owner directly.
  void ExpectSteered(const std::vector<int>& members) {
    std::map<int, size_t> want;
    const size_t misdelivered_before = misdelivered_.size();
    uint32_t seq = 0;
    for (int k : members)
      for (uint32_t i = 0; i < 8; ++i, ++seq) {
        ASSERT_TRUE(SendTo(senders_[seq % senders_.size()].get(), Addr(ip_, port_), Bth(First(k) + i * 31, seq)));
        ++want[k];
      }
    for (int k : members) {
      std::vector<Received> got = Drain(*ports_[k], want[k]);
      ASSERT_EQ(got.size(), want[k]) << "member " << k;
      for (const Received& r : got) {
        EXPECT_GE(QpnOf(r.bytes), First(k));
        EXPECT_LE(QpnOf(r.bytes), First(k) + 0xff);
      }
    }
    EXPECT_EQ(misdelivered_.size(), misdelivered_before) << "a datagram reached a member that does not own it";
  }

  const std::string ip_ = "127.0.0.1";
  uint16_t port_ = 0;
  LocalSteeringTable table_;
  std::vector<std::unique_ptr<UdpPort>> ports_;
  std::vector<UniqueFd> senders_;
  std::vector<Misdelivery> misdelivered_;
};

TEST_F(SteeredGroupTest, EachDatagramReachesTheMemberOwningItsDestQp) {
  EXPECT_EQ(table_.Order(), (std::vector<MemberId>{1, 2, 3, 4}));
  ExpectSteered({0, 1, 2, 3});
}

// Closing member 1 moves the last socket (member 3) into slot 1 in the kernel; the table mirrors
// that and the closing member re-attaches the program through a remaining member's socket.
TEST_F(SteeredGroupTest, AfterAMemberLeavesTheOthersAreSteeredAgain) {
  ports_[1].reset();
  EXPECT_EQ(table_.Order(), (std::vector<MemberId>{1, 4, 3}));
  ExpectSteered({0, 2, 3});
  // QPNs of the member that left take the hash fallback and reach someone's Misdelivered hook.
  ASSERT_TRUE(SendTo(senders_[0].get(), Addr(ip_, port_), Bth(First(1) + 5, 99)));
  for (int k : {0, 2, 3}) Drain(*ports_[k], 1, 200);
  ASSERT_EQ(misdelivered_.size(), 1u);
  EXPECT_EQ(misdelivered_[0].qpn, First(1) + 5);
  EXPECT_EQ(misdelivered_[0].owner, 2u);
  // A new member joins at the end and is steered to at once.
  ports_[1] = OpenMember(1);
  ASSERT_NE(ports_[1], nullptr);
  EXPECT_EQ(table_.Order(), (std::vector<MemberId>{1, 4, 3, 2}));
  ExpectSteered({0, 1, 2, 3});
}

TEST_F(SteeredGroupTest, StaleSteeringHandsTheDatagramToTheMisdeliveredHookUntilResteered) {
  ASSERT_TRUE(table_.Assign(First(0), First(0) + 0xf, 4).ok());  // QPNs move from member 0 to 3
  ASSERT_TRUE(SendTo(senders_[0].get(), Addr(ip_, port_), Bth(First(0) + 1, 1)));
  EXPECT_TRUE(Drain(*ports_[0], 1, 500).empty());  // the old program still picks member 0...
  ASSERT_EQ(misdelivered_.size(), 1u);             // ...which hands it over, naming the owner
  EXPECT_EQ(misdelivered_[0].at, 0);
  EXPECT_EQ(misdelivered_[0].owner, 4u);
  ASSERT_TRUE(ports_[2]->Resteer().ok());  // any member may re-attach the group's program
  ASSERT_TRUE(SendTo(senders_[0].get(), Addr(ip_, port_), Bth(First(0) + 1, 2)));
  std::vector<Received> got = Drain(*ports_[3], 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(SeqOf(got[0].bytes), 2u);
  EXPECT_EQ(misdelivered_.size(), 1u);
}

TEST(UdpPortTest, APortHeldWithoutReuseportIsReportedAsTaken) {
  UniqueFd holder = PlainSocket("127.0.0.1");
  ASSERT_TRUE(holder.valid());
  UdpPortOptions o;
  o.local = Addr("127.0.0.1", BoundPort(holder.get()));
  o.faults = "";
  Result<std::unique_ptr<UdpPort>> p = UdpPort::Open(o);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), EADDRINUSE);
  EXPECT_NE(p.status().rule().find("without SO_REUSEPORT"), std::string::npos) << p.status().rule();
}

// A reuseport group belongs to one uid (udp_lib_lport_inuse): another user gets EADDRINUSE, and
// the Status says so.
TEST(UdpPortTest, AnotherUserCannotJoinTheGroup) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run a child as uid 65534 (setresuid)";
  UdpPortOptions o;
  o.local = Addr("127.0.0.1", FreePort("127.0.0.1"));
  o.faults = "";
  Result<std::unique_ptr<UdpPort>> mine = UdpPort::Open(o);
  ASSERT_TRUE(mine.ok()) << mine.status().rule();
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    alarm(20);  // bounds the child whatever happens
    close(fds[0]);
    std::string report = "setresuid failed";
    if (setresgid(65534, 65534, 65534) == 0 && setresuid(65534, 65534, 65534) == 0) {
      Result<std::unique_ptr<UdpPort>> theirs = UdpPort::Open(o);
      report = theirs.ok() ? "joined" : std::to_string(theirs.status().code()) + " " + theirs.status().rule();
    }
    ssize_t ignored = write(fds[1], report.data(), report.size());
    (void)ignored;
    _exit(0);
  }
  close(fds[1]);
  std::string report;
  char buf[512];
  for (ssize_t n; (n = read(fds[0], buf, sizeof(buf))) > 0;) report.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_EQ(report.rfind(std::to_string(EADDRINUSE) + " ", 0), 0u) << report;
  EXPECT_NE(report.find("uid 0"), std::string::npos) << report;
  EXPECT_NE(report.find("belongs to one user"), std::string::npos) << report;
}

TEST(UdpPortTest, WildcardAddressesAndBadFaultSpecsAreRefused) {
  UdpPortOptions o;
  o.local = Addr("0.0.0.0", 4791);
  o.faults = "";
  Result<std::unique_ptr<UdpPort>> p = UdpPort::Open(o);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), EINVAL);
  o.local = Addr("::", 4791);
  EXPECT_EQ(UdpPort::Open(o).status().code(), EINVAL);
  o.local = Addr("127.0.0.1", FreePort("127.0.0.1"));
  o.faults = "loss=5";
  p = UdpPort::Open(o);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().rule().find("percentage"), std::string::npos) << p.status().rule();
}

TEST(UdpPortTest, SendsFromTheBoundAddressAndTheRequestedSourcePort) {
  UdpPortOptions o;
  o.local = Addr("127.0.0.1", FreePort("127.0.0.1"));
  o.faults = "";
  auto port = UdpPort::Open(o);
  ASSERT_TRUE(port.ok()) << port.status().rule();
  UniqueFd rx = PlainSocket("127.0.0.1");
  const UdpAddress dest = Addr("127.0.0.1", BoundPort(rx.get()));
  const uint16_t sport = FreePort("127.0.0.1");
  std::vector<uint8_t> a = Bth(1, 1), b = Bth(1, 2, 1024);
  iovec head{a.data(), 12}, tail{a.data() + 12, a.size() - 12}, whole{b.data(), b.size()};
  const iovec pieces_a[] = {head, tail};
  const TxDatagram batch[] = {{&dest, 0, pieces_a}, {&dest, sport, std::span<const iovec>(&whole, 1)}};
  Result<size_t> sent = (*port)->SendBatch(batch);
  ASSERT_TRUE(sent.ok()) << sent.status().rule();
  EXPECT_EQ(*sent, 2u);
  for (const auto& [bytes, from_port] : {std::pair{a, o.local.port()}, std::pair{b, sport}}) {
    std::vector<uint8_t> got(2048);
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    const ssize_t n = recvfrom(rx.get(), got.data(), got.size(), 0, reinterpret_cast<sockaddr*>(&ss), &len);
    ASSERT_EQ(n, static_cast<ssize_t>(bytes.size()));
    got.resize(static_cast<size_t>(n));
    EXPECT_EQ(got, bytes);
    EXPECT_EQ(UdpAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&ss), len), Addr("127.0.0.1", from_port));
  }
}

// Equal-sized datagrams to one destination leave as one UDP_SEGMENT send; a receiver without GRO
// gets each datagram on its own, intact, the shorter last one included -- over IPv4 with segment
// k's ICRC moved to IPv4 ID k, the ID the kernel gives that segment.
TEST(UdpPortTest, AnEqualSizedBatchArrivesAsSeparateDatagramsEachIcrcForItsSegmentsId) {
  UdpPortOptions o;
  o.local = Addr("127.0.0.1", FreePort("127.0.0.1"));
  o.faults = "";
  auto tx = UdpPort::Open(o);
  ASSERT_TRUE(tx.ok()) << tx.status().rule();
  UdpPortOptions r = o;
  r.local = Addr("127.0.0.1", FreePort("127.0.0.1"));
  r.gro = false;
  auto rx = UdpPort::Open(r);
  ASSERT_TRUE(rx.ok()) << rx.status().rule();
  EXPECT_EQ((*rx)->receive_bytes(), 9216u);
  std::vector<std::vector<uint8_t>> payloads;
  for (uint32_t i = 0; i < 20; ++i) payloads.push_back(Bth(3, i, i < 19 ? 1024 : 40));
  std::vector<iovec> iov;
  for (auto& p : payloads) {  // two pieces each: header and the rest, as a sender would gather them
    iov.push_back({p.data(), 12});
    iov.push_back({p.data() + 12, p.size() - 12});
  }
  std::vector<TxDatagram> batch;
  for (size_t i = 0; i < payloads.size(); ++i) batch.push_back({&r.local, 0, std::span<const iovec>(&iov[2 * i], 2)});
  Result<size_t> n = (*tx)->SendBatch(batch);
  ASSERT_TRUE(n.ok()) << n.status().rule();
  EXPECT_EQ(*n, batch.size());
  std::vector<Received> got = Drain(**rx, batch.size());
  ASSERT_EQ(got.size(), batch.size());
  for (const Received& g : got) {
    EXPECT_FALSE(g.joined);
    const uint32_t seq = SeqOf(g.bytes);
    EXPECT_EQ(IcrcMovedTo(g.bytes, payloads.at(seq)), std::optional<uint16_t>(seq)) << "datagram " << seq;
  }
  EXPECT_EQ((*rx)->stats().received, batch.size());
}

// A GRO receiver gets the same burst joined (one buffer, the segment size beside it) and cut
// apart it is the same datagrams; a plain send is never joined.
TEST(UdpPortTest, WithGroABurstArrivesJoinedAndCutApartIsTheSameDatagrams) {
  UdpPortOptions o;
  o.local = Addr("127.0.0.1", FreePort("127.0.0.1"));
  o.faults = "";
  auto tx = UdpPort::Open(o);
  ASSERT_TRUE(tx.ok()) << tx.status().rule();
  UdpPortOptions r = o;
  r.local = Addr("127.0.0.1", FreePort("127.0.0.1"));
  auto rx = UdpPort::Open(r);
  ASSERT_TRUE(rx.ok()) << rx.status().rule();
  ASSERT_EQ((*rx)->receive_bytes(), 65535u) << "UDP_GRO refused by this kernel";
  std::vector<std::vector<uint8_t>> payloads;
  for (uint32_t i = 0; i < 12; ++i) payloads.push_back(Bth(3, i, i < 11 ? 4112 : 100));
  std::vector<iovec> iov;
  for (auto& p : payloads) iov.push_back({p.data(), p.size()});
  std::vector<TxDatagram> batch;
  for (auto& v : iov) batch.push_back({&r.local, 0, std::span<const iovec>(&v, 1)});
  Result<size_t> n = (*tx)->SendBatch(batch);
  ASSERT_TRUE(n.ok()) << n.status().rule();
  ASSERT_EQ(*n, batch.size());
  std::vector<uint8_t> lone = Bth(3, 99, 300);
  ASSERT_TRUE(SendTo(PlainSocket("127.0.0.1").get(), r.local, lone));
  std::vector<Received> got = Drain(**rx, batch.size() + 1);
  ASSERT_EQ(got.size(), batch.size() + 1);
  size_t joined = 0;
  for (const Received& g : got) {
    const uint32_t seq = SeqOf(g.bytes);
    if (seq == 99) {
      EXPECT_EQ(g.bytes, lone);
      EXPECT_FALSE(g.joined);
      continue;
    }
    joined += g.joined;
    EXPECT_EQ(IcrcMovedTo(g.bytes, payloads.at(seq)), std::optional<uint16_t>(seq)) << "datagram " << seq;
  }
  EXPECT_EQ(joined, batch.size());  // loopback keeps a GSO send whole up to the socket
  EXPECT_EQ((*rx)->stats().received, batch.size() + 1);
}

TEST(UdpPortTest, RuntsAndOversizedDatagramsAreDroppedAndCounted) {
  UdpPortOptions o;
  o.local = Addr("127.0.0.1", FreePort("127.0.0.1"));
  o.faults = "";
  auto port = UdpPort::Open(o);
  ASSERT_TRUE(port.ok()) << port.status().rule();
  UniqueFd tx = PlainSocket("127.0.0.1");
  ASSERT_TRUE(SendTo(tx.get(), o.local, {1, 2, 3, 4, 5}));
  ASSERT_TRUE(SendTo(tx.get(), o.local, Bth(7, 1, 200)));
  ASSERT_TRUE(SendTo(tx.get(), o.local, Bth(7, 2, 64)));
  std::vector<uint8_t> buf(100);
  std::vector<Received> got;
  while (got.empty()) {
    pollfd p{(*port)->fd(), POLLIN, 0};
    ASSERT_EQ(poll(&p, 1, 2000), 1);
    std::vector<RxDatagram> slots(1, RxDatagram{buf.data(), 100, 0, {}});
    Result<size_t> n = (*port)->ReceiveBatch(slots);
    ASSERT_TRUE(n.ok());
    if (*n == 1) got.push_back({std::vector<uint8_t>(buf.begin(), buf.begin() + slots[0].length), slots[0].source});
  }
  EXPECT_EQ(SeqOf(got[0].bytes), 2u);
  EXPECT_EQ((*port)->stats().runts, 1u);
  EXPECT_EQ((*port)->stats().truncated, 1u);
}

TEST(UdpPortTest, Ipv6GroupIsSteered) {
  UniqueFd probe = PlainSocket("::1");
  if (!probe.valid()) GTEST_SKIP() << "no IPv6 loopback (::1) in this network namespace";
  const uint16_t port = BoundPort(probe.get());
  probe.reset();
  LocalSteeringTable table;
  std::vector<std::unique_ptr<UdpPort>> members;
  for (MemberId m : {1, 2}) {
    ASSERT_TRUE(table.Assign(static_cast<uint32_t>(m) * 0x10, static_cast<uint32_t>(m) * 0x10 + 0xf, m).ok());
    UdpPortOptions o;
    o.local = Addr("::1", port);
    o.steering = &table;
    o.member = m;
    o.faults = "";
    auto p = UdpPort::Open(o);
    ASSERT_TRUE(p.ok()) << p.status().rule();
    members.push_back(std::move(p.value()));
  }
  std::vector<UniqueFd> tx;
  for (int i = 0; i < 4; ++i) tx.push_back(PlainSocket("::1"));
  for (uint32_t i = 0; i < 8; ++i) ASSERT_TRUE(SendTo(tx[i % 4].get(), Addr("::1", port), Bth(0x10 + (i % 2) * 0x10 + i, i)));
  for (int m = 0; m < 2; ++m) {
    std::vector<Received> got = Drain(*members[m], 4);
    ASSERT_EQ(got.size(), 4u);
    for (const Received& r : got) EXPECT_EQ(QpnOf(r.bytes) & ~0xfu, (m + 1) * 0x10u);
    EXPECT_EQ(members[m]->stats().misdelivered, 0u);
  }
}

TEST(UdpPortTest, TransmitFaultsApplyToSends) {
  UdpPortOptions o;
  o.local = Addr("127.0.0.1", FreePort("127.0.0.1"));
  o.faults = "tx:dup=100%,seed=3";
  auto sender = UdpPort::Open(o);
  ASSERT_TRUE(sender.ok()) << sender.status().rule();
  UdpPortOptions r;
  r.local = Addr("127.0.0.1", FreePort("127.0.0.1"));
  r.faults = "";
  auto receiver = UdpPort::Open(r);
  ASSERT_TRUE(receiver.ok());
  for (uint32_t i = 0; i < 5; ++i) {
    std::vector<uint8_t> d = Bth(9, i);
    iovec v{d.data(), d.size()};
    ASSERT_TRUE((*sender)->Send(r.local, 0, std::span<const iovec>(&v, 1)).ok());
  }
  std::vector<Received> got = Drain(**receiver, 10);
  ASSERT_EQ(got.size(), 10u);
  std::multiset<uint32_t> seqs;
  for (const Received& g : got) seqs.insert(SeqOf(g.bytes));
  for (uint32_t i = 0; i < 5; ++i) EXPECT_EQ(seqs.count(i), 2u);
  EXPECT_EQ((*sender)->faults()->stats(Direction::kTx).duplicated, 5u);
}

// Delayed received datagrams are held, then released through fd()'s timer: a caller that only
// polls fd() still gets them (no thread, no spinning).
TEST(UdpPortTest, DelayedReceivesAreReleasedThroughThePollableFd) {
  UdpPortOptions o;
  o.local = Addr("127.0.0.1", FreePort("127.0.0.1"));
  o.faults = "rx:delay=50ms";
  auto port = UdpPort::Open(o);
  ASSERT_TRUE(port.ok()) << port.status().rule();
  EXPECT_NE((*port)->fd(), -1);
  UniqueFd tx = PlainSocket("127.0.0.1");
  for (uint32_t i = 0; i < 3; ++i) ASSERT_TRUE(SendTo(tx.get(), o.local, Bth(5, i)));
  std::vector<Received> got = Drain(**port, 3);
  ASSERT_EQ(got.size(), 3u);
  for (uint32_t i = 0; i < 3; ++i) EXPECT_EQ(SeqOf(got[i].bytes), i);  // one delay for all: order kept
  EXPECT_EQ((*port)->faults()->stats(Direction::kRx).delayed, 3u);
  EXPECT_EQ((*port)->faults()->held(), 0u);
}

}  // namespace
}  // namespace softverbs::fabric::wire
