// The ABI objects: each rdma-core struct handed to applications, embedded first in a wrapper that
// owns the core object. Only abi/ sees these structs (DESIGN.md section 4).
#pragma once

#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "core/ah.h"
#include "core/context.h"
#include "core/cq.h"
#include "core/dm.h"
#include "core/mkey.h"
#include "core/mr.h"
#include "core/mw.h"
#include "core/pd.h"
#include "core/qp.h"
#include "core/srq.h"
#include "core/xrc_qp.h"
#include "core/xrcd.h"
#include "transport/work_request.h"

#include "abi/common/export.h"

// The 33 verbs that also exist in the legacy IBVERBS_1.0 ABI (compat_1_0.cc) name their default
// version explicitly, as rdma-core does, so both versions coexist.
#define SV_DEFAULT_VERSION(name) __asm__(".symver " #name "," #name "@@IBVERBS_1.1, remove")

namespace softverbs::abi {

struct SvDevice {
  ibv_device device;  // first: applications hold &device
};

// verbs_context keeps ibv_context as its last member; verbs_get_ctx() finds it by offset.
struct SvContext {
  verbs_context vctx;
  std::unique_ptr<core::Context> core;
  int cmd_fd = -1;  // the object space's memfd (core/object_space.h), closed with `core`
  // The device memory allocated on this context by handle, for ibv_import_dm (dm.cc).
  std::mutex dm_mu;
  std::map<uint32_t, std::weak_ptr<core::DeviceMemory>> dms;
};

// ibv_alloc_dm(3) / ibv_import_dm(3): an ibv_dm naming a DeviceMemory (an imported one names the
// same memory as the allocated one).
struct SvDm {
  ibv_dm dm;
  std::shared_ptr<core::DeviceMemory> core;
  bool imported = false;
};

// ibv_alloc_td(3): a thread domain. A CQ created on a parent domain with one drops its poll lock
// (ibv_start_poll .. ibv_end_poll), as IBV_CREATE_CQ_ATTR_SINGLE_THREADED; every other object
// keeps its locks (docs/support-matrix.md).
struct SvTd {
  ibv_td td;
  core::UseCount users;  // the parent domains holding it (ibv_dealloc_td: EBUSY)
};

struct SvPd;
// What a parent domain adds to the PD it extends (ibv_alloc_parent_domain(3), domains.cc).
struct ParentDomain {
  SvPd* pd = nullptr;  // the protection domain: every object created on the parent domain is in it
  SvTd* td = nullptr;
  void* (*alloc)(ibv_pd*, void*, size_t, size_t, uint64_t) = nullptr;  // IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS
  void (*free)(ibv_pd*, void*, void*, uint64_t) = nullptr;
  void* pd_context = nullptr;  // IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT
  core::UseCount users;        // QPs, CQs and SRQs created on it (ibv_dealloc_pd: EBUSY)
};

// A PD, or a parent domain: "completely interchangeable with the struct ibv_pd used to create
// it" (ibv_alloc_parent_domain(3)), so `core` is the protection domain either way.
struct SvPd {
  ibv_pd pd;
  core::Pd* core = nullptr;
  std::unique_ptr<core::Pd> owned;       // a PD's own; null for a parent domain
  std::unique_ptr<ParentDomain> parent;  // set for a parent domain
};

struct SvMr {
  ibv_mr mr;
  std::shared_ptr<core::DeviceMemory> dm;  // ibv_reg_dm_mr: the memory it holds (outlives `core`)
  std::unique_ptr<core::Mr> core;          // null for an imported MR (ibv_import_mr(3)): its
                                           // registration stays with whoever registered it
};

struct SvMw {
  ibv_mw mw;
  std::unique_ptr<core::Mw> core;
};

struct SvCompChannel {
  ibv_comp_channel channel;
  std::unique_ptr<core::CompChannel> core;
};

// ibv_cq_ex begins with the fields of ibv_cq, so &cqx is also the ibv_cq (ibv_cq_ex_to_cq()).
struct SvCq {
  ibv_cq_ex cqx;
  std::unique_ptr<core::Cq> core;
  uint64_t wc_flags = 0;       // the ibv_cq_ex read_* getters that were asked for
  core::Completion current{};  // the completion ibv_start_poll/ibv_next_poll positioned on
  transport::TmInfo current_tm{};  // its tag matching info (ibv_wc_read_tm_info)
  bool extended = false;           // created by ibv_create_cq_ex (a TM SRQ needs one, as mlx5)
  // Held from ibv_start_poll to ibv_end_poll so concurrent pollers do not share `current`,
  // unless the CQ was created IBV_CREATE_CQ_ATTR_SINGLE_THREADED.
  std::mutex poll_mu;
  bool single_threaded = false;
  SvPd* parent_domain = nullptr;  // IBV_CQ_INIT_ATTR_MASK_PD (released at destroy)
};

struct SvSrq {
  ibv_srq srq;
  std::unique_ptr<core::Srq> core;
  SvPd* parent_domain = nullptr;  // created on a parent domain (released at destroy)
};

// rdma-core's verbs_xrcd begins with ibv_xrcd.
struct SvXrcd {
  ibv_xrcd xrcd;
  std::unique_ptr<core::Xrcd> core;
};

struct SvAh {
  ibv_ah ah;
  std::unique_ptr<core::Ah> core;
  transport::UdDestination ud{};  // the AH's part of a UD destination, resolved at creation
  // mlx5dv_map_ah_to_qp(3): the QP whose ECE congestion control the AH's traffic would follow
  // (0: none). The first mapping stays ("A duplicate mapping [...] is ignored"); it dies with the AH.
  std::atomic<uint32_t> mapped_qpn{0};
};

// ibv_qp_ex begins with ibv_qp (qp_base), so &qpx.qp_base is what ibv_create_qp returns.
struct SvQp {
  ibv_qp_ex qpx;
  std::unique_ptr<core::Qp> core;
  bool has_qp_ex = false;  // created with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS
  uint64_t send_ops_flags = 0;
  // The ibv_wr_* batch between wr_start and wr_complete: the work requests being built, and the
  // first refusal, returned by wr_complete (the builders are void functions).
  struct BatchedWr {
    transport::SendWr wr;
    std::vector<uint8_t> inline_data;
    std::vector<uint8_t> tso_header;  // ibv_wr_send_tso: copied when built
  };
  std::vector<BatchedWr> batch;
  Status batch_status;
  // The mlx5dv_qp_ex ops (mlx5dv_qp_ex_from_ibv_qp_ex(3)) of a QP with ibv_qp_ex ops, filled at
  // creation by abi/mlx5dv/dv_qp_ex.cc; they add to the batch above.
  mlx5dv_qp_ex dv{};
  uint64_t mlx5_send_ops_flags = 0;  // mlx5dv_qp_init_attr.send_ops_flags (MR_LIST / MR_INTERLEAVED / MKEY_CONFIGURE)
  // An mlx5dv_wr_mkey_configure work request still waiting for its num_setters setters
  // (mlx5dv_wr_mkey_configure(3)); it joins the batch when the last one is called.
  struct MkeyConfig {
    bool open = false;
    mlx5dv_mkey* mkey = nullptr;
    uint8_t num_setters = 0;
    uint8_t called = 0;
    bool sig_set = false;
    core::UmrSpec spec;
  } mkey_config;
  // A handle of ibv_open_qp(3) (XRC target QPs): `core` is null and this acts on the QP.
  std::unique_ptr<core::OpenedQp> opened;
  SvPd* parent_domain = nullptr;  // created on a parent domain (released at destroy)
  // ECE (ibv_set_ece(3), ibv_query_ece(3)), as mlx5 keeps it: the options requested by
  // ibv_set_ece, applied by the next successful ibv_modify_qp, and those the device agreed to
  // (what ibv_query_ece returns; cleared by ibv_set_ece until that modify).
  uint32_t ece_requested = 0;
  uint32_t ece_agreed = 0;
};

inline SvContext* ToSv(ibv_context* c) {
  return reinterpret_cast<SvContext*>(reinterpret_cast<uint8_t*>(c) - offsetof(verbs_context, context));
}
inline SvPd* ToSv(ibv_pd* p) { return reinterpret_cast<SvPd*>(p); }
inline SvTd* ToSv(ibv_td* t) { return reinterpret_cast<SvTd*>(t); }
inline SvDm* ToSv(ibv_dm* d) { return reinterpret_cast<SvDm*>(d); }
inline SvMr* ToSv(ibv_mr* m) { return reinterpret_cast<SvMr*>(m); }
inline SvMw* ToSv(ibv_mw* m) { return reinterpret_cast<SvMw*>(m); }
inline SvCompChannel* ToSv(ibv_comp_channel* c) { return reinterpret_cast<SvCompChannel*>(c); }
inline SvCq* ToSv(ibv_cq* c) { return reinterpret_cast<SvCq*>(c); }
inline SvCq* ToSv(ibv_cq_ex* c) { return reinterpret_cast<SvCq*>(c); }
inline SvSrq* ToSv(ibv_srq* s) { return reinterpret_cast<SvSrq*>(s); }
inline SvAh* ToSv(ibv_ah* a) { return reinterpret_cast<SvAh*>(a); }
inline SvXrcd* ToSv(ibv_xrcd* x) { return reinterpret_cast<SvXrcd*>(x); }
inline SvQp* ToSv(ibv_qp* q) { return reinterpret_cast<SvQp*>(q); }
inline SvQp* ToSv(ibv_qp_ex* q) { return reinterpret_cast<SvQp*>(q); }
inline SvQp* ToSv(mlx5dv_qp_ex* q) {
  return reinterpret_cast<SvQp*>(reinterpret_cast<uint8_t*>(q) - offsetof(SvQp, dv));
}

// "qp 0x11", "cq 0x3", ... for refusal log lines.
std::string Name(const ibv_qp* qp);
std::string Name(const ibv_cq* cq);
std::string Name(const ibv_pd* pd);
std::string Name(const ibv_srq* srq);
std::string Name(const ibv_mr* mr);
std::string Name(const ibv_dm* dm);

// Creates a QP (qp.cc): ibv_create_qp_ex(3)'s conversion and checks, with `provider` carrying
// what mlx5dv_create_qp(3) adds (DC role, mlx5 create flags) -- nullptr for plain verbs.
ibv_qp* CreateQpWith(const char* verb, ibv_context* context, ibv_qp_init_attr_ex* attr,
                     const core::QpInitAttributes* provider);

// Parent domains (domains.cc). A QP, CQ or SRQ created on `pd` asks its allocator for the
// `bytes` of ring memory it needs (resource_type: MLX5DV_RES_TYPE_*) and holds the parent
// domain until released; a plain PD: nothing to do. The Status is the creation's refusal.
Status UseParentDomain(const char* verb, ibv_pd* pd, size_t bytes, size_t alignment, uint64_t resource_type,
                       SvPd** held);
void ReleaseParentDomain(SvPd* held);

// Fills the function tables of a new context (context_ops.cc).
void InitContextOps(SvContext* ctx);
// Fills the ibv_qp_ex send-op table of a QP (qp_ex.cc) and the ibv_cq_ex poll table (cq.cc).
void InitQpEx(SvQp* qp, uint64_t send_ops_flags);
void InitCqEx(SvCq* cq);

}  // namespace softverbs::abi
