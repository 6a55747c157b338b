// Packet pacing of one send queue (ibv_modify_qp_rate_limit(3), IBV_QP_RATE_LIMIT of
// ibv_modify_qp(3)): "the MAX send rate this QP will send". A token bucket of `burst` bytes that
// fills at `rate_kbps`; a message leaves once the bucket holds its bytes and takes them. One
// longer than the burst leaves once the bucket is full and takes them all, leaving the bucket
// in debt: the next waits until it is paid. The bucket is kept as the time it would be full
// again (the generic cell rate algorithm's theoretical arrival time), exact in integer ns.
//
// The pacer never reads a clock: the requester passes `now` (its pacing clock, injectable), so
// a test checks every decision against a fake clock.
#pragma once

#include <chrono>
#include <cstdint>

namespace softverbs::transport {

class Pacer {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  // rate_kbps 0: unlimited. A new rate or burst starts a full bucket; the same again (every
  // ibv_modify_qp reconfigures the requester) changes nothing.
  void Configure(uint32_t rate_kbps, uint32_t burst_bytes);
  bool limited() const { return rate_kbps_ != 0; }
  uint32_t rate_kbps() const { return rate_kbps_; }
  uint32_t burst_bytes() const { return burst_bytes_; }

  // Whether a message of `bytes` may leave at `now` (always, when unlimited).
  bool MayGo(uint64_t bytes, TimePoint now) const { return !limited() || now >= ReadyAt(bytes); }
  // The first moment the bucket holds `bytes` (at most a whole burst).
  TimePoint ReadyAt(uint64_t bytes) const;
  // A message of `bytes` left at `now` (MayGo was true).
  void Take(uint64_t bytes, TimePoint now);
  // The time `bytes` take at the rate (what they drain from the bucket).
  std::chrono::nanoseconds CostOf(uint64_t bytes) const;

 private:
  uint32_t rate_kbps_ = 0;
  uint32_t burst_bytes_ = 0;
  // When the bucket would be full again had nothing more been sent (never before a message).
  TimePoint full_at_{};
};

}  // namespace softverbs::transport
