#include "core/mr.h"

#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/log.h"
#include "base/memory_map.h"
#include "base/strings.h"
#include "core/context.h"
#include "core/device_limits.h"
#include "transport/host/registration_backing.h"
#include "transport/imported_key.h"
#include "transport/key_table.h"
#include "transport/null_key.h"
#include "transport/window_key.h"
#include "fabric/host/process_token.h"

namespace softverbs::core {

using transport::KeyView;
using transport::PublishKey;
using transport::WithdrawKey;
Status CheckMrAccess(uint32_t access) {
  constexpr uint32_t kKnown = access::kLocalWrite | access::kRemoteWrite | access::kRemoteRead |
                              access::kRemoteAtomic | access::kMwBind | access::kZeroBased |
                              access::kOnDemand | access::kHugetlb | access::kOptionalRange;
  if (access & ~kKnown) return Invalid("access has unknown bits " + Hex(access & ~kKnown));
  // ibv_reg_mr(3): "If IBV_ACCESS_REMOTE_WRITE or IBV_ACCESS_REMOTE_ATOMIC is set, then
  // IBV_ACCESS_LOCAL_WRITE must be set too."
  if ((access & (access::kRemoteWrite | access::kRemoteAtomic)) && !(access & access::kLocalWrite))
    return Invalid("IBV_ACCESS_REMOTE_WRITE/REMOTE_ATOMIC need IBV_ACCESS_LOCAL_WRITE (ibv_reg_mr(3))");
  // HUGETLB and the optional range (RELAXED_ORDERING, ...) are hints that change no semantics.
  return Status::Ok();
}

bool IsImplicit(const MrLayout& layout) { return layout.addr == 0 && layout.length == UINT64_MAX; }

Status Mr::CheckLayout(const MrLayout& layout) {
  if (layout.device_memory) {
    // Device memory is the device's own, zero-based (the kernel's reg_dm_mr): no page
    // translation to keep and nothing of the process to check.
    SV_RETURN_IF_ERROR(CheckMrAccess(layout.access));
    return layout.length == 0 ? Invalid("length is 0") : Status::Ok();
  }
  // The device translates the iova page by page (ib_umem): the kernel's ib_uverbs_reg_mr refuses
  // an iova whose offset in its page differs from the address's, before anything else (EINVAL).
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  if ((layout.addr & (page - 1)) != (layout.iova & (page - 1)))
    return Invalid("iova " + Hex(layout.iova) + " is at offset " + Hex(layout.iova & (page - 1)) +
                   " of its page but addr " + Hex(layout.addr) + " at " + Hex(layout.addr & (page - 1)) +
                   ": the kernel's ib_uverbs_reg_mr needs the same page offset");
  SV_RETURN_IF_ERROR(CheckMrAccess(layout.access));
  if (layout.length == 0) return Invalid("length is 0");
  const bool on_demand = layout.access & access::kOnDemand;
  if (IsImplicit(layout)) {
    // Implicit ODP: the whole address space (mlx5's create_user_odp_mr: iova 0 only).
    if (!on_demand) return Invalid("length SIZE_MAX exceeds max_mr_size (implicit ODP needs IBV_ACCESS_ON_DEMAND)");
    if (layout.iova != 0) return Invalid("an implicit ODP MR (addr NULL, length SIZE_MAX) needs iova 0 (mlx5)");
    return Status::Ok();
  }
  if (layout.length > DeviceLimits::kMaxMrSize)
    return Invalid("length " + std::to_string(layout.length) + " exceeds max_mr_size");
  if (layout.addr + layout.length < layout.addr) return Invalid("addr + length wraps around");
  // ODP pins nothing at registration (ib_umem_odp_get faults no page): each access finds its
  // pages then (transport/key_table.h, OnDemandPresent), so memory mapped later is reachable.
  if (on_demand) return Status::Ok();
  // The whole range must be mapped -- and writable if anyone may write through the MR -- as
  // pinning it for the device requires on hardware (EFAULT otherwise).
  const bool needs_write = layout.access & (access::kLocalWrite | access::kRemoteWrite | access::kRemoteAtomic);
  // Appended piece by piece: GCC 12's -Wrestrict misfires on `"[" + std::string&&` inlined here
  // (GCC PR 105329), and the text is only needed on a refusal.
  auto range = [&layout] {
    std::string r("[");
    r += Hex(layout.addr);
    r += ", +";
    r += std::to_string(layout.length);
    r += ")";
    return r;
  };
  if (needs_write) {
    MappedAs m = InspectRange(layout.addr, layout.length);
    if (m == MappedAs::kUnmapped) return Status(EFAULT, range() + " is not mapped memory of this process");
    if (m == MappedAs::kReadOnly)
      return Status(EFAULT, range() + " is not writable, but the access flags let the device write it");
  } else {
    // msync(MS_ASYNC) has no effect on Linux but fails with ENOMEM on an unmapped range.
    uint64_t start = layout.addr & ~(page - 1);
    if (msync(reinterpret_cast<void*>(start), layout.addr + layout.length - start, MS_ASYNC) != 0)
      return Status(EFAULT, range() + " is not mapped memory of this process");
  }
  return Status::Ok();
}

Result<ImportedMr> ImportMr(Pd& pd, uint32_t handle) {
  Context& ctx = pd.context();
  transport::KeyView k;
  if (!ctx.object_space().HasMr(handle) || !transport::KeyPin::Peek(ctx.registry(), handle, &k) || k.key != handle ||
      k.window() || k.indirect())
    return Status(ENOENT, "the context's object space (its cmd_fd) has no MR with handle " + Hex(handle));
  transport::NoteImportedKey(k.key);
  return ImportedMr{k.key, k.null_key() ? 0u : k.key, k.null_key() ? 0 : k.iova,
                    k.null_key() ? UINT64_MAX : k.length};
}

void UnimportMr(uint32_t lkey) { transport::ForgetImportedKey(lkey); }

Result<std::unique_ptr<Mr>> Mr::Register(Pd& pd, const MrLayout& layout) {
  SV_RETURN_IF_ERROR(CheckLayout(layout));
  auto key = transport::AllocateKey(pd.context().registry());
  if (!key.ok()) return key.status();
  pd.users().Acquire();
  std::unique_ptr<Mr> mr(new Mr(pd, layout, key->slot, key->key, BackingOf(pd.context().registry(), layout)));
  mr->Publish();
  pd.context().object_space().AddMr(mr->key_);
  return mr;
}

Result<std::unique_ptr<Mr>> Mr::AllocateNull(Pd& pd) {
  auto region = transport::NullRegion();
  if (!region.ok()) return region.status();
  auto key = transport::AllocateKey(pd.context().registry());
  if (!key.ok()) return key.status();
  pd.users().Acquire();
  MrLayout layout;
  layout.addr = layout.iova = *region;
  layout.length = 2 * transport::kNullChunk;
  layout.access = access::kLocalWrite;  // an lkey that SGEs of receives and READs may name too
  layout.null_mr = true;
  std::unique_ptr<Mr> mr(new Mr(pd, layout, key->slot, key->key, std::nullopt));
  mr->Publish();
  pd.context().object_space().AddMr(mr->key_);
  return mr;
}

std::optional<fabric::SharedBacking> Mr::BackingOf(fabric::HostRegistry& registry, const MrLayout& layout) {
  // An ODP MR (implicit ones too) follows the owner's address space as it is at each access,
  // never a file mapped through it at registration (which would outlive an munmap) -- and its
  // pages are never moved into one (private_share.h): the process_vm path, as before.
  if (layout.access & access::kOnDemand) return std::nullopt;
  // Device memory is the device's own memfd (core/dm.h): reached through it, nothing to move.
  if (layout.device_memory) return fabric::FindSharedBacking(layout.addr, layout.length);
  // A shared file's pages, else private anonymous pages moved into a memfd (issue 16), else none.
  return transport::RegistrationBacking(registry, layout.addr, layout.length);
}

void Mr::Publish() {
  // A shared backing's record first: an initiator that pins the key finds it complete.
  if (backing_) fabric::PublishBacking(pd_->context().registry(), slot_, key_, *backing_);
  // The optional access bits are hints (core/types.h) that the data path never reads; the key
  // table keeps the rest, and the bits above them mark special keys (transport/key_table.h).
  const uint32_t published = (layout_.access & ~access::kOptionalRange) | (backing_ ? transport::kSharedBacking : 0) |
                             (layout_.null_mr ? transport::kNullKey : 0);
  PublishKey(pd_->context().registry(), slot_,
             KeyView{key_, published, pd_->host_id(), layout_.addr, layout_.length, layout_.iova,
                     pd_->context().local().slot()});
}

// After a withdrawal: this process's own writes through the key (core/cq.cc's landed messages)
// finish before the memory is given back to the application.
void Mr::WaitForOwnWrites() {
  // A read-modify-write, not a load: it reads the latest count in the counter's modification
  // order and synchronises with the poll that incremented it (see Cq::ScatterLanding).
  while (pd_->context().local().own_writes().fetch_add(0, std::memory_order_acq_rel) != 0) sched_yield();
}

Status Mr::Withdraw() {
  if (withdrawn_) return Status::Ok();
  if (!transport::WithdrawUnlessWindowsBound(pd_->context().registry(), slot_, key_))
    return Status(EBUSY, "a memory window is still bound to the MR (ibv_alloc_mw(3): ibv_dereg_mr() fails if any "
                         "memory window is still bound to this MR)");
  WaitForOwnWrites();
  withdrawn_ = true;
  return Status::Ok();
}

Mr::~Mr() {
  pd_->context().object_space().RemoveMr(key_);
  fabric::HostRegistry& registry = pd_->context().registry();
  if (!withdrawn_) {
    WithdrawKey(registry, slot_);
    WaitForOwnWrites();
  }
  fabric::ClearBacking(registry, slot_);
  registry.keys().Free(slot_, fabric::ProcessToken::Self());
  pd_->users().Release();
  // A move of private pages (issue 16) this key kept from moving back (an ODP MR, one on the
  // process_vm path over moved pages) may move back now; with a backing, its release does it.
  if (!backing_) transport::RetryMovesBack();
}

Status Mr::Reregister(uint32_t flags, Pd* new_pd, const MrLayout& layout) {
  if (flags == 0 || (flags & ~rereg::kAll)) return Invalid("flags must be a non-empty set of IBV_REREG_MR_*");
  if (layout_.device_memory) return Invalid("an MR of device memory is not re-registered (ibv_reg_dm_mr has no rereg)");
  if (layout_.null_mr) return Invalid("a null MR has no memory to re-register (ibv_alloc_null_mr(3))");
  if ((flags & rereg::kChangePd) && new_pd == nullptr) return Invalid("IBV_REREG_MR_CHANGE_PD with a NULL pd");
  if ((flags & rereg::kChangePd) && &new_pd->context() != &pd_->context())
    return Invalid("IBV_REREG_MR_CHANGE_PD with a PD of another context");
  if (!(flags & rereg::kChangeAccess) && layout.access != 0)
    return Invalid("access is set but IBV_REREG_MR_CHANGE_ACCESS is not");
  MrLayout next = layout_;
  if (flags & rereg::kChangeTranslation) {
    next.addr = layout.addr;
    next.length = layout.length;
    next.iova = layout.addr;
  }
  if (flags & rereg::kChangeAccess) next.access = layout.access;
  SV_RETURN_IF_ERROR(CheckLayout(next));
  // Initialised once (no assignment over a copy): GCC 12 at -O2 otherwise warns that the copy's
  // shared_ptr "may be used uninitialized" (-Wmaybe-uninitialized, a false positive: issue 15).
  std::optional<fabric::SharedBacking> backing =
      (flags & (rereg::kChangeTranslation | rereg::kChangeAccess)) ? BackingOf(pd_->context().registry(), next)
                                                                   : backing_;
  // Accesses through the old registration finish before the new one is visible. Windows bound
  // to the MR name its old translation: while one is bound the MR stays as it is.
  if (!transport::WithdrawUnlessWindowsBound(pd_->context().registry(), slot_, key_))
    return Status(EBUSY, "a memory window is still bound to the MR: unbind or invalidate it first");
  WaitForOwnWrites();
  if (flags & rereg::kChangePd) {
    new_pd->users().Acquire();
    pd_->users().Release();
    pd_ = new_pd;
  }
  layout_ = next;  // the keys stay (ibv_rereg_mr(3): "the lkey and rkey are not changed")
  fabric::ClearBacking(pd_->context().registry(), slot_);
  const bool had_backing = backing_.has_value();
  backing_ = std::move(backing);
  Publish();
  if (!had_backing) transport::RetryMovesBack();  // as at deregistration: the old range is free
  return Status::Ok();
}

namespace {

// One range of ibv_advise_mr: the key's checks, then the pages made present.
Status AdviseOne(Pd& pd, Advice advice, bool flush, const AdviseRange& r) {
  transport::KeyView k;
  Context& ctx = pd.context();
  const std::string key = "lkey " + Hex(r.lkey);
  if (!transport::KeyPin::Peek(ctx.registry(), r.lkey, &k) || k.indirect() || k.window() ||
      k.owner_process_slot() != ctx.local().slot() || k.pd != pd.host_id())
    return Invalid(key + " is not an MR of this PD");
  if (!k.on_demand()) return Invalid(key + " is not an ODP MR (ibv_advise_mr(3): the lkeys must be ODP MRs)");
  if (advice == Advice::kPrefetchWrite && !(k.access & access::kLocalWrite))
    return Invalid(key + " is not writable, PREFETCH_WRITE needs IBV_ACCESS_LOCAL_WRITE");
  if (!transport::KeyCovers(k, r.addr, r.length)) {
    if (!flush) {
      SV_LOG(kInfo, "ibv_advise_mr: [%s, +%u) is outside %s: prefetch dropped (no FLUSH)", Hex(r.addr).c_str(),
             r.length, key.c_str());
      return Status::Ok();
    }
    return Status(EFAULT, "[" + Hex(r.addr) + ", +" + std::to_string(r.length) + ") is outside the MR of " + key);
  }
  if (advice == Advice::kPrefetchNoFault || r.length == 0) return Status::Ok();  // present pages only: nothing to do
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t host = k.addr + (r.addr - k.iova);
  const uint64_t start = host & ~(page - 1);
  const int how = advice == Advice::kPrefetchWrite ? MADV_POPULATE_WRITE : MADV_POPULATE_READ;
  if (madvise(reinterpret_cast<void*>(start), host + r.length - start, how) != 0 && flush)
    return Status(EFAULT, "[" + Hex(r.addr) + ", +" + std::to_string(r.length) + ") of " + key + " is not " +
                              (how == MADV_POPULATE_WRITE ? "writable" : "mapped") + " memory of this process");
  return Status::Ok();
}

}  // namespace

Status AdviseMr(Pd& pd, uint32_t advice, uint32_t flags, const AdviseRange* ranges, uint32_t n) {
  if (advice > static_cast<uint32_t>(Advice::kPrefetchNoFault))
    return NotSupported("advice " + std::to_string(advice) + " (PREFETCH, PREFETCH_WRITE, PREFETCH_NO_FAULT only)");
  if (flags & ~kAdviseFlush) return Invalid("flags has unknown bits " + Hex(flags & ~kAdviseFlush));
  if (n == 0) return Invalid("num_sge is 0");
  for (uint32_t i = 0; i < n; ++i)
    SV_RETURN_IF_ERROR(AdviseOne(pd, static_cast<Advice>(advice), flags & kAdviseFlush, ranges[i]));
  return Status::Ok();
}

}  // namespace softverbs::core
