// ECE in the CM MADs (cm/mad_message.cc): where the kernel's cm.c puts it, byte for byte.
// REQ: vendor ID in bytes 29-31 (CM_REQ_VENDOR_ID: the local comm ID is 24-27, byte 28 stays
// reserved); REP: its three bytes H/M/L in the reserved byte after
// each 24-bit field (39, 43, 47: CM_REP_VENDOR_ID_{H,M,L}); SIDR_REP: L at 35, the 16-bit H at
// 30-31 holding bits 15:8 only (cm_format_sidr_rep). The options: the MAD header's attribute
// modifier, bytes 20-23 (cm_format_mad_ece_hdr), for REQ, REP and SIDR_REP only.
#include <arpa/inet.h>
#include <netinet/in.h>

#include <vector>

#include <gtest/gtest.h>

#include "cm/mad.h"

namespace softverbs::cm::mad {
namespace {

constexpr uint32_t kEceTestVendor = 0x5356;  // softverbs0's vendor_id (core/device.cc)
constexpr uint32_t kEceTestOptions = 0x10000001;

Message EceTestMessage(MessageType type) {
  Message m;
  m.type = type;
  auto* src = reinterpret_cast<sockaddr_in*>(&m.src);
  auto* dst = reinterpret_cast<sockaddr_in*>(&m.dst);
  src->sin_family = dst->sin_family = AF_INET;
  inet_pton(AF_INET, "10.0.0.1", &src->sin_addr);
  inet_pton(AF_INET, "10.0.0.2", &dst->sin_addr);
  src->sin_port = htons(40000);
  dst->sin_port = htons(7174);
  m.qpn = 0xabcdef;
  m.psn = 0x123456;
  m.ece = {kEceTestVendor, kEceTestOptions};
  return m;
}

std::vector<uint8_t> EceTestEncode(const Message& m) {
  MadContext ctx;
  ctx.local_comm_id = 0x11223344;
  ctx.remote_comm_id = 0x55667788;
  ctx.service_id = ServiceId(PortSpace::kTcp, 7174);
  auto mad = MadOfMessage(m, ctx);
  EXPECT_TRUE(mad.ok()) << mad.status().rule();
  if (!mad.ok()) return {};
  auto bytes = EncodeMad(*mad);
  EXPECT_TRUE(bytes.ok()) << bytes.status().rule();
  if (!bytes.ok()) return {};
  return {bytes->begin(), bytes->end()};
}

std::vector<uint8_t> EceTestSlice(const std::vector<uint8_t>& b, size_t from, size_t n) {
  return {b.begin() + static_cast<long>(from), b.begin() + static_cast<long>(from + n)};
}

Message EceTestDecode(const std::vector<uint8_t>& b) {
  auto mad = DecodeMad(b);
  EXPECT_TRUE(mad.ok()) << mad.status().rule();
  if (!mad.ok()) return {};
  auto m = MessageOfMad(*mad, nullptr);
  EXPECT_TRUE(m.ok()) << m.status().rule();
  return m.ok() ? *m : Message{};
}

TEST(MadEceTest, ReqCarriesTheVendorIdAt29AndTheOptionsAsAttributeModifier) {
  auto b = EceTestEncode(EceTestMessage(MessageType::kReq));
  ASSERT_EQ(b.size(), kMadBytes);
  EXPECT_EQ(EceTestSlice(b, 20, 4), (std::vector<uint8_t>{0x10, 0x00, 0x00, 0x01}));
  EXPECT_EQ(EceTestSlice(b, 24, 4), (std::vector<uint8_t>{0x11, 0x22, 0x33, 0x44}));  // local comm ID
  EXPECT_EQ(EceTestSlice(b, 28, 4), (std::vector<uint8_t>{0x00, 0x00, 0x53, 0x56}));
  Message back = EceTestDecode(b);
  EXPECT_EQ(back.ece.vendor_id, kEceTestVendor);
  EXPECT_EQ(back.ece.options, kEceTestOptions);
}

TEST(MadEceTest, RepSpreadsTheVendorIdOverThreeReservedBytes) {
  Message m = EceTestMessage(MessageType::kRep);
  m.ece.vendor_id = 0xa1b2c3;
  auto b = EceTestEncode(m);
  ASSERT_EQ(b.size(), kMadBytes);
  EXPECT_EQ(EceTestSlice(b, 20, 4), (std::vector<uint8_t>{0x10, 0x00, 0x00, 0x01}));
  // QPN 36-38 then H; EECN 40-42 (0) then M; starting PSN 44-46 then L.
  EXPECT_EQ(EceTestSlice(b, 36, 12), (std::vector<uint8_t>{0xab, 0xcd, 0xef, 0xa1, 0, 0, 0, 0xb2,
                                                           0x12, 0x34, 0x56, 0xc3}));
  Message back = EceTestDecode(b);
  EXPECT_EQ(back.qpn, 0xabcdefu);
  EXPECT_EQ(back.psn, 0x123456u);
  EXPECT_EQ(back.ece.vendor_id, 0xa1b2c3u);
  EXPECT_EQ(back.ece.options, kEceTestOptions);
}

TEST(MadEceTest, AVendorIdWiderThan24BitsKeepsItsLow24AsTheKernelsIbaSet) {
  Message m = EceTestMessage(MessageType::kReq);
  m.ece.vendor_id = 0x7f5356;
  m.ece.vendor_id |= 0x01000000;
  auto b = EceTestEncode(m);
  ASSERT_EQ(b.size(), kMadBytes);
  EXPECT_EQ(EceTestSlice(b, 28, 4), (std::vector<uint8_t>{0x00, 0x7f, 0x53, 0x56}));
}

TEST(MadEceTest, SidrRepCarriesTheVendorIdsLowTwoBytesAsTheKernelWritesThem) {
  Message m = EceTestMessage(MessageType::kSidrRep);
  m.ece.vendor_id = 0xa1b2c3;
  auto b = EceTestEncode(m);
  ASSERT_EQ(b.size(), kMadBytes);
  EXPECT_EQ(EceTestSlice(b, 20, 4), (std::vector<uint8_t>{0x10, 0x00, 0x00, 0x01}));
  // VENDOR_ID_H (16 bits at 30) = (vendor >> 8) & 0xff, QPN 32-34, VENDOR_ID_L at 35.
  EXPECT_EQ(EceTestSlice(b, 30, 6), (std::vector<uint8_t>{0x00, 0xb2, 0xab, 0xcd, 0xef, 0xc3}));
}

TEST(MadEceTest, OtherMessagesSendAZeroAttributeModifier) {
  for (MessageType t : {MessageType::kRtu, MessageType::kRej, MessageType::kDreq, MessageType::kDrep,
                        MessageType::kSidrReq}) {
    auto b = EceTestEncode(EceTestMessage(t));
    ASSERT_EQ(b.size(), kMadBytes) << MessageName(t);
    EXPECT_EQ(EceTestSlice(b, 20, 4), (std::vector<uint8_t>{0, 0, 0, 0})) << MessageName(t);
    EXPECT_EQ(EceTestDecode(b).ece.options, 0u) << MessageName(t);
  }
}

TEST(MadEceTest, NoEceIsAllZeroAsFromAKernelPeerWithoutEce) {
  Message m = EceTestMessage(MessageType::kReq);
  m.ece = {};
  auto b = EceTestEncode(m);
  ASSERT_EQ(b.size(), kMadBytes);
  EXPECT_EQ(EceTestSlice(b, 20, 4), (std::vector<uint8_t>{0, 0, 0, 0}));
  EXPECT_EQ(EceTestSlice(b, 28, 4), (std::vector<uint8_t>{0, 0, 0, 0}));
  Message back = EceTestDecode(b);
  EXPECT_EQ(back.ece.vendor_id, 0u);
  EXPECT_EQ(back.ece.options, 0u);
}

}  // namespace
}  // namespace softverbs::cm::mad
