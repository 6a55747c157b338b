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
  bool device_memory = false;  // ibv_reg_dm_mr: `addr` is inside a DeviceMemory (core/dm.h)
  bool null_mr = false;  // ibv_alloc_null_mr: `addr` is this process's null region (transport/null_key.h)
};

// ibv_rereg_mr flags (enum ibv_rereg_mr_flags).
namespace rereg {
inline constexpr uint32_t kChangeTranslation = 1u << 0;
inline constexpr uint32_t kChangePd = 1u << 1;
inline constexpr uint32_t kChangeAccess = 1u << 2;
inline constexpr uint32_t kAll = (1u << 3) - 1;
}  // namespace rereg

// ibv_reg_mr(pd, NULL, SIZE_MAX, IBV_ACCESS_ON_DEMAND): an implicit ODP MR, whose keys reach
// every address the process has mapped (as mlx5's implicit ODP).
bool IsImplicit(const MrLayout& layout);

// Checks access flags as ibv_reg_mr(3) states them.
Status CheckMrAccess(uint32_t access);

// ibv_advise_mr(3): the advice values (enum ibv_advise_mr_advice) and IBV_ADVISE_MR_FLAG_FLUSH.
enum class Advice : uint32_t { kPrefetch = 0, kPrefetchWrite = 1, kPrefetchNoFault = 2 };
inline constexpr uint32_t kAdviseFlush = 1u << 0;
struct AdviseRange {
  uint64_t addr = 0;
  uint32_t length = 0;
  uint32_t lkey = 0;
};
// Prefetches ranges of ODP MRs of `pd` (this process's): makes their pages present
// (MADV_POPULATE_READ / _WRITE; NO_FAULT touches nothing). Checks as mlx5_ib_advise_mr does:
// unknown advice EOPNOTSUPP, unknown flags or no range EINVAL, an lkey that is not an ODP MR of
// the PD (or not writable for PREFETCH_WRITE) EINVAL; with FLUSH a range outside its MR or not
// mapped EFAULT (ibv_advise_mr(3)); without FLUSH that prefetch is dropped, as mlx5's deferred
// work drops it.
Status AdviseMr(Pd& pd, uint32_t advice, uint32_t flags, const AdviseRange* ranges, uint32_t n);

// ibv_import_mr(3): what the kernel's QUERY_MR returns of the MR `handle` (its lkey) of `pd`'s
// object space. ENOENT for a handle the space does not list (or whose MR is deregistered).
struct ImportedMr {
  uint32_t lkey = 0;
  uint32_t rkey = 0;
  uint64_t iova = 0;  // what ibv_mr.addr reads in the importer, as rdma-core fills it
  uint64_t length = 0;
};
Result<ImportedMr> ImportMr(Pd& pd, uint32_t handle);
// ibv_unimport_mr(3) (or ibv_dereg_mr of an imported MR): this process no longer holds `lkey`.
void UnimportMr(uint32_t lkey);

class Mr {
 public:
  static Result<std::unique_ptr<Mr>> Register(Pd& pd, const MrLayout& layout);
  // ibv_alloc_null_mr(3): an MR of `pd` whose lkey reads zeros and discards writes, for any
  // address and length, and which has no rkey (remote accesses through its key are refused).
  static Result<std::unique_ptr<Mr>> AllocateNull(Pd& pd);
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
  static std::optional<fabric::SharedBacking> BackingOf(fabric::HostRegistry& registry, const MrLayout& layout);
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
