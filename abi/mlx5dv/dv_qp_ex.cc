// The mlx5dv_qp_ex ops (mlx5dv_wr_post(3)): setters and builders that extend the ibv_qp_ex batch
// of the same QP (abi/verbs/qp_ex.cc). mlx5dv_wr_set_dc_addr(_stream) gives a DCI's current work
// request its destination (and stream); mlx5dv_wr_mr_list / mlx5dv_wr_mr_interleaved and
// mlx5dv_wr_mkey_configure with its access/layout setters configure an indirect mkey (a UMR work
// request), with a block signature on BLOCK_SIGNATURE mkeys (core/mkey_signature.h). Crypto, raw-WQE and memcpy refuse. Compiled into
// libibverbs.so.1 (provider.h).
#include <cstring>

#include <vector>

#include "abi/mlx5dv/mkey_ops.h"
#include "abi/mlx5dv/provider.h"
#include "abi/verbs/objects.h"
#include "base/strings.h"

namespace softverbs::abi {
namespace {

// The UMR work request and its completion in rdma-core's values (mlx5dv.h: MLX5DV_WC_UMR is
// IBV_WC_DRIVER1).
static_assert(static_cast<uint32_t>(transport::WrOpcode::kDriver1) == IBV_WR_DRIVER1);
static_assert(transport::wc_opcode::kDriver1 == MLX5DV_WC_UMR);

// Records the first refusal of the batch; ibv_wr_complete returns it (the builders are void).
void Refuse(SvQp* qp, Status status) {
  if (qp->batch_status.ok()) qp->batch_status = std::move(status);
}

// mlx5dv_wr_post(3): "This setter is available when the QP transport is DCI"; like every setter
// it applies to the work request just started ("Attach a DC info to the last work request").
// `stream_id` selects the DCI stream (transport/dci_streams.h) of a DCI created with
// MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS; any 16-bit value is a stream (rdma-core's own test posts
// ids beyond 2^log_num_concurent). A DCI without streams has one: the id is carried and ignored
// (perftest -c DC cycles stream ids on every DCI).
void SetDcAddrStream(mlx5dv_qp_ex* mqp, ibv_ah* ah, uint32_t remote_dctn, uint64_t remote_dc_key,
                     uint16_t stream_id) {
  SvQp* qp = ToSv(mqp);
  if (qp->core->dc_role() != core::DcRole::kDci)
    return Refuse(qp, Invalid("mlx5dv_wr_set_dc_addr applies to DCIs only"));
  if (qp->batch.empty()) return Refuse(qp, Invalid("mlx5dv_wr_set_dc_addr called before any ibv_wr_* operation"));
  if (ah == nullptr) return Refuse(qp, Invalid("mlx5dv_wr_set_dc_addr: ah is NULL"));
  transport::DcDestination& dc = qp->batch.back().wr.dc;
  dc.set = true;
  dc.stream_id = stream_id;
  dc.remote_dctn = remote_dctn;
  dc.access_key = remote_dc_key;
  memcpy(dc.dgid, ToSv(ah)->ud.dgid, sizeof dc.dgid);
  dc.on_host = ToSv(ah)->ud.on_host;
}

// mlx5dv_wr_post(3): "Calls to mlx5dv_wr_set_dc_addr() are equivalent to using stream_id=0".
void SetDcAddr(mlx5dv_qp_ex* mqp, ibv_ah* ah, uint32_t remote_dctn, uint64_t remote_dc_key) {
  SetDcAddrStream(mqp, ah, remote_dctn, remote_dc_key, 0);
}

// Appends the UMR work request of `spec` on `sv` to the batch (core/mkey.h checks it; the send
// queue executes it in order, transport/indirect_key.h). It completes as MLX5DV_WC_UMR
// (IBV_WC_DRIVER1), as mlx5dv_wr_mkey_configure(3) says.
void AppendUmr(SvQp* qp, const std::string& verb, SvMkey* sv, const core::UmrSpec& spec) {
  auto payload = sv->core->BuildUmr(*ToSv(qp->qpx.qp_base.pd)->core, spec);
  if (!payload.ok()) return Refuse(qp, Status(payload.status().code(), verb + ": " + payload.status().rule()));
  SvQp::BatchedWr& b = qp->batch.emplace_back();
  b.wr.wr_id = qp->qpx.wr_id;
  b.wr.flags = qp->qpx.wr_flags;
  b.wr.opcode = transport::WrOpcode::kDriver1;
  b.wr.umr = true;
  b.inline_data = std::move(payload.value());
}

// The checks every UMR builder makes; the mkey, or nullptr after refusing the batch.
SvMkey* BeginUmr(SvQp* qp, const std::string& v, uint64_t flag, mlx5dv_mkey* mkey) {
  if (!(qp->mlx5_send_ops_flags & flag)) {
    Refuse(qp, Invalid(v + " was not requested in mlx5dv_qp_init_attr.send_ops_flags at creation"));
    return nullptr;
  }
  // mlx5dv_wr_post(3): "Current implementation requires the IBV_SEND_INLINE option to be on in
  // ibv_qp_ex->wr_flags field." mlx5 (mlx5_send_wr_mkey_configure, which wr_mr_list and
  // wr_mr_interleaved call too) refuses without it with EOPNOTSUPP.
  if (!(qp->qpx.wr_flags & IBV_SEND_INLINE)) {
    Refuse(qp, NotSupported(v + " needs IBV_SEND_INLINE in ibv_qp_ex->wr_flags (mlx5dv_wr_post(3))"));
    return nullptr;
  }
  if (qp->mkey_config.open) {
    Refuse(qp, Invalid(v + " started before the previous mlx5dv_wr_mkey_configure's setters were called"));
    return nullptr;
  }
  SvMkey* sv = mkey != nullptr ? FindMkey(mkey) : nullptr;
  if (sv == nullptr) Refuse(qp, Invalid(v + ": mkey is not an mkey of mlx5dv_create_mkey (or was destroyed)"));
  return sv;
}

void MrInterleaved(mlx5dv_qp_ex* q, mlx5dv_mkey* mkey, uint32_t access, uint32_t repeat_count, uint16_t n,
                   mlx5dv_mr_interleaved* data) {
  SvQp* qp = ToSv(q);
  const std::string v = "mlx5dv_wr_mr_interleaved";
  SvMkey* sv = BeginUmr(qp, v, MLX5DV_QP_EX_WITH_MR_INTERLEAVED, mkey);
  if (sv == nullptr) return;
  core::UmrSpec spec{true, access, true, true, repeat_count, std::vector<transport::LayoutEntry>(n)};
  for (uint16_t i = 0; i < n && data != nullptr; ++i)
    spec.entries[i] = {data[i].addr, data[i].bytes_count, data[i].bytes_skip, data[i].lkey, 0};
  AppendUmr(qp, v, sv, spec);
}
void MrList(mlx5dv_qp_ex* q, mlx5dv_mkey* mkey, uint32_t access, uint16_t n, ibv_sge* sge) {
  SvQp* qp = ToSv(q);
  const std::string v = "mlx5dv_wr_mr_list";
  SvMkey* sv = BeginUmr(qp, v, MLX5DV_QP_EX_WITH_MR_LIST, mkey);
  if (sv == nullptr) return;
  core::UmrSpec spec{true, access, true, false, 1, std::vector<transport::LayoutEntry>(n)};
  for (uint16_t i = 0; i < n && sge != nullptr; ++i) spec.entries[i] = {sge[i].addr, sge[i].length, 0, sge[i].lkey, 0};
  AppendUmr(qp, v, sv, spec);
}

// mlx5dv_wr_mkey_configure(3): the builder opens a configuration WR that its num_setters
// setters complete; "num_setters can be zero to apply attr only".
void FinishMkeyConfig(SvQp* qp) {
  SvQp::MkeyConfig& c = qp->mkey_config;
  c.open = false;
  SvMkey* sv = FindMkey(c.mkey);
  if (sv == nullptr) return Refuse(qp, Invalid("mlx5dv_wr_mkey_configure: the mkey was destroyed meanwhile"));
  AppendUmr(qp, "mlx5dv_wr_mkey_configure", sv, c.spec);
}

void MkeyConfigure(mlx5dv_qp_ex* q, mlx5dv_mkey* mkey, uint8_t num_setters, mlx5dv_mkey_conf_attr* attr) {
  SvQp* qp = ToSv(q);
  const std::string v = "mlx5dv_wr_mkey_configure";
  SvMkey* sv = BeginUmr(qp, v, MLX5DV_QP_EX_WITH_MKEY_CONFIGURE, mkey);
  if (sv == nullptr) return;
  // mlx5 (mlx5_send_wr_mkey_configure) refuses unknown conf_flags and any comp_mask with
  // EOPNOTSUPP. RESET_SIG_ATTR clears the signature of a BLOCK_SIGNATURE mkey and changes
  // nothing on another.
  if (attr == nullptr) return Refuse(qp, Invalid(v + ": attr is NULL"));
  if ((attr->conf_flags & ~static_cast<uint32_t>(MLX5DV_MKEY_CONF_FLAG_RESET_SIG_ATTR)) || attr->comp_mask != 0)
    return Refuse(qp, NotSupported(v + ": conf_flags " + Hex(attr->conf_flags) + " / comp_mask " +
                                   Hex(attr->comp_mask) + ": only MLX5DV_MKEY_CONF_FLAG_RESET_SIG_ATTR is defined"));
  qp->mkey_config = {};
  qp->mkey_config.mkey = mkey;
  qp->mkey_config.num_setters = num_setters;
  qp->mkey_config.open = true;
  qp->mkey_config.spec.reset_sig = (attr->conf_flags & MLX5DV_MKEY_CONF_FLAG_RESET_SIG_ATTR) != 0;
  if (num_setters == 0) FinishMkeyConfig(qp);
}

// The configuration WR a setter adds to, or nullptr after refusing the batch (mlx5: EINVAL
// without an open one -- including a setter beyond num_setters).
SvQp::MkeyConfig* OpenConfig(mlx5dv_qp_ex* q, const char* setter) {
  SvQp* qp = ToSv(q);
  if (!qp->batch_status.ok()) return nullptr;
  if (!qp->mkey_config.open) {
    Refuse(qp, Invalid(std::string(setter) + " without an open mlx5dv_wr_mkey_configure (none, or its "
                       "num_setters setters were called already)"));
    return nullptr;
  }
  return &qp->mkey_config;
}

void SetterDone(mlx5dv_qp_ex* q) {
  SvQp* qp = ToSv(q);
  if (++qp->mkey_config.called == qp->mkey_config.num_setters) FinishMkeyConfig(qp);
}

void SetMkeyAccessFlags(mlx5dv_qp_ex* q, uint32_t access) {
  SvQp::MkeyConfig* c = OpenConfig(q, "mlx5dv_wr_set_mkey_access_flags");
  if (c == nullptr) return;
  // "Each setter can be called only once per the WR builder."
  if (c->spec.set_access)
    return Refuse(ToSv(q), Invalid("mlx5dv_wr_set_mkey_access_flags called twice for one mlx5dv_wr_mkey_configure"));
  c->spec.set_access = true;
  c->spec.access = access;
  SetterDone(q);
}

// "Not more than one data layout setter may follow builder function."
void SetLayout(mlx5dv_qp_ex* q, const char* setter, bool interleaved, uint32_t repeat_count,
               std::vector<transport::LayoutEntry> entries) {
  SvQp::MkeyConfig* c = OpenConfig(q, setter);
  if (c == nullptr) return;
  if (c->spec.set_layout)
    return Refuse(ToSv(q), Invalid(std::string(setter) + ": a layout setter was called already for this "
                                   "mlx5dv_wr_mkey_configure (one per work request)"));
  c->spec.set_layout = true;
  c->spec.interleaved = interleaved;
  c->spec.repeat_count = repeat_count;
  c->spec.entries = std::move(entries);
  SetterDone(q);
}
void SetMkeyLayoutList(mlx5dv_qp_ex* q, uint16_t n, const ibv_sge* sge) {
  std::vector<transport::LayoutEntry> entries(n);
  for (uint16_t i = 0; i < n && sge != nullptr; ++i) entries[i] = {sge[i].addr, sge[i].length, 0, sge[i].lkey, 0};
  SetLayout(q, "mlx5dv_wr_set_mkey_layout_list", false, 1, std::move(entries));
}
void SetMkeyLayoutInterleaved(mlx5dv_qp_ex* q, uint32_t repeat_count, uint16_t n, const mlx5dv_mr_interleaved* data) {
  std::vector<transport::LayoutEntry> entries(n);
  for (uint16_t i = 0; i < n && data != nullptr; ++i)
    entries[i] = {data[i].addr, data[i].bytes_count, data[i].bytes_skip, data[i].lkey, 0};
  SetLayout(q, "mlx5dv_wr_set_mkey_layout_interleaved", true, repeat_count, std::move(entries));
}

// The values core/mkey_signature.h mirrors.
static_assert(core::sig::kTypeT10Dif == MLX5DV_SIG_TYPE_T10DIF && core::sig::kTypeCrc == MLX5DV_SIG_TYPE_CRC);
static_assert(core::sig::kCrc32 == MLX5DV_SIG_CRC_TYPE_CRC32 && core::sig::kCrc32c == MLX5DV_SIG_CRC_TYPE_CRC32C &&
              core::sig::kCrc64Xp10 == MLX5DV_SIG_CRC_TYPE_CRC64_XP10);
static_assert(core::sig::kBgCrc == MLX5DV_SIG_T10DIF_CRC && core::sig::kBgCsum == MLX5DV_SIG_T10DIF_CSUM);
static_assert(core::sig::kRefRemap == MLX5DV_SIG_T10DIF_FLAG_REF_REMAP &&
              core::sig::kAppEscape == MLX5DV_SIG_T10DIF_FLAG_APP_ESCAPE &&
              core::sig::kAppRefEscape == MLX5DV_SIG_T10DIF_FLAG_APP_REF_ESCAPE);
static_assert(core::sig::kBlock512 == MLX5DV_BLOCK_SIZE_512 && core::sig::kBlock4160 == MLX5DV_BLOCK_SIZE_4160);
static_assert(core::sig::kAttrCopyMask == MLX5DV_SIG_BLOCK_ATTR_FLAG_COPY_MASK);

// An enum field as the application stored it: any value may arrive, and loading one the enum
// does not name through the enum type is undefined behaviour.
template <typename E>
uint32_t RawEnum(const E& e) {
  static_assert(sizeof(E) == sizeof(uint32_t));
  uint32_t v;
  memcpy(&v, &e, sizeof v);
  return v;
}

core::SigDomainSpec DomainSpec(const mlx5dv_sig_block_domain* d) {
  core::SigDomainSpec out;
  if (d == nullptr) return out;
  out.present = true;
  out.type = RawEnum(d->sig_type);
  out.block_size = RawEnum(d->block_size);
  out.comp_mask = d->comp_mask;
  if (out.type == MLX5DV_SIG_TYPE_CRC && d->sig.crc != nullptr) {
    out.crc_type = RawEnum(d->sig.crc->type);
    out.seed = d->sig.crc->seed;
  } else if (out.type == MLX5DV_SIG_TYPE_T10DIF && d->sig.dif != nullptr) {
    out.bg_type = RawEnum(d->sig.dif->bg_type);
    out.bg = d->sig.dif->bg;
    out.app_tag = d->sig.dif->app_tag;
    out.ref_tag = d->sig.dif->ref_tag;
    out.flags = d->sig.dif->flags;
  } else {
    out.type = UINT32_MAX;  // no parameters: refused as an unknown type
  }
  return out;
}

// mlx5dv_wr_set_mkey_sig_block(3): the signature of the mkey being configured. The rules
// (mlx5's EINVAL cases, what softverbs does not compute) are core/mkey_signature.h's; an mkey
// without MLX5DV_MKEY_INIT_ATTR_FLAGS_BLOCK_SIGNATURE is refused with EINVAL, as mlx5 does.
void SetMkeySigBlock(mlx5dv_qp_ex* q, const mlx5dv_sig_block_attr* attr) {
  const char* v = "mlx5dv_wr_set_mkey_sig_block";
  SvQp::MkeyConfig* c = OpenConfig(q, v);
  if (c == nullptr) return;
  SvQp* qp = ToSv(q);
  SvMkey* sv = FindMkey(c->mkey);
  if (sv == nullptr) return Refuse(qp, Invalid(std::string(v) + ": the mkey was destroyed meanwhile"));
  if (!sv->core->signature())
    return Refuse(qp, Invalid(std::string(v) + ": the mkey was created without "
                              "MLX5DV_MKEY_INIT_ATTR_FLAGS_BLOCK_SIGNATURE (mlx5dv_wr_set_mkey_sig_block(3) Notes)"));
  if (c->spec.set_sig) return Refuse(qp, Invalid(std::string(v) + " called twice for one mlx5dv_wr_mkey_configure"));
  if (attr == nullptr) return Refuse(qp, Invalid(std::string(v) + ": attr is NULL"));
  core::SigBlockSpec spec;
  spec.mem = DomainSpec(attr->mem);
  spec.wire = DomainSpec(attr->wire);
  spec.flags = attr->flags;
  spec.check_mask = attr->check_mask;
  spec.copy_mask = attr->copy_mask;
  spec.comp_mask = attr->comp_mask;
  // Checked now, as mlx5 does in the setter: ibv_wr_complete returns the errno.
  if (auto config = core::SigConfigOf(spec); !config.ok())
    return Refuse(qp, Status(config.status().code(), std::string(v) + ": " + config.status().rule()));
  c->spec.set_sig = true;
  c->spec.sig = spec;
  SetterDone(q);
}
void SetMkeyCrypto(mlx5dv_qp_ex* q, const mlx5dv_crypto_attr*) {
  Refuse(ToSv(q), NotSupported("mlx5dv_wr_set_mkey_crypto: crypto mkeys are not offered (no crypto engine)"));
}
void RawWqe(mlx5dv_qp_ex* q, const void*) {
  Refuse(ToSv(q), NotSupported("mlx5dv_wr_raw_wqe: softverbs has no mlx5 WQEs"));
}
void Memcpy(mlx5dv_qp_ex* q, uint32_t, uint64_t, uint32_t, uint64_t, size_t) {
  Refuse(ToSv(q), NotSupported("mlx5dv_wr_memcpy: the DMA memcpy engine is not offered (max_wr_memcpy_length 0)"));
}

}  // namespace

void InitDvQpEx(SvQp* qp) {
  mlx5dv_qp_ex& x = qp->dv;
  x.comp_mask = 0;
  x.wr_set_dc_addr = SetDcAddr;
  x.wr_mr_interleaved = MrInterleaved;
  x.wr_mr_list = MrList;
  x.wr_mkey_configure = MkeyConfigure;
  x.wr_set_mkey_access_flags = SetMkeyAccessFlags;
  x.wr_set_mkey_layout_list = SetMkeyLayoutList;
  x.wr_set_mkey_layout_interleaved = SetMkeyLayoutInterleaved;
  x.wr_set_mkey_sig_block = SetMkeySigBlock;
  x.wr_raw_wqe = RawWqe;
  x.wr_set_dc_addr_stream = SetDcAddrStream;
  x.wr_memcpy = Memcpy;
  x.wr_set_mkey_crypto = SetMkeyCrypto;
}

}  // namespace softverbs::abi
