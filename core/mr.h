// Memory regions and their keys. lkey == rkey, unique across the host: the key is the index of
// the region's entry in the host key table plus an 8-bit generation, so a stale key of a freed
// region does not match a new one (IBA 10.6.3.1: the key "variant" portion).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "base/status.h"
#include "core/pd.h"
#include "fabric/host/shared_backing.h"

namespace softverbs::core {

struct MrLayout {
  uint64_t addr = 0;    // process virtual address of the first byte
  uint64_t length = 0;
  uint64_t iova = 0;    // the address remote peers use (== addr unless ibv_reg_mr_iova2)
  uint32_t access = 0;  // core::access bits
};

// ibv_rereg_mr flags (enum ibv_rereg_mr_flags).
namespace rereg {
inline constexpr uint32_t kChangeTranslation = 1u << 0;
inline constexpr uint32_t kChangePd = 1u << 1;
inline constexpr uint32_t kChangeAccess = 1u << 2;
inline constexpr uint32_t kAll = (1u << 3) - 1;
}  // namespace rereg

// Checks access flags as ibv_reg_mr(3) states them.
Status CheckMrAccess(uint32_t access);

class Mr {
 public:
  static Result<std::unique_ptr<Mr>> Register(Pd& pd, const MrLayout& layout);
  ~Mr();

  // ibv_rereg_mr: changes translation, PD and/or access and keeps the keys.
  Status Reregister(uint32_t flags, Pd* new_pd, const MrLayout& layout);

  // ibv_dereg_mr's first step: withdraws the key (waiting for accesses in flight); EBUSY, and
  // nothing changes, while a memory window is bound to the MR. Destruction follows.
  Status Withdraw();

  Pd& pd() const { return *pd_; }
  const MrLayout& layout() const { return layout_; }
  uint32_t lkey() const { return key_; }
  uint32_t rkey() const { return key_; }

 private:
  Mr(Pd& pd, const MrLayout& layout, uint32_t slot, uint32_t key, std::optional<fabric::SharedBacking> backing)
      : pd_(&pd), layout_(layout), slot_(slot), key_(key), backing_(std::move(backing)) {}
  static Status CheckLayout(const MrLayout& layout);
  // Makes the registration visible to initiators through the host key table.
  void Publish();
  // Waits for this process's own writes through a withdrawn key (landed messages) to finish.
  void WaitForOwnWrites();

  Pd* pd_;
  MrLayout layout_;
  uint32_t slot_;
  uint32_t key_;
  bool withdrawn_ = false;
  // The memory is a shared mapping of a file peers may map too (fabric/host/shared_backing.h).
  std::optional<fabric::SharedBacking> backing_;
};

}  // namespace softverbs::core
