#include "core/pd.h"

#include <atomic>

#include "core/context.h"

namespace softverbs::core {

Result<std::unique_ptr<Pd>> Pd::Create(Context& context) {
  auto quota = QuotaHold::Take(QuotaKind::kPd);
  if (!quota.ok()) return quota.status();
  auto pd = std::make_unique<Pd>(context, context.NewHandle());
  pd->quota_ = std::move(quota.value());
  return pd;
}

Pd::Pd(Context& context, uint32_t handle) : context_(context), handle_(handle) {
  static std::atomic<uint32_t> next{1};
  host_id_ = static_cast<uint64_t>(context.local().slot()) << 32 | next.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace softverbs::core
