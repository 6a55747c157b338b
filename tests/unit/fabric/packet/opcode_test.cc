#include "fabric/packet/opcode.h"

#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace softverbs::fabric::packet {
namespace {

using enum Ext;

struct Expected {
  uint8_t opcode;
  const char* name;
  std::vector<Ext> ext;
  bool payload;
  bool request;
  Position position;
};

// roce-wire.md 5.2 "Header order per opcode" and IBA 9.2, BTH OpCode, written out independently of
// the table under test.
const std::vector<Expected> kRc = {
    {0x00, "SEND_FIRST", {}, true, true, Position::kFirst},
    {0x01, "SEND_MIDDLE", {}, true, true, Position::kMiddle},
    {0x02, "SEND_LAST", {}, true, true, Position::kLast},
    {0x03, "SEND_LAST_WITH_IMMEDIATE", {kImmDt}, true, true, Position::kLast},
    {0x04, "SEND_ONLY", {}, true, true, Position::kOnly},
    {0x05, "SEND_ONLY_WITH_IMMEDIATE", {kImmDt}, true, true, Position::kOnly},
    {0x06, "RDMA_WRITE_FIRST", {kReth}, true, true, Position::kFirst},
    {0x07, "RDMA_WRITE_MIDDLE", {}, true, true, Position::kMiddle},
    {0x08, "RDMA_WRITE_LAST", {}, true, true, Position::kLast},
    {0x09, "RDMA_WRITE_LAST_WITH_IMMEDIATE", {kImmDt}, true, true, Position::kLast},
    {0x0a, "RDMA_WRITE_ONLY", {kReth}, true, true, Position::kOnly},
    {0x0b, "RDMA_WRITE_ONLY_WITH_IMMEDIATE", {kReth, kImmDt}, true, true, Position::kOnly},
    {0x0c, "RDMA_READ_REQUEST", {kReth}, false, true, Position::kOnly},
    {0x0d, "RDMA_READ_RESPONSE_FIRST", {kAeth}, true, false, Position::kFirst},
    {0x0e, "RDMA_READ_RESPONSE_MIDDLE", {}, true, false, Position::kMiddle},
    {0x0f, "RDMA_READ_RESPONSE_LAST", {kAeth}, true, false, Position::kLast},
    {0x10, "RDMA_READ_RESPONSE_ONLY", {kAeth}, true, false, Position::kOnly},
    {0x11, "ACKNOWLEDGE", {kAeth}, false, false, Position::kOnly},
    {0x12, "ATOMIC_ACKNOWLEDGE", {kAeth, kAtomicAckEth}, false, false, Position::kOnly},
    {0x13, "COMPARE_SWAP", {kAtomicEth}, false, true, Position::kOnly},
    {0x14, "FETCH_ADD", {kAtomicEth}, false, true, Position::kOnly},
    {0x16, "SEND_LAST_WITH_INVALIDATE", {kIeth}, true, true, Position::kLast},
    {0x17, "SEND_ONLY_WITH_INVALIDATE", {kIeth}, true, true, Position::kOnly},
};

void ExpectEntry(uint8_t opcode, const std::string& name, const Expected& e, Transport t) {
  const OpcodeInfo* info = LookupOpcode(opcode);
  ASSERT_NE(info, nullptr) << std::hex << int{opcode};
  EXPECT_EQ(info->name, name);
  EXPECT_EQ(info->transport, t);
  ASSERT_EQ(info->ext_count, e.ext.size()) << name;
  size_t bytes = kBthBytes;
  for (size_t i = 0; i < e.ext.size(); ++i) {
    EXPECT_EQ(info->ext[i], e.ext[i]) << name;
    EXPECT_TRUE(info->Has(e.ext[i]));
    EXPECT_EQ(info->OffsetOf(e.ext[i]), bytes) << name;
    bytes += ExtBytes(e.ext[i]);
  }
  EXPECT_EQ(info->header_bytes, bytes) << name;
  EXPECT_EQ(info->has_payload, e.payload) << name;
  EXPECT_EQ(info->request, e.request) << name;
  EXPECT_EQ(info->position, e.position) << name;
  EXPECT_EQ(info->has_immediate, info->Has(kImmDt));
  EXPECT_EQ(info->has_invalidate, info->Has(kIeth));
}

TEST(OpcodeTest, RcOpcodes) {
  for (const Expected& e : kRc)
    ExpectEntry(e.opcode, std::string("RC_") + e.name, e, Transport::kRc);
}

TEST(OpcodeTest, UcHasTheSendsAndWritesOnly) {
  for (const Expected& e : kRc)
    if (e.opcode <= 0x0b)
      ExpectEntry(0x20 | e.opcode, std::string("UC_") + e.name, e, Transport::kUc);
  for (int code = 0x2c; code < 0x40; ++code) EXPECT_EQ(LookupOpcode(code), nullptr) << code;
}

TEST(OpcodeTest, UdHasTwoSendOnlys) {
  ExpectEntry(0x64, "UD_SEND_ONLY", {0x64, "", {kDeth}, true, true, Position::kOnly},
              Transport::kUd);
  ExpectEntry(0x65, "UD_SEND_ONLY_WITH_IMMEDIATE",
              {0x65, "", {kDeth, kImmDt}, true, true, Position::kOnly}, Transport::kUd);
  EXPECT_EQ(LookupOpcode(0x64)->header_bytes, 20);
}

TEST(OpcodeTest, EverythingElseIsUnknown) {
  std::set<int> known;
  for (const Expected& e : kRc) known.insert(e.opcode);
  for (const Expected& e : kRc)
    if (e.opcode <= 0x0b) known.insert(0x20 | e.opcode);
  known.insert(0x64);
  known.insert(0x65);
  for (int code = 0; code < 256; ++code)
    EXPECT_EQ(LookupOpcode(static_cast<uint8_t>(code)) != nullptr, known.count(code) == 1)
        << "opcode " << code;
  // Named examples: reserved RC 0x15, rxe's FLUSH / ATOMIC_WRITE, RD SEND_ONLY, CNP.
  for (int code : {0x15, 0x1c, 0x1d, 0x44, 0x81}) EXPECT_EQ(LookupOpcode(code), nullptr);
}

TEST(OpcodeTest, ExtensionHeaderSizes) {
  EXPECT_EQ(ExtBytes(kReth), 16);
  EXPECT_EQ(ExtBytes(kAeth), 4);
  EXPECT_EQ(ExtBytes(kAtomicEth), 28);
  EXPECT_EQ(ExtBytes(kAtomicAckEth), 8);
  EXPECT_EQ(ExtBytes(kDeth), 8);
  EXPECT_EQ(ExtBytes(kImmDt), 4);
  EXPECT_EQ(ExtBytes(kIeth), 4);
}

}  // namespace
}  // namespace softverbs::fabric::packet
