// What a hostile or corrupt datagram can do to Parse(): every refusal names its rule, nothing
// crashes, nothing is read outside the span (each input lives in a heap buffer of exactly its
// size, so the ASan build, -DSOFTVERBS_SANITIZE=ON, catches any overread).
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fabric/packet/icrc.h"
#include "fabric/packet/packet.h"
#include "tests/unit/fabric/packet/capture_reader.h"

namespace softverbs::fabric::packet {
namespace {

using testing::AllCapturedPackets;
using testing::CapturedPacket;

// Parses a copy of `bytes` held in a buffer of exactly bytes.size().
Result<ParsedPacket> ParseExact(const std::vector<uint8_t>& bytes, const IpUdpInfo* flow) {
  std::unique_ptr<uint8_t[]> exact(new uint8_t[bytes.size() ? bytes.size() : 1]);
  std::copy(bytes.begin(), bytes.end(), exact.get());
  auto r = Parse({exact.get(), bytes.size()}, flow);
  if (r.ok()) {
    // The payload view must lie inside the input.
    EXPECT_GE(r->payload.data(), exact.get());
    EXPECT_LE(r->payload.data() + r->payload.size(), exact.get() + bytes.size());
    r->payload = {};  // the buffer dies here
  }
  return r;
}

void ExpectRefused(const Result<ParsedPacket>& r, int code, const std::string& words) {
  ASSERT_FALSE(r.ok()) << "accepted; wanted a refusal naming '" << words << "'";
  EXPECT_EQ(r.status().code(), code) << r.status().rule();
  EXPECT_NE(r.status().rule().find(words), std::string::npos) << r.status().rule();
}

TEST(PacketHostileTest, EveryTruncationIsRefused) {
  for (const CapturedPacket& c : AllCapturedPackets()) {
    for (size_t len = 0; len < c.udp_payload.size(); ++len) {
      std::vector<uint8_t> cut(c.udp_payload.begin(), c.udp_payload.begin() + len);
      EXPECT_FALSE(ParseExact(cut, &c.flow).ok()) << "length " << len;
      (void)ParseExact(cut, nullptr);  // without the ICRC some lengths parse; none may crash
    }
  }
}

// CRC-32 catches every single-bit error, so each flip is refused, except in BTH byte 4: FECN,
// BECN and resv6 are outside the ICRC (IBA Annex A17) because switches set them, and a receiver
// ignores resv6 (IBA 9.2: reserved fields are ignored on receipt).
TEST(PacketHostileTest, EverySingleBitFlipIsRefusedOutsideTheCongestionByte) {
  for (const CapturedPacket& c : AllCapturedPackets()) {
    auto good = ParseExact(c.udp_payload, &c.flow);
    ASSERT_TRUE(good.ok());
    for (size_t bit = 0; bit < c.udp_payload.size() * 8; ++bit) {
      std::vector<uint8_t> bad = c.udp_payload;
      bad[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
      auto r = ParseExact(bad, &c.flow);
      if (bit / 8 != 4) {
        EXPECT_FALSE(r.ok()) << "bit " << bit;
        continue;
      }
      ASSERT_TRUE(r.ok()) << r.status().rule();
      EXPECT_EQ(r->hdr.bth.fecn, bit == 39);
      EXPECT_EQ(r->hdr.bth.becn, bit == 38);
      EXPECT_EQ(r->hdr.bth.psn, good->hdr.bth.psn);
    }
  }
}

TEST(PacketHostileTest, UnknownOpcodesAreReportedAsSuch) {
  CapturedPacket c = AllCapturedPackets().front();
  for (int code : {0x15, 0x18, 0x1c, 0x1d, 0x1f, 0x2c, 0x40, 0x44, 0x63, 0x66, 0x81, 0xff}) {
    std::vector<uint8_t> bad = c.udp_payload;
    bad[0] = static_cast<uint8_t>(code);
    ExpectRefused(ParseExact(bad, nullptr), EOPNOTSUPP, "unknown BTH opcode");
  }
}

// A valid packet of `opcode` with `payload_bytes` of payload, built for a fixed IPv4 flow.
std::vector<uint8_t> Make(uint8_t opcode, size_t payload_bytes, IpUdpInfo* flow) {
  uint8_t src[4] = {192, 168, 0, 1}, dst[4] = {192, 168, 0, 2};
  *flow = IpUdpInfo::V4(src, dst, 0xc0de);
  PacketHeaders h;
  h.bth.opcode = opcode;
  std::vector<uint8_t> data(payload_bytes, 0x5a);
  ConstBuffer piece{data.data(), data.size()};
  std::vector<uint8_t> out(256);
  auto n = Build(h, {&piece, 1}, *flow, out);
  EXPECT_TRUE(n.ok());
  out.resize(n.ok() ? *n : 0);
  return out;
}

// Rewrites the ICRC so only the rule under test can refuse the packet.
void Reseal(std::vector<uint8_t>* pkt, const IpUdpInfo& flow) {
  auto body = std::span<const uint8_t>(*pkt).first(pkt->size() - 4);
  StoreIcrc(ComputeIcrc(flow, body), pkt->data() + body.size());
}

TEST(PacketHostileTest, TverOtherThanZeroIsRefused) {
  IpUdpInfo flow;
  auto pkt = Make(op::kSendOnly, 8, &flow);
  pkt[1] |= 0x01;
  Reseal(&pkt, flow);
  ExpectRefused(ParseExact(pkt, &flow), EINVAL, "TVer 1 is not 0");
}

TEST(PacketHostileTest, PadMismatchesAreRefused) {
  IpUdpInfo flow;
  // Pad count larger than what follows the headers: SEND_ONLY with 0 payload bytes and PadCnt 3.
  auto pkt = Make(op::kSendOnly, 0, &flow);
  pkt[1] |= 0x30;
  Reseal(&pkt, flow);
  ExpectRefused(ParseExact(pkt, &flow), EINVAL, "PadCnt 3 exceeds");
  // A length no pad count explains: 5 payload bytes sent without their 3 pad bytes.
  pkt = Make(op::kSendOnly, 5, &flow);
  pkt.erase(pkt.end() - 7, pkt.end() - 4);
  Reseal(&pkt, flow);
  ExpectRefused(ParseExact(pkt, &flow), EINVAL, "not a multiple of 4");
  // A pad count on an opcode without payload.
  pkt = Make(op::kAcknowledge, 0, &flow);
  pkt[1] |= 0x10;
  Reseal(&pkt, flow);
  ExpectRefused(ParseExact(pkt, &flow), EINVAL, "carries no payload");
}

TEST(PacketHostileTest, PayloadOnOpcodesThatCarryNoneIsRefused) {
  for (uint8_t opcode : {op::kRdmaReadRequest, op::kAcknowledge, op::kAtomicAcknowledge,
                         op::kCompareSwap, op::kFetchAdd}) {
    IpUdpInfo flow;
    auto pkt = Make(opcode, 0, &flow);
    pkt.insert(pkt.end() - 4, {1, 2, 3, 4});
    Reseal(&pkt, flow);
    ExpectRefused(ParseExact(pkt, &flow), EINVAL, "carries no payload but has 4 bytes");
  }
}

TEST(PacketHostileTest, TooShortForItsOpcodeIsRefused) {
  IpUdpInfo flow;
  auto pkt = Make(op::kCompareSwap, 0, &flow);  // BTH + AtomicETH (40) + ICRC
  pkt.erase(pkt.begin() + 20, pkt.begin() + 24);
  Reseal(&pkt, flow);
  ExpectRefused(ParseExact(pkt, &flow), EINVAL,
                "shorter than the headers + ICRC of RC_COMPARE_SWAP");
  ExpectRefused(ParseExact(std::vector<uint8_t>(15, 0), nullptr), EINVAL,
                "shorter than BTH + ICRC");
}

TEST(PacketHostileTest, IcrcMismatchIsRefusedOnlyWhenChecked) {
  IpUdpInfo flow;
  auto pkt = Make(op::kSendOnly, 4, &flow);
  pkt[12] ^= 0xff;  // payload byte
  ExpectRefused(ParseExact(pkt, &flow), EBADMSG, "ICRC mismatch");
  EXPECT_TRUE(ParseExact(pkt, nullptr).ok());
  IpUdpInfo other = flow;
  other.src[3] = 9;  // the same bytes from another address do not verify
  pkt = Make(op::kSendOnly, 4, &flow);
  ExpectRefused(ParseExact(pkt, &other), EBADMSG, "ICRC mismatch");
}

// A bounded, deterministic fuzz loop: random bytes, random lengths, mutated captures.
TEST(PacketHostileTest, TwentyThousandRandomInputsNeverCrash) {
  auto seeds = AllCapturedPackets();
  ASSERT_FALSE(seeds.empty());
  std::mt19937_64 rng(0x5eed);
  size_t accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    const CapturedPacket& seed = seeds[rng() % seeds.size()];
    std::vector<uint8_t> in;
    switch (i % 4) {
      case 0:  // random bytes, random length
        in.resize(rng() % 300);
        for (auto& b : in) b = static_cast<uint8_t>(rng());
        break;
      case 1:  // a capture with a random opcode and PadCnt/TVer byte
        in = seed.udp_payload;
        in[0] = static_cast<uint8_t>(rng());
        in[1] = static_cast<uint8_t>(rng());
        break;
      default:  // a capture with 1-8 random bit flips and maybe a new length
        in = seed.udp_payload;
        for (int f = 1 + static_cast<int>(rng() % 8); f > 0; --f)
          in[rng() % in.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
        if (rng() % 2) in.resize(rng() % (in.size() + 64), 0);
    }
    auto checked = ParseExact(in, &seed.flow);
    auto unchecked = ParseExact(in, nullptr);
    // The ICRC check only ever adds refusals.
    if (checked.ok()) {
      EXPECT_TRUE(unchecked.ok());
    }
    if (unchecked.ok()) ++accepted;
  }
  EXPECT_GT(accepted, 0u);  // the loop does reach the decoders, not only the first check
}

}  // namespace
}  // namespace softverbs::fabric::packet
