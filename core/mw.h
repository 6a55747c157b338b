// Memory windows (ibv_alloc_mw(3), ibv_dealloc_mw(3)). Binding and invalidation are work
// requests (ibv_bind_mw(3), IBV_WR_BIND_MW / LOCAL_INV / SEND_WITH_INV): their rules and the
// data path are transport/window_key.h; here is the object a PD owns.
#pragma once

#include <cstdint>
#include <memory>

#include "base/status.h"
#include "core/pd.h"
#include "transport/window_key.h"

namespace softverbs::core {

class Mw {
 public:
  // A window of `pd`, not bound (ibv_alloc_mw(3)); `type` is enum ibv_mw_type (1 or 2).
  static Result<std::unique_ptr<Mw>> Allocate(Pd& pd, uint32_t type);
  // Unbinds it if bound (waiting for the accesses in flight) and frees its key.
  ~Mw();

  Pd& pd() const { return *pd_; }
  uint32_t type() const { return static_cast<uint32_t>(key_->type()); }
  // The R_Key at allocation; it names the window in bind requests (transport::BindRequest).
  uint32_t handle() const { return key_->handle(); }

 private:
  Mw(Pd& pd, std::shared_ptr<transport::WindowKey> key) : pd_(&pd), key_(std::move(key)) {}
  Pd* pd_;
  std::shared_ptr<transport::WindowKey> key_;
};

}  // namespace softverbs::core
