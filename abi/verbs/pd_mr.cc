// Protection domains and memory regions.
#include <new>
#include <vector>

#include "abi/common/errno_convention.h"
#include "abi/verbs/objects.h"
#include "abi/verbs/ops.h"
#include "base/log.h"

#undef ibv_reg_mr
#undef ibv_reg_mr_iova

using namespace softverbs;
using namespace softverbs::abi;

namespace softverbs::abi {

std::string Name(const ibv_pd* pd) { return ObjectName("pd", pd->handle); }
std::string Name(const ibv_mr* mr) { return ObjectName("mr lkey", mr->lkey); }

}  // namespace softverbs::abi

SV_EXPORT ibv_pd* ibv_alloc_pd(ibv_context* context) {
  auto core = core::Pd::Create(*ToSv(context)->core);
  if (!core.ok()) return ReturnNull<ibv_pd>("ibv_alloc_pd", context->device->name, core.status());
  auto* pd = new (std::nothrow) SvPd{};
  if (pd == nullptr) return ReturnNull<ibv_pd>("ibv_alloc_pd", "", NoMemory("out of memory"));
  pd->owned = std::move(core.value());
  pd->core = pd->owned.get();
  pd->pd.context = context;
  pd->pd.handle = pd->core->handle();
  return &pd->pd;
}
SV_DEFAULT_VERSION(ibv_alloc_pd);

SV_EXPORT int ibv_dealloc_pd(ibv_pd* pd) {
  SvPd* p = ToSv(pd);
  if (p->parent) return DeallocParentDomain(pd);
  // The kernel refuses to free a PD that objects (parent domains too) still use.
  if (int n = p->core->users().count(); n > 0)
    return ReturnErrno("ibv_dealloc_pd", Name(pd), Busy(std::to_string(n) + " object(s) still use this PD"));
  delete p;
  return 0;
}
SV_DEFAULT_VERSION(ibv_dealloc_pd);

static ibv_mr* RegMr(const char* verb, ibv_pd* pd, void* addr, size_t length, uint64_t iova, unsigned int access) {
  core::MrLayout layout{reinterpret_cast<uint64_t>(addr), length, iova, access};
  auto mr = core::Mr::Register(*ToSv(pd)->core, layout);
  if (!mr.ok()) return ReturnNull<ibv_mr>(verb, Name(pd), mr.status());
  auto* m = new (std::nothrow) SvMr{};
  if (m == nullptr) return ReturnNull<ibv_mr>(verb, Name(pd), NoMemory("out of memory"));
  m->core = std::move(mr.value());
  m->mr.context = pd->context;
  m->mr.pd = pd;
  m->mr.addr = addr;
  m->mr.length = length;
  m->mr.handle = m->core->lkey();
  m->mr.lkey = m->core->lkey();
  m->mr.rkey = m->core->rkey();
  SV_LOG(kDebug, "%s(%s): lkey/rkey 0x%x for [%p, +%zu)", verb, Name(pd).c_str(), m->mr.lkey, addr, length);
  return &m->mr;
}

SV_EXPORT ibv_mr* ibv_reg_mr(ibv_pd* pd, void* addr, size_t length, int access) {
  return RegMr("ibv_reg_mr", pd, addr, length, reinterpret_cast<uint64_t>(addr), static_cast<unsigned int>(access));
}
SV_DEFAULT_VERSION(ibv_reg_mr);

SV_EXPORT ibv_mr* ibv_reg_mr_iova(ibv_pd* pd, void* addr, size_t length, uint64_t iova, int access) {
  return RegMr("ibv_reg_mr_iova", pd, addr, length, iova, static_cast<unsigned int>(access));
}

SV_EXPORT ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t length, uint64_t iova, unsigned int access) {
  return RegMr("ibv_reg_mr_iova2", pd, addr, length, iova, access);
}

// ibv_advise_mr(3) (the verbs_context slot; verbs.h's inline returns what it returns, an errno).
int softverbs::abi::AdviseMr(ibv_pd* pd, ibv_advise_mr_advice advice, uint32_t flags, ibv_sge* sg_list,
                             uint32_t num_sge) {
  std::vector<core::AdviseRange> ranges(num_sge);
  for (uint32_t i = 0; i < num_sge; ++i) ranges[i] = {sg_list[i].addr, sg_list[i].length, sg_list[i].lkey};
  Status s = core::AdviseMr(*ToSv(pd)->core, static_cast<uint32_t>(advice), flags, ranges.data(), num_sge);
  return s.ok() ? 0 : ReturnErrno("ibv_advise_mr", Name(pd), s);
}

// ibv_alloc_null_mr(3) (the verbs_context slot): as mlx5_alloc_null_mr, addr NULL, length
// SIZE_MAX ("It has the maximum length") and rkey 0 ("only the lkey is valid"); ibv_dereg_mr
// frees it like any MR.
ibv_mr* softverbs::abi::AllocNullMr(ibv_pd* pd) {
  auto mr = core::Mr::AllocateNull(*ToSv(pd)->core);
  if (!mr.ok()) return ReturnNull<ibv_mr>("ibv_alloc_null_mr", Name(pd), mr.status());
  auto* m = new (std::nothrow) SvMr{};
  if (m == nullptr) return ReturnNull<ibv_mr>("ibv_alloc_null_mr", Name(pd), NoMemory("out of memory"));
  m->core = std::move(mr.value());
  m->mr.context = pd->context;
  m->mr.pd = pd;
  m->mr.addr = nullptr;
  m->mr.length = SIZE_MAX;
  m->mr.handle = m->core->lkey();
  m->mr.lkey = m->core->lkey();
  m->mr.rkey = 0;
  SV_LOG(kDebug, "ibv_alloc_null_mr(%s): lkey 0x%x", Name(pd).c_str(), m->mr.lkey);
  return &m->mr;
}

