#include "transport/block_signature.h"

#include <array>

namespace softverbs::transport {
namespace {

// Table-driven reflected CRC of `Word`'s width for the reflected polynomial `poly`.
template <typename Word>
struct SigReflectedTable {
  std::array<Word, 256> t{};
  explicit constexpr SigReflectedTable(Word poly) {
    for (Word i = 0; i < 256; ++i) {
      Word c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ poly : c >> 1;
      t[i] = c;
    }
  }
};
constexpr SigReflectedTable<uint32_t> kSigCrc32Table(0xEDB88320u);   // 0x04C11DB7 reflected
constexpr SigReflectedTable<uint32_t> kSigCrc32cTable(0x82F63B78u);  // 0x1EDC6F41 reflected
constexpr SigReflectedTable<uint64_t> kSigCrc64Xp10Table(0x9A6C9329AC4BC9B5ull);  // 0xAD93D23594C93659 reflected

uint32_t SigReflectedCrc(const SigReflectedTable<uint32_t>& table, uint32_t seed, const uint8_t* p, size_t n) {
  uint32_t c = seed;
  for (size_t i = 0; i < n; ++i) c = table.t[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return ~c;
}

struct SigCrc16Table {
  std::array<uint16_t, 256> t{};
  constexpr SigCrc16Table() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint16_t c = static_cast<uint16_t>(i << 8);
      for (int k = 0; k < 8; ++k) c = static_cast<uint16_t>((c & 0x8000) ? (c << 1) ^ 0x8BB7 : c << 1);
      t[i] = c;
    }
  }
};
constexpr SigCrc16Table kSigCrc16Table;

// The field of a block: its bytes in stream order (big-endian values).
void SigPutBe(uint64_t v, size_t bytes, uint8_t* out) {
  for (size_t i = 0; i < bytes; ++i) out[i] = static_cast<uint8_t>(v >> (8 * (bytes - 1 - i)));
}
uint64_t SigGetBe(const uint8_t* p, size_t bytes) {
  uint64_t v = 0;
  for (size_t i = 0; i < bytes; ++i) v = v << 8 | p[i];
  return v;
}

uint64_t SigGuard(const SigDomain& d, const uint8_t* data) {
  switch (d.kind) {
    case SigKind::kCrc32: return SigCrc32(static_cast<uint32_t>(d.seed), data, d.block_size);
    case SigKind::kCrc32c: return SigCrc32c(static_cast<uint32_t>(d.seed), data, d.block_size);
    case SigKind::kCrc64Xp10: return SigCrc64Xp10(d.seed, data, d.block_size);
    case SigKind::kT10Dif:
      return d.guard == GuardKind::kCrc ? SigCrc16T10Dif(static_cast<uint16_t>(d.seed), data, d.block_size)
                                        : SigIpChecksum(static_cast<uint16_t>(d.seed), data, d.block_size);
    case SigKind::kNone: break;
  }
  return 0;
}

}  // namespace

void SigGenerate(const SigDomain& d, uint64_t index, const uint8_t* data, uint8_t* field) {
  if (d.kind == SigKind::kT10Dif) {
    SigPutBe(SigGuard(d, data), 2, field);
    SigPutBe(d.app_tag, 2, field + 2);
    SigPutBe(static_cast<uint32_t>(d.ref_tag + (d.ref_increments ? index : 0)), 4, field + 4);
  } else {
    SigPutBe(SigGuard(d, data), SigFieldBytes(d), field);
  }
}

namespace {

// `v` (a part of the field n bytes wide starting at field byte `first`) with the bytes that
// `mask` leaves out cleared: bit 7 - i of check_mask selects field byte i.
uint64_t SigMasked(uint64_t v, size_t first, size_t n, size_t width, uint8_t mask) {
  uint64_t keep = 0;
  for (size_t i = 0; i < n; ++i)
    if (mask & (0x80 >> (first + i))) keep |= uint64_t{0xff} << (8 * (width - 1 - i));
  return v & keep;
}

}  // namespace

