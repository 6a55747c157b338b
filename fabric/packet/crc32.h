// CRC-32 with the IEEE 802.3 / zlib polynomial (reflected 0xEDB88320), table driven, slice-by-8.
// RoCEv2's ICRC is this CRC (IBA Annex A17; the kernel's rxe uses crc32_le()).
#pragma once

#include <cstddef>
#include <cstdint>

namespace softverbs::fabric::packet {

// Advances a raw CRC register over `len` bytes: no pre- or post-inversion, exactly like the
// kernel's crc32_le(). zlib's crc32(c, p, n) is ~Crc32Update(~c, p, n).
uint32_t Crc32Update(uint32_t state, const void* data, size_t len);

// zlib.crc32(data) (inverted start and end).
inline uint32_t Crc32(const void* data, size_t len) { return ~Crc32Update(~0u, data, len); }

}  // namespace softverbs::fabric::packet