SV_EXPORT ibv_mr* ibv_reg_dmabuf_mr(ibv_pd* pd, uint64_t, size_t, uint64_t, int, int) {
  return ReturnNull<ibv_mr>("ibv_reg_dmabuf_mr", Name(pd), Unsupported("dma-buf memory registration"));
}

SV_EXPORT int ibv_rereg_mr(ibv_mr* mr, int flags, ibv_pd* pd, void* addr, size_t length, int access) {
  SvMr* m = ToSv(mr);
  if (m->core == nullptr) {
    ReturnErrno("ibv_rereg_mr", Name(mr), Invalid("an imported MR (ibv_import_mr) is re-registered by the context "
                                                  "that registered it"));
    errno = EINVAL;
    return IBV_REREG_MR_ERR_INPUT;
  }
  core::MrLayout layout{reinterpret_cast<uint64_t>(addr), length, reinterpret_cast<uint64_t>(addr),
                        static_cast<uint32_t>(access)};
  // ibv_rereg_mr(3): pd is read only with IBV_REREG_MR_CHANGE_PD (callers may pass anything else).
  core::Pd* new_pd = (flags & IBV_REREG_MR_CHANGE_PD) && pd != nullptr ? ToSv(pd)->core : nullptr;
  Status s = m->core->Reregister(static_cast<uint32_t>(flags), new_pd, layout);
  if (!s.ok()) {
    // ibv_rereg_mr(3): an input error leaves the old MR valid and returns IBV_REREG_MR_ERR_INPUT.
    ReturnErrno("ibv_rereg_mr", Name(mr), s);
    errno = s.code();
    return IBV_REREG_MR_ERR_INPUT;
  }
  if (flags & IBV_REREG_MR_CHANGE_PD) mr->pd = pd;
  if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
    mr->addr = addr;
    mr->length = length;
  }
  return 0;
}

SV_EXPORT int ibv_dereg_mr(ibv_mr* mr) {
  // An imported MR: as rdma-core's providers do for IBV_MR_TYPE_IMPORTED_MR, only the handle goes.
  if (ToSv(mr)->core == nullptr) {
    core::UnimportMr(mr->lkey);
    delete ToSv(mr);
    return 0;
  }
  if (Status s = ToSv(mr)->core->Withdraw(); !s.ok()) return ReturnErrno("ibv_dereg_mr", Name(mr), s);
  if (ToSv(mr)->dm) ToSv(mr)->dm->users().Release();
  delete ToSv(mr);
  return 0;
}
SV_DEFAULT_VERSION(ibv_dereg_mr);

// ibv_import_pd(3): the PD `pd_handle` of the context's object space (its cmd_fd, shared by
// ibv_import_device): the same protection domain, through a handle of this context.
SV_EXPORT ibv_pd* ibv_import_pd(ibv_context* context, uint32_t pd_handle) {
  auto core = core::Pd::Import(*ToSv(context)->core, pd_handle);
  if (!core.ok()) return ReturnNull<ibv_pd>("ibv_import_pd", ObjectName("pd", pd_handle), core.status());
  auto* pd = new (std::nothrow) SvPd{};
  if (pd == nullptr) return ReturnNull<ibv_pd>("ibv_import_pd", "", NoMemory("out of memory"));
  pd->owned = std::move(core.value());
  pd->core = pd->owned.get();
  pd->pd.context = context;
  pd->pd.handle = pd_handle;
  if (pd->core->foreign())
    SV_LOG(kInfo, "ibv_import_pd(%s): imported from another process; MRs registered on it here reach this "
                  "process's memory, its MRs imported from there reach that process's", Name(&pd->pd).c_str());
  return &pd->pd;
}

// ibv_unimport_pd(3): frees this handle only; the PD stays with its other handles. A handle
// objects of this process still use is kept (freeing it would leave them a dangling PD).
SV_EXPORT void ibv_unimport_pd(ibv_pd* pd) {
  SvPd* p = ToSv(pd);
  if (int n = p->core->users().count(); n > 0) {
    SV_LOG(kError, "ibv_unimport_pd(%s): %d object(s) created on this handle still use it: not freed", Name(pd).c_str(), n);
    return;
  }
  delete p;
}

// ibv_import_mr(3): the MR `mr_handle` of the object space, with the keys, address (its iova, as
// rdma-core fills it from the kernel's QUERY_MR) and length the registration has.
SV_EXPORT ibv_mr* ibv_import_mr(ibv_pd* pd, uint32_t mr_handle) {
  auto r = core::ImportMr(*ToSv(pd)->core, mr_handle);
  if (!r.ok()) return ReturnNull<ibv_mr>("ibv_import_mr", Name(pd), r.status());
  auto* m = new (std::nothrow) SvMr{};
  if (m == nullptr) return ReturnNull<ibv_mr>("ibv_import_mr", Name(pd), NoMemory("out of memory"));
  m->mr.context = pd->context;
  m->mr.pd = pd;
  m->mr.addr = reinterpret_cast<void*>(r->iova);
  m->mr.length = r->length;
  m->mr.handle = mr_handle;
  m->mr.lkey = r->lkey;
  m->mr.rkey = r->rkey;
  return &m->mr;
}

// ibv_unimport_mr(3): frees this handle only; the registration stays with its owner.
SV_EXPORT void ibv_unimport_mr(ibv_mr* mr) {
  core::UnimportMr(mr->lkey);
  delete ToSv(mr);
}
