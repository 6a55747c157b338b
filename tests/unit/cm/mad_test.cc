#include "cm/mad.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "tests/unit/fabric/packet/capture_reader.h"

namespace softverbs::cm::mad {
namespace {

namespace capture = fabric::packet::testing;

// The MADs of rping between two kernel rxe hosts (10.199.0.2 active, 10.199.0.3 passive): the
// 256 bytes after BTH (12) and DETH (8) of each UD SEND_ONLY to QP1.
struct CapturedMad {
  std::vector<uint8_t> bytes;
  bool from_active;  // sent by 10.199.0.2
};

std::vector<CapturedMad> RpingMads() {
  std::vector<CapturedMad> out;
  for (const auto& p : capture::ReadCapture(capture::DataDir() + "rxe_rping_cm.pcap")) {
    const auto& u = p.udp_payload;
    if (u.size() != 12 + 8 + kMadBytes + 4 || u[0] != 0x64) continue;  // UD SEND_ONLY, ICRC after
    out.push_back({{u.begin() + 20, u.begin() + 20 + kMadBytes}, p.flow.src[3] == 2});
  }
  return out;
}

Gid Mapped(const char* ipv4) {
  Gid g{};
  g[10] = g[11] = 0xff;
  inet_pton(AF_INET, ipv4, g.data() + 12);
  return g;
}

constexpr uint64_t kTid = 0x0000000268ec2db4;  // the kernel's (hi_tid 2 << 32) | comm ID, every MAD here
constexpr uint32_t kActiveCommId = 0xb42dec68, kPassiveCommId = 0xa81b4247;
// From the data packets of the same capture: 10.199.0.2's QP is 0x36 and sends from PSN
// 0x3ceb4e; 10.199.0.3's QP is 0x2c and sends from PSN 0x04b6c3.
constexpr uint32_t kActiveQpn = 0x36, kPassiveQpn = 0x2c;

class MadCaptureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    mads_ = RpingMads();
    ASSERT_EQ(mads_.size(), 5u) << "REQ, REP, RTU, DREQ, DREP";
  }
  Mad Decode(size_t i) {
    auto mad = DecodeMad(mads_[i].bytes);
    EXPECT_TRUE(mad.ok()) << mad.status().rule();
    return mad.ok() ? mad.value() : Mad{};
  }
  std::vector<CapturedMad> mads_;
};

TEST_F(MadCaptureTest, EveryMadReencodesToTheSameBytes) {
  for (const CapturedMad& c : mads_) {
    auto mad = DecodeMad(c.bytes);
    ASSERT_TRUE(mad.ok()) << mad.status().rule();
    EXPECT_EQ(mad->hdr.base_version, 1);
    EXPECT_EQ(mad->hdr.mgmt_class, 0x07);
    EXPECT_EQ(mad->hdr.class_version, 2);
    EXPECT_EQ(mad->hdr.method, 0x03);
    EXPECT_EQ(mad->hdr.tid, kTid);
    auto bytes = EncodeMad(*mad);
    ASSERT_TRUE(bytes.ok()) << bytes.status().rule();
    EXPECT_EQ(std::vector<uint8_t>(bytes->begin(), bytes->end()), c.bytes) << AttrName(mad->hdr.attr_id);
  }
}