SigError SigCheck(const SigDomain& d, uint8_t mask, uint64_t index, uint64_t offset, const uint8_t* data,
                  const uint8_t* field) {
  SigError e;
  e.offset = offset;
  const uint64_t guard = SigGuard(d, data);
  if (d.kind != SigKind::kT10Dif) {
    const size_t w = SigFieldBytes(d);
    const uint64_t held = SigGetBe(field, w);
    if (SigMasked(guard, 0, w, w, mask) != SigMasked(held, 0, w, w, mask))
      e.kind = SigErrorKind::kGuard, e.actual = guard, e.expected = held;
    return e;
  }
  const uint16_t app = static_cast<uint16_t>(SigGetBe(field + 2, 2));
  const uint32_t ref = static_cast<uint32_t>(SigGetBe(field + 4, 4));
  // mlx5dv_wr_set_mkey_sig_block(3): the escapes skip the block guard check.
  const bool escaped = (d.app_escape && app == 0xFFFF) || (d.app_ref_escape && app == 0xFFFF && ref == 0xFFFFFFFF);
  const uint64_t held_guard = SigGetBe(field, 2);
  const uint32_t want_ref = static_cast<uint32_t>(d.ref_tag + (d.ref_increments ? index : 0));
  if (!escaped && SigMasked(guard, 0, 2, 2, mask) != SigMasked(held_guard, 0, 2, 2, mask))
    e.kind = SigErrorKind::kGuard, e.actual = guard, e.expected = held_guard;
  else if (SigMasked(app, 2, 2, 2, mask) != SigMasked(d.app_tag, 2, 2, 2, mask))
    e.kind = SigErrorKind::kAppTag, e.actual = app, e.expected = d.app_tag;
  else if (SigMasked(ref, 4, 4, 4, mask) != SigMasked(want_ref, 4, 4, 4, mask))
    e.kind = SigErrorKind::kRefTag, e.actual = ref, e.expected = want_ref;
  return e;
}

uint32_t SigCrc32(uint32_t seed, const uint8_t* data, size_t n) { return SigReflectedCrc(kSigCrc32Table, seed, data, n); }
uint32_t SigCrc32c(uint32_t seed, const uint8_t* data, size_t n) {
  return SigReflectedCrc(kSigCrc32cTable, seed, data, n);
}

uint64_t SigCrc64Xp10(uint64_t seed, const uint8_t* data, size_t n) {
  uint64_t c = seed;
  for (size_t i = 0; i < n; ++i) c = kSigCrc64Xp10Table.t[(c ^ data[i]) & 0xff] ^ (c >> 8);
  return ~c;
}

uint16_t SigCrc16T10Dif(uint16_t seed, const uint8_t* data, size_t n) {
  uint16_t c = seed;
  for (size_t i = 0; i < n; ++i) c = static_cast<uint16_t>((c << 8) ^ kSigCrc16Table.t[((c >> 8) ^ data[i]) & 0xff]);
  return c;
}

uint16_t SigIpChecksum(uint16_t seed, const uint8_t* data, size_t n) {
  uint64_t sum = seed;
  for (size_t i = 0; i + 1 < n; i += 2) sum += static_cast<uint32_t>(data[i] << 8 | data[i + 1]);
  if (n & 1) sum += static_cast<uint32_t>(data[n - 1] << 8);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

size_t SigFieldBytes(const SigDomain& d) {
  switch (d.kind) {
    case SigKind::kCrc32:
    case SigKind::kCrc32c: return 4;
    case SigKind::kT10Dif:
    case SigKind::kCrc64Xp10: return 8;
    case SigKind::kNone: break;
  }
  return 0;
}

bool SigConvert(const SigDomain& from, const SigDomain& to, uint8_t check_mask, const uint8_t* in, size_t n,
                std::vector<uint8_t>* out, SigError* error) {
  const bool both = from.kind != SigKind::kNone && to.kind != SigKind::kNone;
  if (both && from.block_size != to.block_size) return false;
  const size_t block = from.kind != SigKind::kNone ? from.block_size : to.block_size;
  if (block == 0) return false;
  const size_t in_stride = block + SigFieldBytes(from);
  if (n % in_stride != 0) return false;
  const size_t blocks = n / in_stride;
  const size_t out_field = SigFieldBytes(to);
  out->resize(blocks * (block + out_field));
  *error = SigError{};
  uint8_t* o = out->data();
  for (size_t b = 0; b < blocks; ++b) {
    const uint8_t* data = in + b * in_stride;
    if (from.kind != SigKind::kNone && error->kind == SigErrorKind::kNone) {
      const SigError e = SigCheck(from, check_mask, b, b * in_stride, data, data + block);
      if (e.kind != SigErrorKind::kNone) *error = e;  // the first error is the one reported
    }
    for (size_t i = 0; i < block; ++i) o[i] = data[i];
    if (out_field) SigGenerate(to, b, data, o + block);
    o += block + out_field;
  }
  return true;
}

}  // namespace softverbs::transport
