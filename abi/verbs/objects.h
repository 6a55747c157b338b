// The ABI objects: each rdma-core struct handed to applications, embedded first in a wrapper that
// owns the core object. Only abi/ sees these structs (DESIGN.md section 4).
#pragma once

#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>

#include <memory>
#include <mutex>
#include <vector>

#include "core/ah.h"
#include "core/context.h"
#include "core/cq.h"
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
  int cmd_fd = -1;
};

struct SvPd {
  ibv_pd pd;
  std::unique_ptr<core::Pd> core;
};

struct SvMr {
  ibv_mr mr;
  std::unique_ptr<core::Mr> core;
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
  // Held from ibv_start_poll to ibv_end_poll so concurrent pollers do not share `current`,
  // unless the CQ was created IBV_CREATE_CQ_ATTR_SINGLE_THREADED.
  std::mutex poll_mu;
  bool single_threaded = false;
};

struct SvSrq {
  ibv_srq srq;
  std::unique_ptr<core::Srq> core;
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
  uint64_t mlx5_send_ops_flags = 0;  // mlx5dv_qp_init_attr.send_ops_flags (MR_LIST / MR_INTERLEAVED)
  // A handle of ibv_open_qp(3) (XRC target QPs): `core` is null and this acts on the QP.
  std::unique_ptr<core::OpenedQp> opened;
};

inline SvContext* ToSv(ibv_context* c) {
  return reinterpret_cast<SvContext*>(reinterpret_cast<uint8_t*>(c) - offsetof(verbs_context, context));
}
inline SvPd* ToSv(ibv_pd* p) { return reinterpret_cast<SvPd*>(p); }
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

// Creates a QP (qp.cc): ibv_create_qp_ex(3)'s conversion and checks, with `provider` carrying
// what mlx5dv_create_qp(3) adds (DC role, mlx5 create flags) -- nullptr for plain verbs.
ibv_qp* CreateQpWith(const char* verb, ibv_context* context, ibv_qp_init_attr_ex* attr,
                     const core::QpInitAttributes* provider);

// Fills the function tables of a new context (context_ops.cc).
void InitContextOps(SvContext* ctx);
// Fills the ibv_qp_ex send-op table of a QP (qp_ex.cc) and the ibv_cq_ex poll table (cq.cc).
void InitQpEx(SvQp* qp, uint64_t send_ops_flags);
void InitCqEx(SvCq* cq);

}  // namespace softverbs::abi
