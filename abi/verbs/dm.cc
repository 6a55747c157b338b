// Device memory (ibv_alloc_dm(3), ibv_reg_dm_mr, ibv_import_dm(3)): core/dm.h is the memory;
// here the ibv_dm handles, their copy functions and the checks the kernel and mlx5 make.
#include <new>

#include "abi/common/errno_convention.h"
#include "abi/verbs/objects.h"
#include "abi/verbs/ops.h"
#include "base/log.h"

using namespace softverbs;
using namespace softverbs::abi;

namespace softverbs::abi {

std::string Name(const ibv_dm* dm) { return ObjectName("dm", dm->handle); }

namespace {

// ibv_memcpy_to_dm / ibv_memcpy_from_dm (verbs.h calls them through the ibv_dm): 0 or an errno.
int CopyToDm(ibv_dm* dm, uint64_t offset, const void* host, size_t length) {
  Status s = ToSv(dm)->core->CopyTo(offset, host, length);
  return s.ok() ? 0 : ReturnErrno("ibv_memcpy_to_dm", Name(dm), s);
}

int CopyFromDm(void* host, ibv_dm* dm, uint64_t offset, size_t length) {
  Status s = ToSv(dm)->core->CopyFrom(host, offset, length);
  return s.ok() ? 0 : ReturnErrno("ibv_memcpy_from_dm", Name(dm), s);
}

ibv_dm* NewHandle(ibv_context* context, std::shared_ptr<core::DeviceMemory> memory, bool imported) {
  auto* dm = new (std::nothrow) SvDm{};
  if (dm == nullptr) return nullptr;
  dm->core = std::move(memory);
  dm->imported = imported;
  dm->dm.context = context;
  dm->dm.memcpy_to_dm = CopyToDm;
  dm->dm.memcpy_from_dm = CopyFromDm;
  dm->dm.handle = dm->core->handle();
  return &dm->dm;
}

}  // namespace

ibv_dm* AllocDm(ibv_context* context, ibv_alloc_dm_attr* attr) {
  const char* verb = "ibv_alloc_dm";
  if (attr->comp_mask != 0) return ReturnNull<ibv_dm>(verb, context->device->name, Invalid("comp_mask must be 0"));
  auto memory = core::DeviceMemory::Allocate(*ToSv(context)->core, attr->length, attr->log_align_req);
  if (!memory.ok()) return ReturnNull<ibv_dm>(verb, context->device->name, memory.status());
  ibv_dm* dm = NewHandle(context, *memory, false);
  if (dm == nullptr) return ReturnNull<ibv_dm>(verb, context->device->name, NoMemory("out of memory"));
  SvContext* ctx = ToSv(context);
  std::lock_guard lock(ctx->dm_mu);
  ctx->dms[dm->handle] = *memory;
  return dm;
}

int FreeDm(ibv_dm* dm) {
  SvDm* d = ToSv(dm);
  // The kernel's ib_uverbs free of a DM fails while MRs use it (its usecnt).
  if (int n = d->core->users().count(); n > 0)
    return ReturnErrno("ibv_free_dm", Name(dm), Busy(std::to_string(n) + " MR(s) still use this device memory"));
  SvContext* ctx = ToSv(dm->context);
  {
    std::lock_guard lock(ctx->dm_mu);
    ctx->dms.erase(dm->handle);
  }
  delete d;
  return 0;
}

ibv_mr* RegDmMr(ibv_pd* pd, ibv_dm* dm, uint64_t dm_offset, size_t length, unsigned int access) {
  const char* verb = "ibv_reg_dm_mr";
  if (dm->context != pd->context) return ReturnNull<ibv_mr>(verb, Name(pd), Invalid("dm and pd belong to other contexts"));
  // The kernel's reg_dm_mr: "the memory region must be zero based"; mlx5 allows only these.
  if (!(access & IBV_ACCESS_ZERO_BASED))
    return ReturnNull<ibv_mr>(verb, Name(pd), Invalid("an MR of device memory needs IBV_ACCESS_ZERO_BASED"));
  constexpr unsigned int kAllowed = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                    IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_ZERO_BASED | IBV_ACCESS_OPTIONAL_RANGE;
  if (access & ~kAllowed)
    return ReturnNull<ibv_mr>(verb, Name(pd), Invalid("access bits other than LOCAL_WRITE, REMOTE_WRITE/READ/ATOMIC "
                                                      "and ZERO_BASED on device memory (mlx5)"));
  SvDm* d = ToSv(dm);
  if (Status s = d->core->CheckRange(dm_offset, length); !s.ok()) return ReturnNull<ibv_mr>(verb, Name(pd), s);
  core::MrLayout layout{reinterpret_cast<uint64_t>(d->core->base()) + dm_offset, length, 0, access, true};
  auto mr = core::Mr::Register(*ToSv(pd)->core, layout);
  if (!mr.ok()) return ReturnNull<ibv_mr>(verb, Name(pd), mr.status());
  auto* m = new (std::nothrow) SvMr{};
  if (m == nullptr) return ReturnNull<ibv_mr>(verb, Name(pd), NoMemory("out of memory"));
  m->core = std::move(mr.value());
  m->dm = d->core;
  m->dm->users().Acquire();
  m->mr.context = pd->context;
  m->mr.pd = pd;
  m->mr.addr = nullptr;  // zero-based: addresses are offsets from the MR's first byte
  m->mr.length = length;
  m->mr.handle = m->core->lkey();
  m->mr.lkey = m->core->lkey();
  m->mr.rkey = m->core->rkey();
  return &m->mr;
}

}  // namespace softverbs::abi

// ibv_import_dm(3): a handle of device memory listed in the context's object space (its cmd_fd):
// allocated on this context, or on another context sharing the space through ibv_import_device
// -- in this process or in the one that passed the cmd_fd (core/dm.h, Import).
SV_EXPORT ibv_dm* ibv_import_dm(ibv_context* context, uint32_t dm_handle) {
  SvContext* ctx = ToSv(context);
  std::shared_ptr<core::DeviceMemory> memory;
  {
    std::lock_guard lock(ctx->dm_mu);
    auto it = ctx->dms.find(dm_handle);
    if (it != ctx->dms.end()) memory = it->second.lock();
  }
  if (memory == nullptr) {
    auto imported = core::DeviceMemory::Import(*ctx->core, dm_handle);
    if (!imported.ok()) return ReturnNull<ibv_dm>("ibv_import_dm", ObjectName("dm", dm_handle), imported.status());
    memory = std::move(imported.value());
  }
  ibv_dm* dm = NewHandle(context, std::move(memory), true);
  if (dm == nullptr) return ReturnNull<ibv_dm>("ibv_import_dm", context->device->name, NoMemory("out of memory"));
  return dm;
}

// ibv_unimport_dm(3): forgets the handle; the memory stays with its other handles.
SV_EXPORT void ibv_unimport_dm(ibv_dm* dm) { delete ToSv(dm); }
