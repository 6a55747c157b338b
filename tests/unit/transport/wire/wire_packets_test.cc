// Requests as RoCEv2 packets and back (transport/wire/wire_packets.h): a UD datagram built for a
// Request parses into the same Request, with the ICRC of its flow; hostile bytes never make one.
#include "transport/wire/wire_packets.h"

#include <endian.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "transport/codes.h"

namespace softverbs::transport {
namespace {

namespace packet = fabric::packet;
using transport::qp_type::kUd, transport::qp_type::kRc;

class WirePacketsTest : public ::testing::Test {
 protected:
  WirePacketsTest() {
    const uint8_t a[4] = {10, 77, 0, 2}, b[4] = {10, 77, 0, 1};
    flow_ = packet::IpUdpInfo::V4(a, b, 4791);
    r_.qp_type = kUd;
    r_.opcode = WrOpcode::kSendWithImm;
    r_.src_qp = 0x123;
    r_.dest_qp = 0x456;
    r_.qkey = 0x11112222;
    r_.imm_data = htobe32(0xdeadbeef);
    r_.solicited = true;
    r_.local = pieces_;
    r_.local_count = 2;
    r_.length = 7;
  }
  uint8_t one_[3] = {'a', 'b', 'c'};
  uint8_t two_[4] = {'d', 'e', 'f', 'g'};
  iovec pieces_[2] = {{one_, 3}, {two_, 4}};
  packet::IpUdpInfo flow_;
  Request r_;
  uint8_t out_[4200];
};

TEST_F(WirePacketsTest, DatagramRoundTrips) {
  auto n = BuildDatagram(r_, 77, flow_, out_);
  ASSERT_TRUE(n.ok()) << n.status().rule();
  EXPECT_EQ(*n, 12u + 8 + 4 + 7 + 1 + 4);  // BTH DETH ImmDt payload pad ICRC
  auto parsed = packet::Parse({out_, *n}, &flow_);
  ASSERT_TRUE(parsed.ok()) << parsed.status().rule();
  EXPECT_EQ(parsed->hdr.bth.opcode, 0x65);  // UD SEND_ONLY_WITH_IMMEDIATE
  EXPECT_EQ(parsed->hdr.bth.psn, 77u);
  EXPECT_EQ(parsed->hdr.bth.pkey, 0xffff);
  WireRequest w;
  ASSERT_TRUE(RequestOfPacket(*parsed, &w));
  EXPECT_EQ(w.request.qp_type, kUd);
  EXPECT_EQ(w.request.opcode, WrOpcode::kSendWithImm);
  EXPECT_EQ(w.request.src_qp, 0x123u);
  EXPECT_EQ(w.request.dest_qp, 0x456u);
  EXPECT_EQ(w.request.qkey, 0x11112222u);
  EXPECT_EQ(w.request.imm_data, r_.imm_data);  // network order end to end
  EXPECT_TRUE(w.request.solicited);
  ASSERT_EQ(w.request.length, 7u);
  EXPECT_EQ(memcmp(w.piece.iov_base, "abcdefg", 7), 0);
}

// A message gathered around its payload (what the link sends) is, packet by packet, the message
// built into buffers: a 3-SGE RDMA WRITE with immediate of 2.5 MTUs, whose packets start and end
// inside SGEs.
TEST_F(WirePacketsTest, AGatheredMessageIsTheBuiltOneInPieces) {
  std::vector<uint8_t> a(1000), b(3000), c(1200);
  for (auto* v : {&a, &b, &c})
    for (size_t i = 0; i < v->size(); ++i) (*v)[i] = static_cast<uint8_t>(i * 31 + v->size());
  iovec sges[3] = {{a.data(), a.size()}, {b.data(), b.size()}, {c.data(), c.size()}};
  Request r;
  r.qp_type = kRc;
  r.opcode = WrOpcode::kRdmaWriteWithImm;
  r.dest_qp = 0x456;
  r.psn = 0xfffffe;  // the PSNs wrap inside the message
  r.mtu = 2048;
  r.local = sges;
  r.local_count = 3;
  r.length = a.size() + b.size() + c.size();
  r.remote_addr = 0x10000;
  r.rkey = 0x77;
  const uint64_t count = MessagePackets(r);
  ASSERT_EQ(count, 3u);
  std::vector<uint8_t> arena(count * kPacketSlot), wrap(count * kWrapSlot);
  std::vector<size_t> lengths(count);
  ASSERT_TRUE(BuildMessagePackets(r, flow_, 0, arena, lengths).ok());
  std::vector<iovec> pieces;
  std::vector<uint16_t> counts;
  ASSERT_TRUE(GatherMessagePackets(r, flow_, 1, 2, wrap, pieces, counts).ok());  // packets 1 and 2
  ASSERT_TRUE(GatherMessagePackets(r, flow_, 0, 1, {wrap.data() + 2 * kWrapSlot, kWrapSlot}, pieces, counts).ok());
  ASSERT_EQ(counts.size(), 3u);
  size_t at = 0;
  const uint64_t order[3] = {1, 2, 0};  // as gathered
  for (size_t j = 0; j < 3; ++j) {
    const uint64_t k = order[j];
    std::vector<uint8_t> joined;
    for (size_t i = 0; i < counts[j]; ++i, ++at) {
      const auto* p = static_cast<const uint8_t*>(pieces[at].iov_base);
      joined.insert(joined.end(), p, p + pieces[at].iov_len);
    }
    EXPECT_EQ(joined, std::vector<uint8_t>(arena.begin() + static_cast<long>(k * kPacketSlot),
                                           arena.begin() + static_cast<long>(k * kPacketSlot + lengths[k])))
        << "packet " << k;
  }
  EXPECT_FALSE(GatherMessagePackets(r, flow_, 2, 2, wrap, pieces, counts).ok());  // beyond the message
}

TEST_F(WirePacketsTest, AnotherFlowFailsTheIcrc) {
  auto n = BuildDatagram(r_, 1, flow_, out_);
  ASSERT_TRUE(n.ok());
  packet::IpUdpInfo other = flow_;
  other.src[3] = 3;  // the same bytes from another address: the ICRC covers the IP header
  auto parsed = packet::Parse({out_, *n}, &other);
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), EBADMSG);
}

