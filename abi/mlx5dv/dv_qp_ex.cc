// The mlx5dv_qp_ex ops (mlx5dv_wr_post(3)): setters and builders that extend the ibv_qp_ex batch
// of the same QP (abi/verbs/qp_ex.cc). mlx5dv_wr_set_dc_addr gives a DCI's current work request
// its destination; the mkey, signature, crypto, raw-WQE and memcpy builders refuse the batch:
// they can only be requested through send_ops_flags that mlx5dv_create_qp refuses. Compiled into
// libibverbs.so.1 (provider.h).
#include <cstring>

#include "abi/mlx5dv/provider.h"
#include "abi/verbs/objects.h"

namespace softverbs::abi {
namespace {

// Records the first refusal of the batch; ibv_wr_complete returns it (the builders are void).
void Refuse(SvQp* qp, Status status) {
  if (qp->batch_status.ok()) qp->batch_status = std::move(status);
}

void SetDcAddr(mlx5dv_qp_ex* mqp, ibv_ah* ah, uint32_t remote_dctn, uint64_t remote_dc_key) {
  SvQp* qp = ToSv(mqp);
  // mlx5dv_wr_post(3): "This setter is available when the QP transport is DCI"; like every
  // setter it applies to the work request just started ("Attach a DC info to the last work request").
  if (qp->core->dc_role() != core::DcRole::kDci)
    return Refuse(qp, Invalid("mlx5dv_wr_set_dc_addr applies to DCIs only"));
  if (qp->batch.empty()) return Refuse(qp, Invalid("mlx5dv_wr_set_dc_addr called before any ibv_wr_* operation"));
  if (ah == nullptr) return Refuse(qp, Invalid("mlx5dv_wr_set_dc_addr: ah is NULL"));
  transport::DcDestination& dc = qp->batch.back().wr.dc;
  dc.set = true;
  dc.remote_dctn = remote_dctn;
  dc.access_key = remote_dc_key;
  memcpy(dc.dgid, ToSv(ah)->ud.dgid, sizeof dc.dgid);
}

// DCI streams are not implemented (dci_streams_caps 0, and MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS is
// refused), so no DCI has streams and stream_id has nothing to select, as on an mlx5 DCI created
// without them: every WR runs in the DCI's one stream, in posting order -- which keeps the only
// promise streams make ("All work request of a specific stream_id are handled in order",
// mlx5dv_create_qp(3)); mlx5dv_wr_post(3): set_dc_addr is "equivalent to using stream_id=0".
// perftest -c DC cycles stream ids on every DCI.
void SetDcAddrStream(mlx5dv_qp_ex* mqp, ibv_ah* ah, uint32_t remote_dctn, uint64_t remote_dc_key, uint16_t) {
  SetDcAddr(mqp, ah, remote_dctn, remote_dc_key);
}

void RefuseMkey(mlx5dv_qp_ex* mqp, const char* verb) {
  Refuse(ToSv(mqp), NotSupported(std::string(verb) + ": indirect mkeys are not offered"));
}
void MrInterleaved(mlx5dv_qp_ex* q, mlx5dv_mkey*, uint32_t, uint32_t, uint16_t, mlx5dv_mr_interleaved*) {
  RefuseMkey(q, "mlx5dv_wr_mr_interleaved");
}
void MrList(mlx5dv_qp_ex* q, mlx5dv_mkey*, uint32_t, uint16_t, ibv_sge*) { RefuseMkey(q, "mlx5dv_wr_mr_list"); }
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
