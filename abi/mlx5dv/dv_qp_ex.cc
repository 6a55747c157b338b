// The mlx5dv_qp_ex ops (mlx5dv_wr_post(3)): setters and builders that extend the ibv_qp_ex batch
// of the same QP (abi/verbs/qp_ex.cc). mlx5dv_wr_set_dc_addr(_stream) gives a DCI's current work
// request its destination (and stream); mlx5dv_wr_mr_list / mlx5dv_wr_mr_interleaved configure
// an indirect mkey (a UMR work request). The signature/crypto mkey, raw-WQE and memcpy builders refuse the batch: they
// can only be requested through send_ops_flags that mlx5dv_create_qp refuses. Compiled into
// libibverbs.so.1 (provider.h).
#include <cstring>

#include <vector>

#include "abi/mlx5dv/mkey_ops.h"
#include "abi/mlx5dv/provider.h"
#include "abi/verbs/objects.h"

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

void RefuseMkey(mlx5dv_qp_ex* mqp, const char* verb) {
  Refuse(ToSv(mqp), NotSupported(std::string(verb) + ": signature/crypto mkeys (MKEY_CONFIGURE) are not offered"));
}

// mlx5dv_wr_mr_list / mlx5dv_wr_mr_interleaved: a UMR work request that configures `mkey`
// (core/mkey.h checks it; the send queue executes it in order, transport/indirect_key.h).
void BeginUmr(mlx5dv_qp_ex* mqp, const char* verb, uint64_t flag, mlx5dv_mkey* mkey, uint32_t access,
              bool interleaved, uint32_t repeat_count, const std::vector<transport::LayoutEntry>& entries) {
  SvQp* qp = ToSv(mqp);
  const std::string v = verb;
  if (!(qp->mlx5_send_ops_flags & flag))
    return Refuse(qp, Invalid(v + " was not requested in mlx5dv_qp_init_attr.send_ops_flags at creation"));
  // mlx5dv_wr_post(3): "Current implementation requires the IBV_SEND_INLINE option to be on in
  // ibv_qp_ex->wr_flags field."
  if (!(qp->qpx.wr_flags & IBV_SEND_INLINE))
    return Refuse(qp, Invalid(v + " needs IBV_SEND_INLINE in ibv_qp_ex->wr_flags (mlx5dv_wr_post(3))"));
  SvMkey* sv = mkey != nullptr ? FindMkey(mkey) : nullptr;
  if (sv == nullptr)
    return Refuse(qp, Invalid(v + ": mkey is not an indirect mkey of mlx5dv_create_mkey (or was destroyed)"));
  auto payload = sv->core->BuildUmr(*ToSv(qp->qpx.qp_base.pd)->core, access, interleaved, repeat_count, entries);
  if (!payload.ok()) return Refuse(qp, Status(payload.status().code(), v + ": " + payload.status().rule()));
  SvQp::BatchedWr& b = qp->batch.emplace_back();
  b.wr.wr_id = qp->qpx.wr_id;
  b.wr.flags = qp->qpx.wr_flags;
  b.wr.opcode = transport::WrOpcode::kDriver1;
  b.wr.umr = true;
  b.inline_data = std::move(payload.value());
}

void MrInterleaved(mlx5dv_qp_ex* q, mlx5dv_mkey* mkey, uint32_t access, uint32_t repeat_count, uint16_t n,
                   mlx5dv_mr_interleaved* data) {
  std::vector<transport::LayoutEntry> entries(n);
  for (uint16_t i = 0; i < n && data != nullptr; ++i)
    entries[i] = {data[i].addr, data[i].bytes_count, data[i].bytes_skip, data[i].lkey, 0};
  BeginUmr(q, "mlx5dv_wr_mr_interleaved", MLX5DV_QP_EX_WITH_MR_INTERLEAVED, mkey, access, true, repeat_count,
           entries);
}
void MrList(mlx5dv_qp_ex* q, mlx5dv_mkey* mkey, uint32_t access, uint16_t n, ibv_sge* sge) {
  std::vector<transport::LayoutEntry> entries(n);
  for (uint16_t i = 0; i < n && sge != nullptr; ++i) entries[i] = {sge[i].addr, sge[i].length, 0, sge[i].lkey, 0};
  BeginUmr(q, "mlx5dv_wr_mr_list", MLX5DV_QP_EX_WITH_MR_LIST, mkey, access, false, 1, entries);
}
void MkeyConfigure(mlx5dv_qp_ex* q, mlx5dv_mkey*, uint8_t, mlx5dv_mkey_conf_attr*) {
  RefuseMkey(q, "mlx5dv_wr_mkey_configure");
}
void SetMkeyAccessFlags(mlx5dv_qp_ex* q, uint32_t) { RefuseMkey(q, "mlx5dv_wr_set_mkey_access_flags"); }
void SetMkeyLayoutList(mlx5dv_qp_ex* q, uint16_t, const ibv_sge*) { RefuseMkey(q, "mlx5dv_wr_set_mkey_layout_list"); }
void SetMkeyLayoutInterleaved(mlx5dv_qp_ex* q, uint32_t, uint16_t, const mlx5dv_mr_interleaved*) {
  RefuseMkey(q, "mlx5dv_wr_set_mkey_layout_interleaved");
}
void SetMkeySigBlock(mlx5dv_qp_ex* q, const mlx5dv_sig_block_attr*) { RefuseMkey(q, "mlx5dv_wr_set_mkey_sig_block"); }
void SetMkeyCrypto(mlx5dv_qp_ex* q, const mlx5dv_crypto_attr*) { RefuseMkey(q, "mlx5dv_wr_set_mkey_crypto"); }
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
