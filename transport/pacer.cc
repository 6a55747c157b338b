#include "transport/pacer.h"

#include <algorithm>

namespace softverbs::transport {

void Pacer::Configure(uint32_t rate_kbps, uint32_t burst_bytes) {
  if (rate_kbps == rate_kbps_ && burst_bytes == burst_bytes_) return;
  rate_kbps_ = rate_kbps;
  burst_bytes_ = burst_bytes;
  full_at_ = TimePoint{};
}

std::chrono::nanoseconds Pacer::CostOf(uint64_t bytes) const {
  // bytes * 8 bits at rate_kbps * 1000 bits/s: bytes * 8e6 / rate_kbps ns. A message is at most
  // 2^31 bytes and a burst 2^32: the product stays below 2^63.
  if (rate_kbps_ == 0) return std::chrono::nanoseconds(0);
  return std::chrono::nanoseconds(static_cast<int64_t>(bytes * 8000000ull / rate_kbps_));
}

Pacer::TimePoint Pacer::ReadyAt(uint64_t bytes) const {
  // At `now` the bucket holds burst - (full_at - now) * rate bytes (when full_at > now): `n`
  // bytes from full_at - time(burst) + time(n) on.
  const uint64_t n = std::min<uint64_t>(bytes, burst_bytes_);
  return full_at_ - CostOf(burst_bytes_) + CostOf(n);
}

void Pacer::Take(uint64_t bytes, TimePoint now) {
  if (!limited()) return;
  // A bucket that filled up while idle starts from full (no credit beyond the burst).
  full_at_ = std::max(full_at_, now) + CostOf(bytes);
}

}  // namespace softverbs::transport
