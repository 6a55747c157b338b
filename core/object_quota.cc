#include "core/object_quota.h"

#include <atomic>
#include <string>

#include "core/device_limits.h"

namespace softverbs::core {
namespace {

struct Quota {
  const char* limit_name;  // as ibv_query_device(3) names it
  const char* object;
  std::atomic<uint32_t> limit;
  std::atomic<uint32_t> in_use{0};
};

Quota g_quota[] = {
    {"max_pd", "PDs", DeviceLimits::kMaxPd},
    {"max_cq", "CQs", DeviceLimits::kMaxCq},
    {"max_ah", "AHs", DeviceLimits::kMaxAh},
};

Quota& Of(int kind) { return g_quota[kind]; }

}  // namespace

Result<QuotaHold> QuotaHold::Take(QuotaKind kind) {
  Quota& q = Of(static_cast<int>(kind));
  const uint32_t limit = q.limit.load(std::memory_order_relaxed);
  // Reserve first, give back on failure: two threads never both take the last unit.
  if (q.in_use.fetch_add(1, std::memory_order_relaxed) >= limit) {
    q.in_use.fetch_sub(1, std::memory_order_relaxed);
    return Status(ENOMEM, std::string("the device limit ") + q.limit_name + " " + std::to_string(limit) +
                              " is reached: this process already holds " + std::to_string(limit) + " " +
                              q.object + " of softverbs0 (ibv_query_device(3))");
  }
  return QuotaHold(kind);
}

QuotaHold::~QuotaHold() {
  if (kind_ >= 0) Of(kind_).in_use.fetch_sub(1, std::memory_order_relaxed);
}

QuotaHold& QuotaHold::operator=(QuotaHold&& other) noexcept {
  if (this != &other) {
    if (kind_ >= 0) Of(kind_).in_use.fetch_sub(1, std::memory_order_relaxed);
    kind_ = other.kind_;
    other.kind_ = -1;
  }
  return *this;
}

uint32_t QuotaInUse(QuotaKind kind) { return Of(static_cast<int>(kind)).in_use.load(std::memory_order_relaxed); }

uint32_t SetQuotaLimitForTesting(QuotaKind kind, uint32_t limit) {
  return Of(static_cast<int>(kind)).limit.exchange(limit, std::memory_order_relaxed);
}

}  // namespace softverbs::core