TEST_F(MadCaptureTest, TheReqIsRpingsToPort7174) {
  Mad mad = Decode(0);
  ASSERT_TRUE(mads_[0].from_active);
  ASSERT_EQ(mad.hdr.attr_id, 0x0010);
  const Req& r = std::get<Req>(mad.body);
  EXPECT_EQ(r.local_comm_id, kActiveCommId);
  EXPECT_EQ(r.service_id, 0x0000000001061C06u);
  EXPECT_EQ(r.service_id, ServiceId(PortSpace::kTcp, 7174));
  EXPECT_EQ(r.local_ca_guid, 0x505400fffec70002u);  // EUI-64 of the rxe netdev's MAC 52:54:00:c7:00:02
  EXPECT_EQ(r.local_qkey, 0u);
  EXPECT_EQ(r.local_qpn, kActiveQpn);
  EXPECT_EQ(r.responder_resources, 1);  // rping's conn_param
  EXPECT_EQ(r.initiator_depth, 1);
  EXPECT_EQ(r.transport_type, 0);  // RC
  EXPECT_EQ(r.remote_cm_response_timeout, 20);
  EXPECT_EQ(r.local_cm_response_timeout, 20);
  EXPECT_EQ(r.starting_psn, 0x04b6c3u);  // what the passive side then sends from
  EXPECT_EQ(r.retry_count, 7);
  EXPECT_EQ(r.rnr_retry_count, 7);
  EXPECT_EQ(r.pkey, 0xffff);
  EXPECT_EQ(r.path_mtu, 3);  // 1024 at a 1500-byte netdev MTU
  EXPECT_EQ(r.max_cm_retries, 15);
  EXPECT_EQ(r.srq, 0);
  EXPECT_EQ(r.primary.local_lid, 0xffff);
  EXPECT_EQ(r.primary.remote_lid, 0xffff);
  EXPECT_EQ(r.primary.local_gid, Mapped("10.199.0.2"));
  EXPECT_EQ(r.primary.remote_gid, Mapped("10.199.0.3"));
  EXPECT_EQ(r.primary.hop_limit, 64);
  EXPECT_EQ(r.primary.local_ack_timeout, 19);
  EXPECT_EQ(r.primary.flow_label, (40539u * 31 + 7174) & 0xfffff);  // cma.c: (sport*31 + dport)
  EXPECT_EQ(r.alternate.local_lid, 0);
  auto hdr = DecodeCmaHdr(r.private_data);
  ASSERT_TRUE(hdr.ok()) << hdr.status().rule();
  EXPECT_EQ(hdr->ip_version, 4);
  EXPECT_EQ(hdr->port, 40539);
  EXPECT_EQ(hdr->src, Mapped("10.199.0.2"));
  EXPECT_EQ(hdr->dst, Mapped("10.199.0.3"));
}

TEST_F(MadCaptureTest, TheRepAnswersTheReq) {
  Mad mad = Decode(1);
  ASSERT_FALSE(mads_[1].from_active);
  const Rep& r = std::get<Rep>(mad.body);
  EXPECT_EQ(r.local_comm_id, kPassiveCommId);
  EXPECT_EQ(r.remote_comm_id, kActiveCommId);
  EXPECT_EQ(r.local_qpn, kPassiveQpn);
  EXPECT_EQ(r.starting_psn, 0x3ceb4eu);  // what the active side then sends from
  EXPECT_EQ(r.responder_resources, 1);
  EXPECT_EQ(r.initiator_depth, 1);
  EXPECT_EQ(r.target_ack_delay, 15);  // RXE_LOCAL_CA_ACK_DELAY
  EXPECT_EQ(r.rnr_retry_count, 7);
  EXPECT_EQ(r.failover_accepted, 0);
  EXPECT_EQ(r.local_ca_guid, 0x505400fffec70003u);
  EXPECT_EQ(r.ece_vendor_id, 0u);
}

TEST_F(MadCaptureTest, RtuDreqDrepCarryTheCommIds) {
  const Mad rtu_mad = Decode(2), dreq_mad = Decode(3), drep_mad = Decode(4);
  const Rtu& rtu = std::get<Rtu>(rtu_mad.body);
  EXPECT_EQ(rtu.local_comm_id, kActiveCommId);
  EXPECT_EQ(rtu.remote_comm_id, kPassiveCommId);
  const Dreq& dreq = std::get<Dreq>(dreq_mad.body);
  EXPECT_EQ(dreq.local_comm_id, kActiveCommId);
  EXPECT_EQ(dreq.remote_comm_id, kPassiveCommId);
  EXPECT_EQ(dreq.remote_qpn, kPassiveQpn);
  const Drep& drep = std::get<Drep>(drep_mad.body);
  EXPECT_EQ(drep.local_comm_id, kPassiveCommId);
  EXPECT_EQ(drep.remote_comm_id, kActiveCommId);
}

