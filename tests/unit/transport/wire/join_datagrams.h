// Test helper: the datagrams a ResponsePath::send call carries, each joined from its pieces.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <span>
#include <vector>

namespace softverbs::transport {

inline std::vector<std::vector<uint8_t>> JoinDatagrams(std::span<const iovec> pieces,
                                                       std::span<const uint16_t> counts) {
  std::vector<std::vector<uint8_t>> out;
  size_t at = 0;
  const size_t n = counts.empty() ? pieces.size() : counts.size();
  for (size_t i = 0; i < n; ++i) {
    std::vector<uint8_t>& d = out.emplace_back();
    for (size_t k = 0; k < (counts.empty() ? 1u : counts[i]); ++k, ++at) {
      const auto* p = static_cast<const uint8_t*>(pieces[at].iov_base);
      d.insert(d.end(), p, p + pieces[at].iov_len);
    }
  }
  return out;
}

}  // namespace softverbs::transport
