// The clocks completions are stamped with (ibv_create_cq_ex(3) COMPLETION_TIMESTAMP and
// COMPLETION_TIMESTAMP_WALLCLOCK, ibv_query_rt_values_ex(3)).
#pragma once

#include <time.h>

#include <cstdint>

namespace softverbs {

// softverbs0's "HCA core clock" counts nanoseconds of CLOCK_MONOTONIC: every process of the host
// reads the same clock, so timestamps of completions produced by different processes compare.
inline constexpr uint64_t kDeviceClockKhz = 1000000;  // 1 GHz: one tick per nanosecond

inline uint64_t ClockNs(clockid_t id) {
  timespec ts{};
  clock_gettime(id, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}
inline uint64_t DeviceClockNow() { return ClockNs(CLOCK_MONOTONIC); }
inline uint64_t WallclockNow() { return ClockNs(CLOCK_REALTIME); }

}  // namespace softverbs