// The same-host message of rping's REQ, and back: the kernel's REQ again, byte for byte.
TEST_F(MadCaptureTest, TheReqMapsToAMessageAndBack) {
  Mad mad = Decode(0);
  MadContext ctx;
  auto m = MessageOfMad(mad, &ctx);
  ASSERT_TRUE(m.ok()) << m.status().rule();
  EXPECT_EQ(m->type, MessageType::kReq);
  EXPECT_EQ(m->qpn, kActiveQpn);
  EXPECT_EQ(m->psn, 0x04b6c3u);
  EXPECT_EQ(m->src.ss_family, AF_INET);
  EXPECT_EQ(ntohs(reinterpret_cast<const sockaddr_in*>(&m->src)->sin_port), 40539);
  EXPECT_EQ(ntohs(reinterpret_cast<const sockaddr_in*>(&m->dst)->sin_port), 7174);
  EXPECT_EQ(m->private_data_len, 56);  // 92 - 36, all of it, as the kernel reports
  // rping on rxe: librdmacm's ibv_query_ece gets EOPNOTSUPP, so the REQ carries no ECE.
  EXPECT_EQ(m->ece.vendor_id, 0u);
  EXPECT_EQ(m->ece.options, 0u);
  EXPECT_EQ(mad.hdr.attr_mod, 0u);
  EXPECT_EQ(ctx.remote_comm_id, kActiveCommId);
  EXPECT_EQ(ctx.service_id, 0x01061C06u);
  // Back, as the active side would build it.
  MadContext out = ctx;
  out.local_comm_id = ctx.remote_comm_id;
  out.remote_gid = ctx.remote_gid;
  auto again = MadOfMessage(*m, out);
  ASSERT_TRUE(again.ok()) << again.status().rule();
  auto bytes = EncodeMad(*again);
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(std::vector<uint8_t>(bytes->begin(), bytes->end()), mads_[0].bytes);
}

TEST_F(MadCaptureTest, TheRepMapsToAMessageAndBack) {
  Mad mad = Decode(1);
  MadContext ctx;
  auto m = MessageOfMad(mad, &ctx);
  ASSERT_TRUE(m.ok()) << m.status().rule();
  EXPECT_EQ(m->type, MessageType::kRep);
  EXPECT_EQ(ctx.local_comm_id, kActiveCommId);  // the receiver's
  EXPECT_EQ(ctx.remote_comm_id, kPassiveCommId);
  MadContext out;
  out.tid = ctx.tid;
  out.local_comm_id = ctx.remote_comm_id;
  out.remote_comm_id = ctx.local_comm_id;
  out.local_ca_guid = ctx.local_ca_guid;
  auto again = MadOfMessage(*m, out);
  ASSERT_TRUE(again.ok()) << again.status().rule();
  auto bytes = EncodeMad(*again);
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(std::vector<uint8_t>(bytes->begin(), bytes->end()), mads_[1].bytes);
}

