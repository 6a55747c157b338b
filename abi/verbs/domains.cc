// Thread domains (ibv_alloc_td(3)) and parent domains (ibv_alloc_parent_domain(3)): the rules
// mlx5 applies (mlx5_alloc_td, mlx5_alloc_parent_domain, mlx5_free_pd): a TD is held by the
// parent domains that name it, a parent domain holds its PD and is held by the QPs, CQs and SRQs
// created on it; deallocating what is held is EBUSY. Everything else a parent domain is asked
// for goes to its PD (SvPd::core).
#include <unistd.h>

#include <new>

#include "abi/common/errno_convention.h"
#include "abi/verbs/objects.h"
#include "abi/verbs/ops.h"
#include "base/log.h"

namespace softverbs::abi {

ibv_td* AllocTd(ibv_context* context, ibv_td_init_attr* init_attr) {
  // mlx5_alloc_td: comp_mask has no defined bit.
  if (init_attr != nullptr && init_attr->comp_mask != 0)
    return ReturnNull<ibv_td>("ibv_alloc_td", context->device->name, Invalid("init_attr->comp_mask must be 0"));
  auto* td = new (std::nothrow) SvTd{};
  if (td == nullptr) return ReturnNull<ibv_td>("ibv_alloc_td", context->device->name, NoMemory("out of memory"));
  td->td.context = context;
  return &td->td;
}

int DeallocTd(ibv_td* td) {
  SvTd* t = ToSv(td);
  // ibv_alloc_td(3): "all resources created with the td should be destroyed prior to
  // deallocating the td"; mlx5_dealloc_td refuses while a parent domain holds it.
  if (int n = t->users.count(); n > 0)
    return ReturnErrno("ibv_dealloc_td", ObjectName("td", reinterpret_cast<uintptr_t>(td)),
                       Busy(std::to_string(n) + " parent domain(s) still use this thread domain"));
  delete t;
  return 0;
}

ibv_pd* AllocParentDomain(ibv_context* context, ibv_parent_domain_init_attr* attr) {
  const char* verb = "ibv_alloc_parent_domain";
  const std::string object = context->device->name;
  constexpr uint32_t kKnown = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
  if (attr->comp_mask & ~kKnown) return ReturnNull<ibv_pd>(verb, object, Invalid("comp_mask has unknown bits"));
  // ibv_alloc_parent_domain(3): "pd: reference to a protection domain, can't be NULL".
  if (attr->pd == nullptr) return ReturnNull<ibv_pd>(verb, object, Invalid("attr->pd is NULL"));
  if (attr->pd->context != context || (attr->td != nullptr && attr->td->context != context))
    return ReturnNull<ibv_pd>(verb, object, Invalid("pd and td must belong to this context"));
  if (ToSv(attr->pd)->parent)
    return ReturnNull<ibv_pd>(verb, object, Invalid("attr->pd is a parent domain: a parent domain extends a PD"));
  auto* pd = new (std::nothrow) SvPd{};
  auto* parent = new (std::nothrow) ParentDomain{};
  if (pd == nullptr || parent == nullptr) {
    delete pd;
    delete parent;
    return ReturnNull<ibv_pd>(verb, object, NoMemory("out of memory"));
  }
  pd->parent.reset(parent);
  pd->core = ToSv(attr->pd)->core;
  pd->pd.context = context;
  pd->pd.handle = attr->pd->handle;
  parent->pd = ToSv(attr->pd);
  parent->td = attr->td != nullptr ? ToSv(attr->td) : nullptr;
  if (attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS) {
    parent->alloc = attr->alloc;
    parent->free = attr->free;
  }
  if (attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT) parent->pd_context = attr->pd_context;
  pd->core->users().Acquire();  // ibv_dealloc_pd(pd) is EBUSY while the parent domain lives
  if (parent->td != nullptr) parent->td->users.Acquire();
  return &pd->pd;
}

int DeallocParentDomain(ibv_pd* pd) {
  SvPd* p = ToSv(pd);
  // ibv_alloc_parent_domain(3): "all resources created with the parent domain should be destroyed
  // prior to deallocating the parent domain"; mlx5_free_pd refuses (EBUSY) while any remains.
  if (int n = p->parent->users.count(); n > 0)
    return ReturnErrno("ibv_dealloc_pd", Name(pd),
                       Busy(std::to_string(n) + " QP(s)/CQ(s)/SRQ(s) created on this parent domain still exist"));
  if (p->parent->td != nullptr) p->parent->td->users.Release();
  p->core->users().Release();
  delete p;
  return 0;
}

Status UseParentDomain(const char* verb, ibv_pd* pd, size_t bytes, size_t alignment, uint64_t resource_type,
                       SvPd** held) {
  *held = nullptr;
  if (pd == nullptr || !ToSv(pd)->parent) return Status::Ok();
  ParentDomain& parent = *ToSv(pd)->parent;
  // mlx5 asks the allocator only when both callbacks are set.
  if (parent.alloc != nullptr && parent.free != nullptr) {
    void* buffer = parent.alloc(pd, parent.pd_context, bytes, alignment, resource_type);
    if (buffer == nullptr)
      return NoMemory("the parent domain's alloc callback returned NULL for " + std::to_string(bytes) + " bytes");
    if (buffer != IBV_ALLOCATOR_USE_DEFAULT) {
      // softverbs's rings are written by initiators of other processes through their mapping of
      // this process's shared arena (fabric/host/shared_arena.h); a buffer of the application's
      // private memory cannot be reached by them. Given back at once.
      parent.free(pd, parent.pd_context, buffer, resource_type);
      return NotSupported("the parent domain's alloc callback returned its own buffer: softverbs places rings "
                          "only in host-shared memory (return IBV_ALLOCATOR_USE_DEFAULT)");
    }
    SV_LOG(kDebug, "%s(%s): parent domain allocator chose the default for %zu bytes (type 0x%llx)", verb,
           Name(pd).c_str(), bytes, static_cast<unsigned long long>(resource_type));
  }
  parent.users.Acquire();
  *held = ToSv(pd);
  return Status::Ok();
}

void ReleaseParentDomain(SvPd* held) {
  if (held != nullptr) held->parent->users.Release();
}

}  // namespace softverbs::abi
