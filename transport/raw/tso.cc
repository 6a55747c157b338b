#include "transport/raw/tso.h"

#include "base/big_endian.h"
#include "fabric/raw/frame.h"

namespace softverbs::transport::raw {
namespace {

constexpr uint8_t kFin = 0x01, kPsh = 0x08, kCwr = 0x80;

}  // namespace

bool SegmentTso(std::span<const uint8_t> header, std::span<const uint8_t> payload, uint16_t mss,
                std::vector<std::vector<uint8_t>>* frames) {
  // The header's IP length fields may hold anything (a NIC rewrites them): make them cover the
  // header itself so it parses, then read it.
  fabric::raw::FrameView v;
  if (mss == 0 || !fabric::raw::ParseFrame(header, &v) || v.ip_version == 0) return false;
  std::vector<uint8_t> fixed(header.begin(), header.end());
  if (v.ip_version == 4) PutBe16(fixed.data() + v.l3_offset + 2, static_cast<uint16_t>(fixed.size() - v.l3_offset));
  if (v.ip_version == 6) PutBe16(fixed.data() + v.l3_offset + 4, static_cast<uint16_t>(fixed.size() - v.l3_offset - 40));
  header = fixed;
  if (!fabric::raw::ParseFrame(header, &v) || v.fragment || v.ip_proto != fabric::raw::kIpProtoTcp ||
      v.l4_offset == 0 || v.l4_offset + 20 > header.size())
    return false;
  const size_t tcp_len = (header[v.l4_offset + 12] >> 4) * 4u;
  if (tcp_len < 20 || v.l4_offset + tcp_len != header.size()) return false;
  const size_t l3 = v.l3_offset, l4 = v.l4_offset;
  const uint32_t seq0 = Be32(header.data() + l4 + 4);
  const uint16_t id0 = v.ip_version == 4 ? static_cast<uint16_t>(header[l3 + 4] << 8 | header[l3 + 5]) : 0;
  const uint8_t flags0 = header[l4 + 13];
  size_t offset = 0;
  uint32_t index = 0;
  do {
    const size_t n = std::min<size_t>(mss, payload.size() - offset);
    const bool last = offset + n == payload.size();
    std::vector<uint8_t> f(header.begin(), header.end());
    f.insert(f.end(), payload.begin() + static_cast<ptrdiff_t>(offset), payload.begin() + static_cast<ptrdiff_t>(offset + n));
    uint8_t* ip = f.data() + l3;
    if (v.ip_version == 4) {
      PutBe16(ip + 2, static_cast<uint16_t>(l4 - l3 + tcp_len + n));
      PutBe16(ip + 4, static_cast<uint16_t>(id0 + index));
    } else {
      PutBe16(ip + 4, static_cast<uint16_t>(tcp_len + n));
    }
    uint8_t* tcp = f.data() + l4;
    PutBe32(tcp + 4, seq0 + static_cast<uint32_t>(offset));
    uint8_t flags = flags0;
    if (!last) flags &= static_cast<uint8_t>(~(kFin | kPsh));
    if (index != 0) flags &= static_cast<uint8_t>(~kCwr);
    tcp[13] = flags;
    fabric::raw::FillChecksums(f);
    frames->push_back(std::move(f));
    offset += n;
    ++index;
  } while (offset < payload.size());
  return true;
}

}  // namespace softverbs::transport::raw