TEST(MadTest, EveryMessageTypeRoundTripsThroughTheCodec) {
  const Body bodies[] = {Mra{1, 2, 1, 24, {}},
                         Rej{3, 4, 0, 0, 8, {}, {}},
                         SidrReq{5, 0xffff, ServiceId(PortSpace::kUdp, 4000), {}},
                         SidrRep{6, 0, 0, 0x0102, 0x123456, 0x03, ServiceId(PortSpace::kUdp, 4000), 0x11111111, {}, {}}};
  for (const Body& b : bodies) {
    Mad mad;
    mad.hdr.tid = 0x1234;
    mad.body = b;
    auto bytes = EncodeMad(mad);
    ASSERT_TRUE(bytes.ok()) << bytes.status().rule();
    auto back = DecodeMad(*bytes);
    ASSERT_TRUE(back.ok()) << back.status().rule();
    EXPECT_EQ(back->hdr.attr_id, AttrOf(b));
    EXPECT_EQ(back->body.index(), b.index());
    auto again = EncodeMad(*back);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(*again, *bytes);
  }
  // Sub-byte fields land where the IBA tables put them (MSB first).
  Mad mra;
  mra.body = Mra{1, 2, 1, 24, {}};
  auto b = EncodeMad(mra);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*b)[32], 0x40);      // message MRAed 1 in bits 7:6
  EXPECT_EQ((*b)[33], 24 << 3);   // service timeout in bits 7:3
  Mad rej;
  rej.body = Rej{3, 4, 1, 72, 28, {}, {}};
  b = EncodeMad(rej);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*b)[32], 0x40);
  EXPECT_EQ((*b)[33], 72 << 1);
  EXPECT_EQ((*b)[35], 28);
  // SIDR_REP: the QPN's 24 bits with the kernel's ECE vendor bytes around it (ibta_vol1_c12.h).
  Mad sidr;
  sidr.body = SidrRep{6, 0, 0, 0x0102, 0x123456, 0x03, 0, 0, {}, {}};
  b = EncodeMad(sidr);
  ASSERT_TRUE(b.ok());
  const std::vector<uint8_t> at30(b->begin() + 30, b->begin() + 36);
  EXPECT_EQ(at30, (std::vector<uint8_t>{0x01, 0x02, 0x12, 0x34, 0x56, 0x03}));
}

TEST(MadTest, AFieldWiderThanItsBitsIsRefused) {
  Mad mad;
  Req r;
  r.local_qpn = 0x1000000;  // 25 bits
  mad.body = r;
  auto bytes = EncodeMad(mad);
  ASSERT_FALSE(bytes.ok());
  EXPECT_EQ(bytes.status().code(), EINVAL);
  EXPECT_NE(bytes.status().rule().find("local QPN"), std::string::npos);
}

class MadRefusalTest : public MadCaptureTest {
 protected:
  Status DecodeWith(size_t offset, uint8_t value) {
    std::vector<uint8_t> b = mads_[0].bytes;
    b[offset] = value;
    return DecodeMad(b).status();
  }
};

TEST_F(MadRefusalTest, TruncatedOrLongIsRefused) {
  std::vector<uint8_t> b = mads_[0].bytes;
  for (size_t n : {size_t{0}, size_t{1}, size_t{24}, size_t{255}}) {
    auto r = DecodeMad(std::span(b).first(n));
    EXPECT_EQ(r.status().code(), EINVAL) << n;
  }
  b.push_back(0);
  EXPECT_EQ(DecodeMad(b).status().code(), EINVAL);
}

TEST_F(MadRefusalTest, WrongVersionClassOrMethodIsRefused) {
  EXPECT_EQ(DecodeWith(0, 2).code(), EINVAL);     // base version
  EXPECT_EQ(DecodeWith(1, 0x04).code(), EINVAL);  // class: performance management
  EXPECT_EQ(DecodeWith(2, 1).code(), EINVAL);     // class version
  EXPECT_EQ(DecodeWith(3, 0x01).code(), EINVAL);  // method Get
  EXPECT_EQ(DecodeWith(3, 0x83).code(), EINVAL);  // a response
  EXPECT_NE(DecodeWith(3, 0x01).rule().find("validate_mad"), std::string::npos);
  EXPECT_TRUE(DecodeWith(4, 0xff).ok());  // status: not the CM's concern
}

