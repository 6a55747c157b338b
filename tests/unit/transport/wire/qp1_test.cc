// QP1 on the wire (transport/wire/qp1.h): the MAD datagram as rxe builds it, the keys rxe checks,
// and WireFabric's hand-off to the QP1 handler and its send from QP1. The fabric part runs in a
// network namespace this test creates (and deletes), with a veth pair whose two ends carry this
// host's address A (the fabric's) and a peer address B (a plain RoCEv2 port of the test).
#include "transport/wire/qp1.h"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <vector>

#include <gtest/gtest.h>

#include "tests/unit/core/test_context.h"
#include "tests/unit/fabric/packet/capture_reader.h"
#include "tests/unit/fabric/wire/wire_test_util.h"
#include "transport/wire/wire_fabric.h"

namespace softverbs::transport {
namespace {

namespace packet = fabric::packet;
namespace capture = fabric::packet::testing;
using fabric::wire::UdpAddress;
using fabric::wire::UdpPort;

std::vector<uint8_t> SomeMad(uint8_t fill) {
  std::vector<uint8_t> mad(kMadBytes, fill);
  mad[0] = 1, mad[1] = 7, mad[2] = 2, mad[3] = 3;
  return mad;
}

TEST(Qp1Test, PkeyMatchIsRxes) {
  EXPECT_TRUE(PkeyMatch(0xffff, 0xffff));
  EXPECT_TRUE(PkeyMatch(0x7fff, 0xffff));  // a limited member matches a full one
  EXPECT_FALSE(PkeyMatch(0x7fff, 0x7fff));  // two limited members do not
  EXPECT_FALSE(PkeyMatch(0x8001, 0xffff));
  EXPECT_FALSE(PkeyMatch(0x8000, 0x8000));  // the invalid P_Key
}

// The packet of rping's REQ, built from its MAD, equals rxe's byte for byte (ICRC included).
TEST(Qp1Test, TheMadPacketIsRxes) {
  auto pkts = capture::ReadCapture(capture::DataDir() + "rxe_rping_cm.pcap");
  ASSERT_FALSE(pkts.empty());
  const capture::CapturedPacket& req = pkts[0];
  ASSERT_EQ(req.udp_payload.size(), 12u + 8 + kMadBytes + 4);
  EXPECT_EQ(req.flow.src_port, kQp1SourcePort);
  const std::span<const uint8_t> mad(req.udp_payload.data() + 20, kMadBytes);
  uint8_t out[512];
  auto n = BuildMadPacket(mad, 0x00000b, req.flow, out);  // the capture's PSN
  ASSERT_TRUE(n.ok()) << n.status().rule();
  EXPECT_EQ(std::vector<uint8_t>(out, out + *n), req.udp_payload);
  auto parsed = packet::Parse(req.udp_payload, &req.flow);
  ASSERT_TRUE(parsed.ok());
  EXPECT_TRUE(CheckQp1Packet(*parsed).ok());
  EXPECT_FALSE(BuildMadPacket(mad.first(255), 0, req.flow, out).ok());
}

// A UD packet to QP1 with the given keys (and the MAD), parsed back.
std::vector<uint8_t> Qp1Packet(uint8_t opcode, uint16_t pkey, uint32_t qkey, size_t payload,
                               const packet::IpUdpInfo& flow) {
  packet::PacketHeaders h;
  h.bth = {.opcode = opcode, .pkey = pkey, .dest_qp = kQp1, .ack_req = true, .psn = 1};
  h.deth = {qkey, 1};
  std::vector<uint8_t> body(payload, 0x5a);
  std::vector<uint8_t> out(payload + 128);
  const packet::ConstBuffer piece[] = {{body.data(), body.size()}};
  auto n = packet::Build(h, piece, flow, out);
  EXPECT_TRUE(n.ok()) << n.status().rule();
  out.resize(n.ok() ? *n : 0);
  return out;
}

TEST(Qp1Test, KeysOpcodeAndLengthAreCheckedAsRxeDoes) {
  const uint8_t a[4] = {10, 0, 0, 1}, b[4] = {10, 0, 0, 2};
  const packet::IpUdpInfo flow = packet::IpUdpInfo::V4(a, b, kQp1SourcePort);
  auto check = [&](uint8_t opcode, uint16_t pkey, uint32_t qkey, size_t payload) {
    const std::vector<uint8_t> bytes = Qp1Packet(opcode, pkey, qkey, payload, flow);
    auto p = packet::Parse(bytes, &flow);
    EXPECT_TRUE(p.ok()) << p.status().rule();
    return p.ok() ? CheckQp1Packet(*p) : p.status();
  };
  const uint8_t ud_send = packet::op::kUd | packet::op::kSendOnly;
  EXPECT_TRUE(check(ud_send, 0xffff, kGsiQkey, 256).ok());
  EXPECT_TRUE(check(ud_send, 0x7fff, kGsiQkey, 256).ok());
  EXPECT_TRUE(check(ud_send, 0xffff, kGsiQkey, 100).ok());  // the agent judges its length
  Status bad = check(ud_send, 0x8001, kGsiQkey, 256);
  EXPECT_EQ(bad.code(), EINVAL);
  EXPECT_NE(bad.rule().find("check_keys"), std::string::npos);
  EXPECT_EQ(check(ud_send, 0xffff, 0x11111111, 256).code(), EINVAL);
  EXPECT_EQ(check(ud_send, 0xffff, kGsiQkey, 257).code(), EINVAL);
  Status rc = check(packet::op::kRc | packet::op::kSendOnly, 0xffff, kGsiQkey, 256);
  EXPECT_EQ(rc.code(), EINVAL);
  EXPECT_NE(rc.rule().find("check_type_state"), std::string::npos);
}

// ---- WireFabric, in a namespace of the test ----

struct Collector : Qp1Handler {
  void OnMad(const Qp1Datagram& d) override {
    std::lock_guard lock(mu);
    got.push_back({d.sgid, d.dgid, std::vector<uint8_t>(d.mad.begin(), d.mad.end()), d.src_qp});
    cv.notify_all();
  }
  struct Got {
    Gid16 sgid, dgid;
    std::vector<uint8_t> mad;
    uint32_t src_qp;
  };
  bool WaitFor(size_t n) {  // bounded: a lost datagram fails the test instead of hanging it
    std::unique_lock lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(10), [&] { return got.size() >= n; });
  }
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Got> got;
};

class Qp1FabricTest : public core::CoreTest {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root to create a network namespace and a veth pair";
    // Fresh names and addresses for each test of the process: the fabric keeps its ports (one
    // joined in an earlier test's namespace would take this address's datagrams nowhere).
    static int instance = 0;
    ++instance;
    const std::string id = std::to_string(getpid()) + "x" + std::to_string(instance % 10);
    ns_ = "svqp1-" + id;
    const std::string dev_a = "svqa" + id, dev_b = "svqb" + id;  // <= 15 bytes (IFNAMSIZ)
    const std::string v4 = "10.78." + std::to_string(getpid() % 256) + ".";
    ip_a_ = v4 + std::to_string(4 * (instance % 60) + 1);
    ip_b_ = v4 + std::to_string(4 * (instance % 60) + 2);
    created_ = true;
    Ip("netns add " + ns_);
    Ip("-n " + ns_ + " link set lo up");
    Ip("-n " + ns_ + " link add " + dev_a + " type veth peer name " + dev_b);
    Ip("-n " + ns_ + " link set " + dev_a + " up");
    Ip("-n " + ns_ + " link set " + dev_b + " up");
    Ip("-n " + ns_ + " addr add " + ip_a_ + "/24 dev " + dev_a);
    Ip("-n " + ns_ + " addr add " + ip_b_ + "/24 dev " + dev_b);
    gid_a_ = GidOfAddress(fabric::wire::testing_util::Addr(ip_a_, 0));
    gid_b_ = GidOfAddress(fabric::wire::testing_util::Addr(ip_b_, 0));
    InNamespace([&] {
      fabric_ = &WireFabric::Get(context_->local());
      fabric_->Listen(std::span(&gid_a_, 1));
      fabric::wire::UdpPortOptions o;
      o.local = AddressOfGid(gid_b_, WireFabric::RocePort());
      auto peer = UdpPort::Open(o);
      ASSERT_TRUE(peer.ok()) << peer.status().rule();
      peer_ = std::move(peer.value());
    });
  }
  void TearDown() override {
    if (fabric_ != nullptr) fabric_->SetQp1Handler(nullptr);
    peer_.reset();
    if (created_) Sh("ip netns del " + ns_);  // deletes the veth pair with it
  }
  // Runs `fn` with this thread in the test's namespace: sockets opened there stay there.
  void InNamespace(const std::function<void()>& fn) {
    UniqueFd self(open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
    UniqueFd target(open(("/run/netns/" + ns_).c_str(), O_RDONLY | O_CLOEXEC));
    ASSERT_TRUE(self.valid() && target.valid());
    ASSERT_EQ(setns(target.get(), CLONE_NEWNET), 0) << strerror(errno);
    fn();
    ASSERT_EQ(setns(self.get(), CLONE_NEWNET), 0) << strerror(errno);
  }
  static int Sh(const std::string& cmd) { return system(("timeout 20 " + cmd + " >/dev/null 2>&1").c_str()); }
  static void Ip(const std::string& args) { ASSERT_EQ(Sh("ip " + args), 0) << "ip " << args; }

  // The peer B sends `datagram` (built for the flow B:4791 -> A:4791) to A.
  packet::IpUdpInfo PeerFlow() const {
    packet::IpUdpInfo f = packet::IpUdpInfo::V4(gid_b_.data() + 12, gid_a_.data() + 12, WireFabric::RocePort());
    f.dst_port = WireFabric::RocePort();
    return f;
  }
  void PeerSends(const std::vector<uint8_t>& datagram) {
    const iovec one{const_cast<uint8_t*>(datagram.data()), datagram.size()};
    ASSERT_TRUE(peer_->Send(AddressOfGid(gid_a_, WireFabric::RocePort()), 0, {&one, 1}).ok());
  }
  // Waits (bounded) until `counter` exceeds `before`.
  static bool CountedPast(const std::atomic<uint64_t>& counter, uint64_t before) {
    for (int i = 0; i < 1000 && counter.load() <= before; ++i) usleep(10000);
    return counter.load() > before;
  }

  std::string ns_, ip_a_, ip_b_;
  bool created_ = false;
  Gid16 gid_a_{}, gid_b_{};
  WireFabric* fabric_ = nullptr;
  std::unique_ptr<UdpPort> peer_;
  Collector handler_;  // outlives every delivery: TearDown withdraws it first
};

TEST_F(Qp1FabricTest, AMadToQp1ReachesTheHandlerWithItsSource) {
  Collector& handler = handler_;
  fabric_->SetQp1Handler(&handler);
  uint8_t buf[512];
  const std::vector<uint8_t> mad = SomeMad(0x21);
  auto n = BuildMadPacket(mad, 7, PeerFlow(), buf);
  ASSERT_TRUE(n.ok());
  PeerSends({buf, buf + *n});
  ASSERT_TRUE(handler.WaitFor(1));
  std::lock_guard lock(handler.mu);
  EXPECT_EQ(handler.got[0].sgid, gid_b_);
  EXPECT_EQ(handler.got[0].dgid, gid_a_);
  EXPECT_EQ(handler.got[0].mad, mad);
  EXPECT_EQ(handler.got[0].src_qp, 1u);
}

TEST_F(Qp1FabricTest, WrongKeysAndNoHandlerAreCountedAndDropped) {
  Collector& handler = handler_;
  fabric_->SetQp1Handler(&handler);
  const WireCounters& c = fabric_->counters();
  const uint8_t ud_send = packet::op::kUd | packet::op::kSendOnly;
  uint64_t before = c.qp1_refused.load();
  PeerSends(Qp1Packet(ud_send, 0xffff, 0x12345678, 256, PeerFlow()));  // Q_Key
  ASSERT_TRUE(CountedPast(c.qp1_refused, before));
  before = c.qp1_refused.load();
  PeerSends(Qp1Packet(ud_send, 0x8001, kGsiQkey, 256, PeerFlow()));  // P_Key
  ASSERT_TRUE(CountedPast(c.qp1_refused, before));
  before = c.qp1_refused.load();
  PeerSends(Qp1Packet(packet::op::kUc | packet::op::kSendOnly, 0xffff, kGsiQkey, 0, PeerFlow()));
  ASSERT_TRUE(CountedPast(c.qp1_refused, before));
  // Nothing registered: like a datagram to an unknown QP.
  fabric_->SetQp1Handler(nullptr);
  before = c.qp1_unhandled.load();
  PeerSends(Qp1Packet(ud_send, 0xffff, kGsiQkey, 256, PeerFlow()));
  ASSERT_TRUE(CountedPast(c.qp1_unhandled, before));
  std::lock_guard lock(handler.mu);
  EXPECT_TRUE(handler.got.empty());
}

TEST_F(Qp1FabricTest, SendMadLeavesFromQp1AsRxeSendsIt) {
  const std::vector<uint8_t> mad = SomeMad(0x42);
  InNamespace([&] {  // the fabric binds its source-port socket at the first send
    Status s = fabric_->SendMad(gid_a_, gid_b_, mad);
    ASSERT_TRUE(s.ok()) << s.rule();
  });
  auto got = fabric::wire::testing_util::Drain(*peer_, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(GidOfAddress(got[0].source), gid_a_);
  EXPECT_EQ(got[0].source.port(), kQp1SourcePort);
  packet::IpUdpInfo flow = packet::IpUdpInfo::V4(gid_a_.data() + 12, gid_b_.data() + 12, got[0].source.port());
  flow.dst_port = WireFabric::RocePort();
  auto p = packet::Parse(got[0].bytes, &flow);  // ICRC included
  ASSERT_TRUE(p.ok()) << p.status().rule();
  EXPECT_EQ(p->hdr.bth.opcode, packet::op::kUd | packet::op::kSendOnly);
  EXPECT_EQ(p->hdr.bth.pkey, 0xffff);
  EXPECT_EQ(p->hdr.bth.dest_qp, 1u);
  EXPECT_EQ(p->hdr.deth.qkey, kGsiQkey);
  EXPECT_EQ(p->hdr.deth.src_qp, 1u);
  EXPECT_EQ(std::vector<uint8_t>(p->payload.begin(), p->payload.end()), mad);
  // And a MAD of another size is refused before anything leaves.
  InNamespace([&] { EXPECT_EQ(fabric_->SendMad(gid_a_, gid_b_, std::span(mad).first(100)).code(), EINVAL); });
}

}  // namespace
}  // namespace softverbs::transport
