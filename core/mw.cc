#include "core/mw.h"

#include "core/context.h"

namespace softverbs::core {

Result<std::unique_ptr<Mw>> Mw::Allocate(Pd& pd, uint32_t type) {
  // IBV_MW_TYPE_1 and IBV_MW_TYPE_2 (which softverbs0 implements as type 2B: IBA 10.6.7.2.2).
  if (type != 1 && type != 2) return Invalid("type " + std::to_string(type) + " is not IBV_MW_TYPE_1 or IBV_MW_TYPE_2");
  auto key = transport::WindowKey::Create(pd.context().local(), pd.host_id(), static_cast<transport::WindowType>(type));
  if (!key.ok()) return key.status();
  pd.users().Acquire();
  return std::unique_ptr<Mw>(new Mw(pd, std::move(key.value())));
}

Mw::~Mw() {
  key_.reset();  // unbound and freed (a bind still queued for it fails with IBV_WC_MW_BIND_ERR)
  pd_->users().Release();
}

}  // namespace softverbs::core
