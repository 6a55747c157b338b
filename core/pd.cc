#include "core/pd.h"

#include <atomic>
#include <string>

#include "core/context.h"

namespace softverbs::core {

Result<std::unique_ptr<Pd>> Pd::Create(Context& context) {
  auto quota = QuotaHold::Take(QuotaKind::kPd);
  if (!quota.ok()) return quota.status();
  auto pd = std::make_unique<Pd>(context, context.NewHandle());
  pd->quota_ = std::move(quota.value());
  SV_RETURN_IF_ERROR(context.object_space().AddPd({pd->handle_, pd->host_id_}));
  pd->listed_ = true;
  return pd;
}

Result<std::unique_ptr<Pd>> Pd::Import(Context& context, uint32_t handle) {
  std::optional<PdRecord> r = context.object_space().FindPd(handle);
  if (!r) return Status(ENOENT, "the context's object space (its cmd_fd) has no PD with handle " + std::to_string(handle));
  return std::unique_ptr<Pd>(new Pd(context, handle, r->host_id));
}

// The PD leaves the object space with its allocation; an imported handle leaves it listed
// (ibv_unimport_pd(3) frees only the importer's handle).
Pd::~Pd() {
  if (listed_) context_.object_space().RemovePd(handle_);
}

bool Pd::foreign() const { return static_cast<uint32_t>(host_id_ >> 32) != context_.local().slot(); }

Pd::Pd(Context& context, uint32_t handle) : context_(context), handle_(handle) {
  static std::atomic<uint32_t> next{1};
  host_id_ = static_cast<uint64_t>(context.local().slot()) << 32 | next.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace softverbs::core
