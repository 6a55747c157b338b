// mlx5dv queue entry points: QP (including DC: DCI/DCT), CQ, WQ and per-QP controls.
// mlx5dv_create_qp and mlx5dv_qp_ex_from_ibv_qp_ex are implemented in libibverbs (provider.h);
// DCI stream reset and mlx5dv_map_ah_to_qp too; mlx5 CQs, WQs and the other per-QP hardware
// controls refuse with EOPNOTSUPP.
#include "abi/mlx5dv/provider.h"
#include "abi/mlx5dv/refuse.h"

// --- constructors: "on error NULL will be returned and errno will be set" ----------------------

// mlx5dv_create_qp(3): RC/UC/UD and DC (DCI, DCT); core/dc.h has the rules.
// support: mlx5dv_create_qp | implemented | RC/UC/UD/DCI/DCT/RAW_PACKET; DCI streams within dci_streams_caps (EINVAL beyond); create_flags per man page (TUNNEL_OFFLOADS, TIR_ALLOW_SELF_LOOPBACK_UC/MC on raw packet QPs; SIG_PIPELINING: a failed signature check stops the SQ in SQD + IBV_EVENT_SQ_DRAINED); send_ops_flags MR_LIST/MR_INTERLEAVED/MKEY_CONFIGURE (RC); no RAW_WQE/MEMCPY
SV_EXPORT struct ibv_qp* mlx5dv_create_qp(struct ibv_context* context, struct ibv_qp_init_attr_ex* qp_attr,
                                          struct mlx5dv_qp_init_attr* mlx5_qp_attr) {
  return sv_private_mlx5_provider()->create_qp(context, qp_attr, mlx5_qp_attr);
}

// mlx5dv_create_cq(3): "NULL if the request fails and errno will be set".
SV_MLX5_NULL(mlx5dv_create_cq, struct ibv_cq_ex, struct ibv_context*, struct ibv_cq_init_attr_ex*,
             struct mlx5dv_cq_init_attr*)

// No man page; a constructor, so NULL + errno like ibv_create_wq(3).
SV_MLX5_NULL(mlx5dv_create_wq, struct ibv_wq, struct ibv_context*, struct ibv_wq_init_attr*,
             struct mlx5dv_wq_init_attr*)

// mlx5dv_wr_post(3) documents no failure: rdma-core only casts. A QP without ibv_qp_ex ops gets
// NULL + EINVAL rather than a table the caller would jump through.
// support: mlx5dv_qp_ex_from_ibv_qp_ex | implemented | wr_set_dc_addr(_stream: per-stream error isolation), wr_mr_list, wr_mr_interleaved, wr_mkey_configure + set_mkey_access_flags/_layout_list/_layout_interleaved (UMR: IBV_SEND_INLINE, completes MLX5DV_WC_UMR); set_mkey_sig_block (BLOCK_SIGNATURE mkeys: CRC32/CRC32C/CRC64_XP10/T10-DIF), crypto/raw/memcpy builders refuse the batch
SV_EXPORT struct mlx5dv_qp_ex* mlx5dv_qp_ex_from_ibv_qp_ex(struct ibv_qp_ex* qp) {
  return sv_private_mlx5_provider()->qp_ex_from_ibv_qp_ex(qp);
}

// --- per-QP controls: "0 on success, or the value of errno on failure" --------------------------

// mlx5dv_dci_stream_id_reset(3): "0 on success, or the value of errno on failure".
// support: mlx5dv_dci_stream_id_reset | implemented | an errored stream of a DCI in RTS serves again; EOPNOTSUPP outside RTS, EINVAL for a non-DCI, a DCI without streams or a stream not in error
SV_EXPORT int mlx5dv_dci_stream_id_reset(struct ibv_qp* qp, uint16_t stream_id) {
  return sv_private_mlx5_provider()->dci_stream_id_reset(qp, stream_id);
}

// mlx5dv_map_ah_to_qp(3): "Upon failure, the value of errno is returned".
// support: mlx5dv_map_ah_to_qp | implemented | bookkeeping (no congestion control algorithms to select); first mapping per AH kept, duplicates succeed; EINVAL for a qp_num not of the AH's context
SV_EXPORT int mlx5dv_map_ah_to_qp(struct ibv_ah* ah, uint32_t qp_num) {
  return sv_private_mlx5_provider()->map_ah_to_qp(ah, qp_num);
}

// mlx5dv_modify_qp_lag_port(3) / mlx5dv_query_qp_lag_port(3): "EOPNOTSUPP if not in LAG mode".
SV_MLX5_ERRNO(mlx5dv_modify_qp_lag_port, struct ibv_qp*, uint8_t)
SV_MLX5_ERRNO(mlx5dv_query_qp_lag_port, struct ibv_qp*, uint8_t*, uint8_t*)

// mlx5dv_modify_qp_udp_sport(3).
SV_MLX5_ERRNO(mlx5dv_modify_qp_udp_sport, struct ibv_qp*, uint16_t)

// mlx5dv_modify_qp_sched_elem(3): "0 is returned or the value of errno on a failure".
SV_MLX5_ERRNO(mlx5dv_modify_qp_sched_elem, struct ibv_qp*, const struct mlx5dv_sched_leaf*,
              const struct mlx5dv_sched_leaf*)

// mlx5dv_reserved_qpn_alloc(3): "EOPNOTSUPP if not supported".
SV_MLX5_ERRNO(mlx5dv_reserved_qpn_alloc, struct ibv_context*, uint32_t*)
SV_MLX5_ERRNO(mlx5dv_reserved_qpn_dealloc, struct ibv_context*, uint32_t)

// mlx5dv_qp_cancel_posted_send_wrs(3): "Number of work requests that were canceled, or -errno".
// support: mlx5dv_qp_cancel_posted_send_wrs | implemented | QP in SQD (signature pipelining stop or ibv_modify_qp): WRs of the wr_id not started become NOPs, completing as signaled (flushed in ERR); -EINVAL outside SQD or for a WR canceled already (as mlx5); -EOPNOTSUPP on raw packet QPs
SV_EXPORT int mlx5dv_qp_cancel_posted_send_wrs(struct mlx5dv_qp_ex* mqp, uint64_t wr_id) {
  return sv_private_mlx5_provider()->cancel_posted_send_wrs(mqp, wr_id);
}
