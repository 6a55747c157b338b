#include "fabric/packet/packet.h"

#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fabric/packet/icrc.h"
#include "tests/unit/fabric/packet/capture_reader.h"

namespace softverbs::fabric::packet {
namespace {

using testing::CapturedPacket;
using testing::DataDir;
using testing::ReadCapture;

std::vector<uint8_t> Rebuild(const ParsedPacket& p, const IpUdpInfo& flow) {
  std::vector<uint8_t> out(WireBytes(*p.info, p.payload.size()));
  ConstBuffer piece{p.payload.data(), p.payload.size()};
  auto n = Build(p.hdr, {&piece, 1}, flow, out);
  EXPECT_TRUE(n.ok()) << n.status().rule();
  if (n.ok()) {
    EXPECT_EQ(*n, out.size());
  }
  return out;
}

TEST(PacketCaptureTest, EveryRxePacketParsesAndRebuildsByteForByte) {
  for (const testing::CaptureFile& file : testing::kCaptures) {
    auto pkts = ReadCapture(DataDir() + file.name);
    ASSERT_EQ(pkts.size(), file.packets) << file.name;
    for (size_t i = 0; i < pkts.size(); ++i) {
      const CapturedPacket& c = pkts[i];
      auto parsed = Parse(c.udp_payload, &c.flow);
      ASSERT_TRUE(parsed.ok()) << file.name << " #" << i << ": " << parsed.status().rule();
      EXPECT_EQ(Rebuild(*parsed, c.flow), c.udp_payload) << file.name << " #" << i;
    }
  }
}

// The decodes in data/*.txt, for one packet of each kind.
TEST(PacketCaptureTest, DecodedFieldsMatchTheCaptureNotes) {
  auto atomic = ReadCapture(DataDir() + "rxe_write_read_atomic.pcap");
  ASSERT_EQ(atomic.size(), 40u);
  // #0: RC_WRITE_ONLY dqp=0x33 a=1 psn=0xb6878b RETH(va=0x560cfe38e000 rkey=0x2f5f len=64)
  auto w = Parse(atomic[0].udp_payload);
  ASSERT_TRUE(w.ok());
  EXPECT_STREQ(w->info->name, "RC_RDMA_WRITE_ONLY");
  EXPECT_EQ(w->hdr.bth.dest_qp, 0x33u);
  EXPECT_TRUE(w->hdr.bth.ack_req);
  EXPECT_EQ(w->hdr.bth.psn, 0xb6878bu);
  EXPECT_EQ(w->hdr.bth.pkey, 0xffff);
  EXPECT_EQ(w->hdr.reth.va, 0x560cfe38e000u);
  EXPECT_EQ(w->hdr.reth.rkey, 0x2f5fu);
  EXPECT_EQ(w->hdr.reth.length, 64u);
  EXPECT_EQ(w->payload.size(), 64u);
  EXPECT_EQ(w->icrc, 0x42f892d0u);
  // #1: RC_ACKNOWLEDGE AETH(ACK credits=31 msn=1)
  auto ack = Parse(atomic[1].udp_payload);
  ASSERT_TRUE(ack.ok());
  EXPECT_EQ(ack->hdr.aeth.syndrome, 0x1f);
  EXPECT_EQ(ack->hdr.aeth.msn, 1u);
  EXPECT_TRUE(ack->payload.empty());
  // #30: RC_FETCH_ADD AtomicETH(va=0x55d1270a4000 rkey=0x2024 swap_add=0x1 cmp=0x0)
  auto fa = Parse(atomic[30].udp_payload);
  ASSERT_TRUE(fa.ok());
  EXPECT_EQ(fa->info->operation, Operation::kFetchAdd);
  EXPECT_EQ(fa->hdr.atomic.va, 0x55d1270a4000u);
  EXPECT_EQ(fa->hdr.atomic.rkey, 0x2024u);
  EXPECT_EQ(fa->hdr.atomic.swap_add, 1u);
  EXPECT_EQ(fa->hdr.atomic.compare, 0u);
  // #31: RC_ATOMIC_ACKNOWLEDGE AETH(msn=1) AtomicAckETH(orig=0xfcb7b39f34764931)
  auto aa = Parse(atomic[31].udp_payload);
  ASSERT_TRUE(aa.ok());
  EXPECT_EQ(aa->hdr.aeth.msn, 1u);
  EXPECT_EQ(aa->hdr.atomic_ack.original, 0xfcb7b39f34764931u);
  // rping's first CM MAD: UD_SEND_ONLY dqp=1 psn=0xb DETH(qkey=0x80010000 srcqp=0x1), 256 bytes
  auto cm = ReadCapture(DataDir() + "rxe_rping_cm.pcap");
  ASSERT_FALSE(cm.empty());
  auto mad = Parse(cm[0].udp_payload, &cm[0].flow);
  ASSERT_TRUE(mad.ok());
  EXPECT_EQ(mad->info->transport, Transport::kUd);
  EXPECT_EQ(mad->hdr.bth.dest_qp, 1u);
  EXPECT_EQ(mad->hdr.deth.qkey, 0x80010000u);
  EXPECT_EQ(mad->hdr.deth.src_qp, 1u);
  ASSERT_EQ(mad->payload.size(), 256u);
  EXPECT_EQ(mad->payload[0], 1);     // MAD base version
  EXPECT_EQ(mad->payload[1], 0x07);  // class CM
  EXPECT_EQ(cm[0].flow.src_port, 55410);
}

// Every known opcode, payload lengths 0..9 (every pad count), gathered from several pieces,
// built then parsed back to the same headers and payload.
TEST(PacketBuildTest, EveryOpcodeRoundTrips) {
  uint8_t src[4] = {10, 0, 0, 1}, dst[4] = {10, 0, 0, 2};
  IpUdpInfo flow = IpUdpInfo::V4(src, dst, 0xc001);
  const uint8_t data[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  for (int code = 0; code < 256; ++code) {
    const OpcodeInfo* info = LookupOpcode(static_cast<uint8_t>(code));
    if (info == nullptr) continue;
    for (size_t len = 0; len <= (info->has_payload ? 9u : 0u); ++len) {
      PacketHeaders h;
      h.bth = {.opcode = static_cast<uint8_t>(code), .se = true, .pkey = 0x8001,
               .dest_qp = 0xabcdef, .ack_req = true, .psn = 0xfffffe};
      h.reth = {0x1122334455667788, 0x99aabbcc, 0x1000};
      h.aeth = {0x60, 0x123456};
      h.atomic = {0x1000, 7, 0x0102030405060708, 0x1112131415161718};
      h.atomic_ack = {0xa1a2a3a4a5a6a7a8};
      h.deth = {0x11111111, 0x000abc};
      h.immdt.imm = 0xdeadbeef;
      h.ieth.rkey = 0x4242;
      ConstBuffer pieces[2] = {{data, len / 2}, {data + len / 2, len - len / 2}};
      std::vector<uint8_t> out(WireBytes(*info, len) + 3, 0xee);
      auto n = Build(h, pieces, flow, out);
      ASSERT_TRUE(n.ok()) << info->name << ": " << n.status().rule();
      ASSERT_EQ(*n, WireBytes(*info, len));
      EXPECT_EQ(*n % 4, 0u);
      EXPECT_EQ(out[*n], 0xee) << "wrote past the packet";
      auto p = Parse(std::span<const uint8_t>(out).first(*n), &flow);
      ASSERT_TRUE(p.ok()) << info->name << " len " << len << ": " << p.status().rule();
      EXPECT_EQ(p->info, info);
      EXPECT_EQ(p->hdr.bth.pad, (4 - len % 4) % 4);
      EXPECT_EQ(p->hdr.bth.dest_qp, 0xabcdefu);
      EXPECT_EQ(p->hdr.bth.psn, 0xfffffeu);
      EXPECT_EQ(p->hdr.bth.pkey, 0x8001);
      EXPECT_TRUE(p->hdr.bth.se && p->hdr.bth.ack_req);
      EXPECT_EQ(std::vector<uint8_t>(p->payload.begin(), p->payload.end()),
                std::vector<uint8_t>(data, data + len));
      if (info->Has(Ext::kReth)) {
        EXPECT_EQ(p->hdr.reth.va, h.reth.va);
      }
      if (info->Has(Ext::kReth)) {
        EXPECT_EQ(p->hdr.reth.length, h.reth.length);
      }
      if (info->Has(Ext::kAeth)) {
        EXPECT_EQ(p->hdr.aeth.msn, h.aeth.msn);
      }
      if (info->Has(Ext::kAtomicEth)) {
        EXPECT_EQ(p->hdr.atomic.compare, h.atomic.compare);
      }
      if (info->Has(Ext::kAtomicAckEth)) {
        EXPECT_EQ(p->hdr.atomic_ack.original, h.atomic_ack.original);
      }
      if (info->Has(Ext::kDeth)) {
        EXPECT_EQ(p->hdr.deth.src_qp, h.deth.src_qp);
      }
      if (info->has_immediate) {
        EXPECT_EQ(p->hdr.immdt.imm, 0xdeadbeefu);
      }
      if (info->has_invalidate) {
        EXPECT_EQ(p->hdr.ieth.rkey, 0x4242u);
      }
    }
  }
}

// A packet built around its payload is, headers + payload + trailer laid end to end, the packet
// Build() writes, for every opcode, payload length (every pad), IPv4 and IPv6; and it refuses a
// header buffer too small for the opcode's headers.
TEST(PacketBuildTest, GatheredIsBuildsBytesInPieces) {
  uint8_t src4[4] = {10, 0, 0, 1}, dst4[4] = {10, 0, 0, 2};
  uint8_t src6[16] = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, dst6[16] = {0xfd, 1};
  std::vector<uint8_t> data(300);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 7 + 1);
  for (const IpUdpInfo& flow : {IpUdpInfo::V4(src4, dst4, 0xc001), IpUdpInfo::V6(src6, dst6, 0xc002)}) {
    for (int code = 0; code < 256; ++code) {
      const OpcodeInfo* info = LookupOpcode(static_cast<uint8_t>(code));
      if (info == nullptr) continue;
      for (size_t len : {0u, 1u, 2u, 3u, 4u, 255u, 300u}) {
        if (!info->has_payload && len) continue;
        PacketHeaders h;
        h.bth = {.opcode = static_cast<uint8_t>(code), .dest_qp = 0x12, .psn = 77};
        h.reth = {0x1000, 0x99, static_cast<uint32_t>(len)};
        const ConstBuffer pieces[2] = {{data.data(), len / 3}, {data.data() + len / 3, len - len / 3}};
        std::vector<uint8_t> whole(WireBytes(*info, len));
        auto n = Build(h, pieces, flow, whole);
        ASSERT_TRUE(n.ok()) << info->name;
        uint8_t head[64], trailer[kMaxTrailerBytes];
        auto g = BuildGathered(h, pieces, flow, head, trailer);
        ASSERT_TRUE(g.ok()) << info->name;
        ASSERT_EQ(g->bytes(), *n);
        std::vector<uint8_t> joined(head, head + g->header_bytes);
        joined.insert(joined.end(), data.begin(), data.begin() + static_cast<long>(len));
        joined.insert(joined.end(), trailer, trailer + g->trailer_bytes);
        EXPECT_EQ(joined, whole) << info->name << " len " << len;
        uint8_t small[12];
        if (info->header_bytes > sizeof small) {
          EXPECT_FALSE(BuildGathered(h, pieces, flow, small, trailer).ok()) << info->name;
        }
      }
    }
  }
}

TEST(PacketBuildTest, RefusesWhatCannotGoOnTheWire) {
  IpUdpInfo flow;
  std::vector<uint8_t> out(128);
  const uint8_t data[4] = {};
  ConstBuffer piece{data, 4};
  auto refuse = [&](PacketHeaders h, std::span<const ConstBuffer> payload, std::span<uint8_t> o,
                    const char* words) {
    auto n = Build(h, payload, flow, o);
    ASSERT_FALSE(n.ok()) << words;
    EXPECT_EQ(n.status().code(), EINVAL);
    EXPECT_NE(n.status().rule().find(words), std::string::npos) << n.status().rule();
  };
  PacketHeaders h;
  h.bth.opcode = 0x15;
  refuse(h, {}, out, "unknown BTH opcode");
  h.bth.opcode = op::kAcknowledge;
  refuse(h, {&piece, 1}, out, "carries no payload");
  h.bth.opcode = op::kSendOnly;
  h.bth.tver = 1;
  refuse(h, {}, out, "TVer");
  h.bth.tver = 0;
  h.bth.dest_qp = 1u << 24;
  refuse(h, {}, out, "24 bits");
  h.bth.dest_qp = 5;
  refuse(h, {&piece, 1}, std::span<uint8_t>(out).first(19), "output buffer");
  std::vector<uint8_t> big(0x10000);
  ConstBuffer huge{big.data(), big.size()};
  refuse(h, {&huge, 1}, out, "larger than a UDP datagram");
  EXPECT_TRUE(Build(h, {&piece, 1}, flow, std::span<uint8_t>(out).first(20)).ok());
}

}  // namespace
}  // namespace softverbs::fabric::packet
