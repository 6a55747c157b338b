#include "transport/signature_key.h"

#include <cstring>
#include <vector>

#include <gtest/gtest.h>

namespace softverbs::transport {
namespace {

// A memory layout as a plain vector: the callbacks of SigGather / SigScatter.
struct Memory {
  std::vector<uint8_t> bytes;
  static bool Read(void* c, uint64_t off, uint64_t n, uint8_t* dst) {
    auto& m = *static_cast<Memory*>(c);
    if (off + n > m.bytes.size()) return false;
    memcpy(dst, m.bytes.data() + off, n);
    return true;
  }
  static bool Write(void* c, uint64_t off, uint64_t n, const uint8_t* src) {
    auto& m = *static_cast<Memory*>(c);
    if (off + n > m.bytes.size()) return false;
    memcpy(m.bytes.data() + off, src, n);
    return true;
  }
};

std::vector<uint8_t> Data(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 13 + seed);
  return v;
}

SigDomain Crc32(uint32_t block = 512) {
  SigDomain d;
  d.kind = SigKind::kCrc32;
  d.block_size = block;
  d.seed = 0xFFFFFFFF;
  return d;
}

SigDomain T10(uint16_t app, uint32_t ref) {
  SigDomain d;
  d.kind = SigKind::kT10Dif;
  d.block_size = 512;
  d.seed = 0xFFFF;
  d.app_tag = app;
  d.ref_tag = ref;
  d.ref_increments = true;
  return d;
}

std::vector<uint8_t> Field(const SigDomain& d, uint64_t index, const uint8_t* data) {
  std::vector<uint8_t> f(SigFieldBytes(d));
  SigGenerate(d, index, data, f.data());
  return f;
}

SigConfig Config(SigDomain mem, SigDomain wire, uint8_t check = 0xff) {
  SigConfig c;
  c.active = 1;
  c.mem = mem;
  c.wire = wire;
  c.check_mask = check;
  return c;
}

// The wire length: whole memory blocks become whole wire blocks, a partial one its data only.
TEST(SignatureKeyTest, WireLength) {
  const SigGeometry insert = SigGeometryOf(Config({}, T10(0, 0)));
  EXPECT_EQ(insert.WireLength(1024), 1040u);
  EXPECT_EQ(insert.WireLength(700), 520u + 188u);
  const SigGeometry strip = SigGeometryOf(Config(Crc32(), {}));
  EXPECT_EQ(strip.WireLength(1032), 1024u);
  EXPECT_EQ(strip.WireLength(514), 512u);  // a partial field gives nothing
}

// Memory without a field, wire with CRC32: a gather inserts the field after each block; any
// part of the wire view is the same bytes.
TEST(SignatureKeyTest, GatherInsertsAndSlices) {
  Memory m{Data(1024, 1)};
  const SigConfig c = Config({}, Crc32());
  std::vector<uint8_t> wire(1032);
  SigError err;
  ASSERT_TRUE(SigGather(c, 1024, 0, wire.size(), Memory::Read, &m, wire.data(), &err));
  EXPECT_EQ(err.kind, SigErrorKind::kNone);
  std::vector<uint8_t> want(m.bytes.begin(), m.bytes.begin() + 512);
  auto f0 = Field(c.wire, 0, m.bytes.data());
  want.insert(want.end(), f0.begin(), f0.end());
  want.insert(want.end(), m.bytes.begin() + 512, m.bytes.end());
  auto f1 = Field(c.wire, 1, m.bytes.data() + 512);
  want.insert(want.end(), f1.begin(), f1.end());
  EXPECT_EQ(wire, want);
  std::vector<uint8_t> part(20);
  ASSERT_TRUE(SigGather(c, 1024, 505, part.size(), Memory::Read, &m, part.data(), &err));
  EXPECT_EQ(part, std::vector<uint8_t>(want.begin() + 505, want.begin() + 525));
}

// Memory with CRC32, wire without: a gather strips the field and checks it; the first bad
// block is reported with its wire offset; check_mask 0 checks nothing.
TEST(SignatureKeyTest, GatherStripsAndChecks) {
  const SigDomain crc = Crc32();
  Memory m{Data(1032, 2)};
  auto f0 = Field(crc, 0, m.bytes.data());
  memcpy(m.bytes.data() + 512, f0.data(), 4);
  m.bytes[1028] ^= 0x10;  // block 1's field is wrong
  std::vector<uint8_t> wire(1024);
  SigError err;
  ASSERT_TRUE(SigGather(Config(crc, {}, 0xf0), 1032, 0, 1024, Memory::Read, &m, wire.data(), &err));
  EXPECT_EQ(err.kind, SigErrorKind::kGuard);
  EXPECT_EQ(err.offset, 512u);
  EXPECT_EQ(err.actual, SigCrc32(0xFFFFFFFF, m.bytes.data() + 516, 512));
  EXPECT_EQ(memcmp(wire.data(), m.bytes.data(), 512), 0);
  EXPECT_EQ(memcmp(wire.data() + 512, m.bytes.data() + 516, 512), 0);
  ASSERT_TRUE(SigGather(Config(crc, {}, 0), 1032, 0, 1024, Memory::Read, &m, wire.data(), &err));
  EXPECT_EQ(err.kind, SigErrorKind::kNone);
  // A block the access does not reach whole in memory is not checked: 600 bytes of layout.
  ASSERT_TRUE(SigGather(Config(crc, {}, 0xf0), 600, 0, 512, Memory::Read, &m, wire.data(), &err));
  EXPECT_EQ(err.kind, SigErrorKind::kNone);
}

// Wire T10-DIF into memory T10-DIF with other tags: checked with the wire's, regenerated with
// the memory's -- unless the copy mask keeps the wire bytes.
TEST(SignatureKeyTest, ScatterConvertsAndCopies) {
  const SigDomain wire_d = T10(0x1111, 7), mem_d = T10(0x2222, 100);
  auto data = Data(1024, 3);
  std::vector<uint8_t> wire;
  for (int b = 0; b < 2; ++b) {
    wire.insert(wire.end(), data.begin() + b * 512, data.begin() + (b + 1) * 512);
    auto f = Field(wire_d, b, data.data() + b * 512);
    wire.insert(wire.end(), f.begin(), f.end());
  }
  Memory m{std::vector<uint8_t>(1040)};
  SigError err;
  ASSERT_TRUE(SigScatter(Config(mem_d, wire_d), 1040, 0, wire.data(), wire.size(), Memory::Write, &m, &err));
  EXPECT_EQ(err.kind, SigErrorKind::kNone);
  EXPECT_EQ(memcmp(m.bytes.data() + 520, data.data() + 512, 512), 0);
  EXPECT_EQ(std::vector<uint8_t>(m.bytes.begin() + 1032, m.bytes.end()), Field(mem_d, 1, data.data() + 512));
  SigConfig copy = Config(mem_d, wire_d);
  copy.copy_mask = 0x30;  // the application tag travels as it came
  ASSERT_TRUE(SigScatter(copy, 1040, 0, wire.data(), wire.size(), Memory::Write, &m, &err));
  EXPECT_EQ(m.bytes[514], 0x11);
  EXPECT_EQ(m.bytes[515], 0x11);
  EXPECT_EQ(m.bytes[516], 0);  // ref tag 100 regenerated
  EXPECT_EQ(m.bytes[519], 100);
  // A wrong reference tag in block 1 is the error (guard and app tag right).
  wire[520 + 512 + 7] ^= 1;
  ASSERT_TRUE(SigScatter(Config(mem_d, wire_d), 1040, 0, wire.data(), wire.size(), Memory::Write, &m, &err));
  EXPECT_EQ(err.kind, SigErrorKind::kRefTag);
  EXPECT_EQ(err.expected, 8u);
  EXPECT_EQ(err.offset, 520u);
}

// A scatter that carries part of a block lands its data bytes only: nothing is checked and no
// memory field is written; the rest of the block, whole in one access, is.
TEST(SignatureKeyTest, ScatterOfAPartialBlock) {
  const SigDomain crc = Crc32();
  auto data = Data(512, 4);
  Memory m{std::vector<uint8_t>(516, 0xEE)};
  SigError err;
  ASSERT_TRUE(SigScatter(Config(crc, {}), 516, 0, data.data(), 300, Memory::Write, &m, &err));
  EXPECT_EQ(memcmp(m.bytes.data(), data.data(), 300), 0);
  EXPECT_EQ(m.bytes[300], 0xEE);
  EXPECT_EQ(m.bytes[512], 0xEE);
  ASSERT_TRUE(SigScatter(Config(crc, {}), 516, 0, data.data(), 512, Memory::Write, &m, &err));
  EXPECT_EQ(std::vector<uint8_t>(m.bytes.begin() + 512, m.bytes.end()), Field(crc, 0, data.data()));
}

// The first error stays until taken; taking clears it.
TEST(SignatureKeyTest, ErrorSlotKeepsTheFirst) {
  SigErrorSlot slot;
  SigRecordError(slot, SigError{SigErrorKind::kAppTag, 1, 2, 3});
  SigRecordError(slot, SigError{SigErrorKind::kGuard, 4, 5, 6});
  const SigError e = SigTakeError(slot);
  EXPECT_EQ(e.kind, SigErrorKind::kAppTag);
  EXPECT_EQ(e.offset, 3u);
  EXPECT_EQ(SigTakeError(slot).kind, SigErrorKind::kNone);
}

// A failing memory callback fails the access.
TEST(SignatureKeyTest, MemoryFailure) {
  Memory m{std::vector<uint8_t>(100)};
  std::vector<uint8_t> out(520);
  SigError err;
  EXPECT_FALSE(SigGather(Config({}, Crc32()), 512, 0, 516, Memory::Read, &m, out.data(), &err));
  EXPECT_FALSE(SigScatter(Config({}, Crc32()), 512, 0, out.data(), 516, Memory::Write, &m, &err));
}

}  // namespace
}  // namespace softverbs::transport