TEST_F(MadRefusalTest, UnknownAndUnhandledAttributesAreRefused) {
  std::vector<uint8_t> b = mads_[0].bytes;
  for (uint16_t attr : {0x0000, 0x0001, 0x0019, 0x001a, 0x001b, 0x00ff, 0xffff}) {
    b[16] = static_cast<uint8_t>(attr >> 8);
    b[17] = static_cast<uint8_t>(attr);
    auto r = DecodeMad(b);
    EXPECT_FALSE(r.ok()) << attr;
  }
  // ClassPortInfo may use other methods (validate_mad), but is still not handled here.
  b[16] = 0;
  b[17] = 1;
  b[3] = 0x01;
  EXPECT_EQ(DecodeMad(b).status().code(), EOPNOTSUPP);
}

TEST_F(MadRefusalTest, ABadIpCmHeaderIsRefused) {
  auto mad = DecodeMad(mads_[0].bytes);
  ASSERT_TRUE(mad.ok());
  Req r = std::get<Req>(mad->body);
  r.private_data[0] = 1;  // cma_version
  EXPECT_EQ(DecodeCmaHdr(r.private_data).status().code(), EINVAL);
  Mad bad = *mad;
  bad.body = r;
  EXPECT_EQ(MessageOfMad(bad, nullptr).status().code(), EINVAL);
  r = std::get<Req>(mad->body);
  for (uint8_t v : {0x00, 0x50, 0x70, 0xf0}) {
    r.private_data[1] = v;  // IP version in bits 7:4
    EXPECT_EQ(DecodeCmaHdr(r.private_data).status().code(), EINVAL) << int{v};
  }
  r.private_data[1] = 0x60;
  EXPECT_TRUE(DecodeCmaHdr(r.private_data).ok());
  EXPECT_EQ(DecodeCmaHdr(std::span(r.private_data).first(35)).status().code(), EINVAL);
}

TEST(MadTest, ServiceIdsOfThePortSpaces) {
  EXPECT_EQ(ServiceId(PortSpace::kTcp, 7174), 0x0000000001061C06u);
  EXPECT_EQ(ServiceId(PortSpace::kUdp, 1), 0x0000000001110001u);
  EXPECT_EQ(ServiceId(PortSpace::kIb, 0xffff), 0x00000000013fffffu);
  PortSpace ps;
  uint16_t port;
  ASSERT_TRUE(PortOfServiceId(0x0000000001110abcu, &ps, &port).ok());
  EXPECT_EQ(ps, PortSpace::kUdp);
  EXPECT_EQ(port, 0xabc);
  EXPECT_FALSE(PortOfServiceId(0x0000000001070001u, &ps, &port).ok());
  EXPECT_FALSE(PortOfServiceId(0x1000000001060001u, &ps, &port).ok());
}

// Random mutations of each captured MAD (and random lengths) never crash the decoder or the
// mapping; whatever decodes re-encodes and decodes again to the same bytes.
TEST_F(MadCaptureTest, RandomMutationsNeverCrash) {
  std::mt19937 rng(12);
  size_t decoded = 0;
  for (int i = 0; i < 4000; ++i) {
    std::vector<uint8_t> b = mads_[i % mads_.size()].bytes;
    const int flips = 1 + static_cast<int>(rng() % 8);
    for (int f = 0; f < flips; ++f) b[rng() % b.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
    if (rng() % 16 == 0) b.resize(rng() % (b.size() + 8));
    auto mad = DecodeMad(b);
    if (!mad.ok()) {
      EXPECT_FALSE(mad.status().rule().empty());
      continue;
    }
    ++decoded;
    (void)MessageOfMad(*mad, nullptr);
    auto again = EncodeMad(*mad);
    ASSERT_TRUE(again.ok()) << again.status().rule();
    auto twice = DecodeMad(*again);
    ASSERT_TRUE(twice.ok());
    auto thrice = EncodeMad(*twice);
    ASSERT_TRUE(thrice.ok());
    EXPECT_EQ(*thrice, *again);
  }
  EXPECT_GT(decoded, 0u);
}

}  // namespace
}  // namespace softverbs::cm::mad
