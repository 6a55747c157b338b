// CRC-32 with the IEEE 802.3 / zlib polynomial (reflected 0xEDB88320). RoCEv2's ICRC is this CRC
// (IBA Annex A17; the kernel's rxe uses crc32_le()); it runs over every byte sent and received,
// so it is folded with carry-less multiplication where the CPU has it (PCLMULQDQ, or VPCLMULQDQ
// with AVX2 at twice its speed), ten to twenty times faster than the slice-by-8 tables that do
// the rest (short inputs, tails, other CPUs).
#pragma once

#include <cstddef>
#include <cstdint>

namespace softverbs::fabric::packet {

// Advances a raw CRC register over `len` bytes: no pre- or post-inversion, exactly like the
// kernel's crc32_le(). zlib's crc32(c, p, n) is ~Crc32Update(~c, p, n).
uint32_t Crc32Update(uint32_t state, const void* data, size_t len);
// The table-driven version alone (tests compare the two).
uint32_t Crc32UpdateTable(uint32_t state, const void* data, size_t len);

// The raw register after `zero_bytes` bytes of zeros, in O(log n) steps instead of n: feeding
// zeros multiplies the register by x^(8n) modulo the polynomial (the idea of zlib's
// crc32_combine). The CRC is linear, so this moves the effect of a changed byte to the end of
// the data (the IPv4 ID under the ICRC: icrc.h).
uint32_t Crc32ZeroExtend(uint32_t state, size_t zero_bytes);

// zlib.crc32(data) (inverted start and end).
inline uint32_t Crc32(const void* data, size_t len) { return ~Crc32Update(~0u, data, len); }

}  // namespace softverbs::fabric::packet