TEST_F(WirePacketsTest, OnlyUdSendsBecomeRequestsToday) {
  packet::PacketHeaders h;
  h.bth.opcode = packet::op::kRc | packet::op::kRdmaWriteOnly;
  h.bth.dest_qp = 0x456;
  h.reth = {0x1000, 0x77, 4};
  const packet::ConstBuffer payload[] = {{"wxyz", 4}};
  auto n = packet::Build(h, payload, flow_, out_);
  ASSERT_TRUE(n.ok());
  auto parsed = packet::Parse({out_, *n}, &flow_);
  ASSERT_TRUE(parsed.ok());
  WireRequest w;
  EXPECT_FALSE(RequestOfPacket(*parsed, &w));
  (void)kRc;
}

TEST_F(WirePacketsTest, RandomBytesNeverParseIntoARequest) {
  // A flood of malformed datagrams: with the ICRC checked, none passes as a request.
  std::mt19937 rng(4791);
  int requests = 0;
  for (int i = 0; i < 20000; ++i) {
    std::vector<uint8_t> d(rng() % 80);
    for (auto& b : d) b = static_cast<uint8_t>(rng());
    if (d.size() > 0 && (i & 1)) d[0] = 0x64;  // half claim to be UD SEND_ONLY
    auto parsed = packet::Parse(d, &flow_);
    WireRequest w;
    if (parsed.ok() && RequestOfPacket(*parsed, &w)) ++requests;
  }
  EXPECT_EQ(requests, 0);
}

}  // namespace
}  // namespace softverbs::transport
