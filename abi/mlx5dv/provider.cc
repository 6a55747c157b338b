// The mlx5dv entry points that act on softverbs' verbs objects, behind SvMlx5Provider
// (provider.h): identity, device caps, mlx5dv_create_qp, mlx5dv_qp_ex_from_ibv_qp_ex, DCI stream
// reset and mlx5dv_map_ah_to_qp.
// Compiled into libibverbs.so.1.
#include "abi/mlx5dv/provider.h"
#include "core/mkey_signature.h"

#include <cstring>

#include "abi/common/errno_convention.h"
#include "abi/common/export.h"
#include "abi/verbs/objects.h"
#include "base/log.h"
#include "core/device.h"
#include "core/device_limits.h"

namespace softverbs::abi {
namespace {

// mlx5dv_is_supported(3): "Returns true if device is implemented by mlx5 provider". softverbs0
// says so only under its mlx5 identity (SOFTVERBS_MLX5_IDENTITY=1, docs/device.md); the mlx5dv
// verbs below work on it either way.
bool IsSupported(ibv_device*) { return core::Identity().mlx5_identity; }

// mlx5dv_query_device(3). Every capability block the caller asks for that softverbs can answer
// is answered, most of them with "none" (zero caps); comp_mask returns the blocks answered.
int QueryDevice(ibv_context*, mlx5dv_context* out) {
  constexpr uint64_t kAnswered = MLX5DV_CONTEXT_MASK_CQE_COMPRESION | MLX5DV_CONTEXT_MASK_SWP |
                                 MLX5DV_CONTEXT_MASK_STRIDING_RQ | MLX5DV_CONTEXT_MASK_TUNNEL_OFFLOADS |
                                 MLX5DV_CONTEXT_MASK_DC_ODP_CAPS | MLX5DV_CONTEXT_MASK_SIGNATURE_OFFLOAD |
                                 MLX5DV_CONTEXT_MASK_DCI_STREAMS | MLX5DV_CONTEXT_MASK_WR_MEMCPY_LENGTH |
                                 MLX5DV_CONTEXT_MASK_CRYPTO_OFFLOAD;
  const uint64_t asked = out->comp_mask;
  out->version = 0;
  // The one optional behaviour of mlx5dv_create_qp(3) it offers: packet-based credits (RC).
  out->flags = MLX5DV_CONTEXT_FLAGS_PACKET_BASED_CREDIT_MODE;
  out->comp_mask = asked & kAnswered;
  if (asked & MLX5DV_CONTEXT_MASK_CQE_COMPRESION) out->cqe_comp_caps = {};     // no compressed CQEs
  if (asked & MLX5DV_CONTEXT_MASK_SWP) out->sw_parsing_caps = {};              // no software parsing offload
  if (asked & MLX5DV_CONTEXT_MASK_STRIDING_RQ) out->striding_rq_caps = {};     // no WQs
  // MLX5DV_QP_CREATE_TUNNEL_OFFLOADS on raw packet QPs: VXLAN's inner checksums and inner RSS.
  if (asked & MLX5DV_CONTEXT_MASK_TUNNEL_OFFLOADS)
    out->tunnel_offloads_caps = MLX5DV_RAW_PACKET_CAP_TUNNELED_OFFLOAD_VXLAN;
  // ODP through a DCT: the same key rule as RC (core/mr.h, transport/key_table.h).
  if (asked & MLX5DV_CONTEXT_MASK_DC_ODP_CAPS)
    out->dc_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ |
                       IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV;
  // Block signatures computed in software (core/mkey_signature.h): every block size, T10-DIF
  // with CRC or checksum guards, CRC32, CRC32C and CRC64_XP10.
  if (asked & MLX5DV_CONTEXT_MASK_SIGNATURE_OFFLOAD) {
    const core::SigCaps caps = core::SignatureCaps();
    out->sig_caps = {caps.block_size, caps.block_prot, caps.t10dif_bg, caps.crc_type};
  }
  // DCI streams (transport/dci_streams.h): every 16-bit stream_id may be a stream of its own.
  if (asked & MLX5DV_CONTEXT_MASK_DCI_STREAMS)
    out->dci_streams_caps = {core::DeviceLimits::kMaxLogDciStreams, core::DeviceLimits::kMaxLogDciErrored};
  if (asked & MLX5DV_CONTEXT_MASK_WR_MEMCPY_LENGTH) out->max_wr_memcpy_length = 0;
  if (asked & MLX5DV_CONTEXT_MASK_CRYPTO_OFFLOAD) out->crypto_caps = {};
  return 0;
}

// mlx5dv_create_qp(3): ibv_create_qp_ex(3) plus mlx5dv_qp_init_attr. "on error NULL will be
// returned and errno will be set".
ibv_qp* CreateQp(ibv_context* context, ibv_qp_init_attr_ex* attr, mlx5dv_qp_init_attr* mlx5) {
  constexpr const char* kVerb = "mlx5dv_create_qp";
  const std::string object = context->device->name;
  core::QpInitAttributes provider;
  uint64_t mlx5_send_ops = 0;
  if (mlx5 != nullptr) {
    constexpr uint64_t kKnown = MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS | MLX5DV_QP_INIT_ATTR_MASK_DC |
                                MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS | MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS;
    if (mlx5->comp_mask & ~kKnown)
      return ReturnNull<ibv_qp>(kVerb, object, Invalid("mlx5_qp_attr->comp_mask has unknown bits " +
                                                      std::to_string(mlx5->comp_mask & ~kKnown)));
    if (mlx5->comp_mask & MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS) {
      provider.has_mlx5_create_flags = true;
      provider.mlx5_create_flags = mlx5->create_flags;
    }
    if (mlx5->comp_mask & MLX5DV_QP_INIT_ATTR_MASK_DC) {
      switch (mlx5->dc_init_attr.dc_type) {
        case MLX5DV_DCTYPE_DCT:
          provider.dc.role = core::DcRole::kDct;
          provider.dc.dct_access_key = mlx5->dc_init_attr.dct_access_key;
          break;
        case MLX5DV_DCTYPE_DCI:
          provider.dc.role = core::DcRole::kDci;
          // dci_streams shares a union with dct_access_key: mlx5 reads it for DCIs only, and
          // core/dc.cc checks it against dci_streams_caps (EINVAL beyond them, as mlx5).
          if (mlx5->comp_mask & MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS) {
            provider.dc.has_streams = true;
            provider.dc.log_num_concurrent = mlx5->dc_init_attr.dci_streams.log_num_concurent;
            provider.dc.log_num_errored = mlx5->dc_init_attr.dci_streams.log_num_errored;
          }
          break;
        default:
          return ReturnNull<ibv_qp>(kVerb, object, Invalid("dc_init_attr.dc_type " +
                                    std::to_string(mlx5->dc_init_attr.dc_type) + " is not DCT (1) or DCI (2)"));
      }
    }
    // MR_INTERLEAVED, MR_LIST and MKEY_CONFIGURE configure indirect mkeys (mlx5dv_create_mkey);
    // RAW_WQE and MEMCPY need mlx5 WQEs and a DMA engine.
    constexpr uint64_t kOffered =
        MLX5DV_QP_EX_WITH_MR_INTERLEAVED | MLX5DV_QP_EX_WITH_MR_LIST | MLX5DV_QP_EX_WITH_MKEY_CONFIGURE;
    if (mlx5->comp_mask & MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS) {
      if (mlx5->send_ops_flags & ~kOffered)
        return ReturnNull<ibv_qp>(kVerb, object,
                                  NotSupported("mlx5 send_ops_flags " + std::to_string(mlx5->send_ops_flags & ~kOffered) +
                                               ": RAW_WQE and MEMCPY are not offered"));
      // mlx5dv_wr_post(3) lists the mkey builders under "RC QPs".
      if (mlx5->send_ops_flags != 0 && attr->qp_type != IBV_QPT_RC)
        return ReturnNull<ibv_qp>(kVerb, object,
                                  Invalid("MLX5DV_QP_EX_WITH_MR_INTERLEAVED/MR_LIST/MKEY_CONFIGURE are for RC QPs "
                                          "(mlx5dv_wr_post(3))"));
      // The mlx5dv ops extend the ibv_qp_ex batch: they need the QP's ibv_qp_ex ops.
      if (mlx5->send_ops_flags != 0 && !(attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS))
        return ReturnNull<ibv_qp>(kVerb, object,
                                  Invalid("mlx5 send_ops_flags need IBV_QP_INIT_ATTR_SEND_OPS_FLAGS (mlx5dv_wr_post(3): "
                                          "\"a QP must be created using mlx5dv_create_qp() with send_ops_flags of "
                                          "struct ibv_qp_init_attr_ex set\")"));
      mlx5_send_ops = mlx5->send_ops_flags;
    }
  }
  ibv_qp* qp = CreateQpWith(kVerb, context, attr, &provider);
  if (qp != nullptr) ToSv(qp)->mlx5_send_ops_flags = mlx5_send_ops;
  return qp;
}

// mlx5dv_qp_ex_from_ibv_qp_ex(3): the mlx5dv send-op table of a QP that has ibv_qp_ex ops.
mlx5dv_qp_ex* QpExFromIbvQpEx(ibv_qp_ex* qpx) {
  // perftest passes what ibv_qp_to_qp_ex returned for its DCT (NULL: a DCT has no send ops) and
  // never uses the result; rdma-core's cast does not dereference it either.
  if (qpx == nullptr)
    return ReturnNull<mlx5dv_qp_ex>("mlx5dv_qp_ex_from_ibv_qp_ex", "qp NULL", Invalid("qp is NULL"));
  SvQp* qp = ToSv(qpx);
  if (!qp->has_qp_ex)
    return ReturnNull<mlx5dv_qp_ex>("mlx5dv_qp_ex_from_ibv_qp_ex", Name(&qpx->qp_base),
                                    Invalid("the QP was created without IBV_QP_INIT_ATTR_SEND_OPS_FLAGS: "
                                            "it has no ibv_qp_ex ops (mlx5dv_create_qp(3) NOTES)"));
  return &qp->dv;
}

// mlx5dv_dci_stream_id_reset(3): "0 on success, or the value of errno on failure".
int DciStreamIdReset(ibv_qp* qp, uint16_t stream_id) {
  constexpr const char* kVerb = "mlx5dv_dci_stream_id_reset";
  if (qp == nullptr) return ReturnErrno(kVerb, "qp NULL", Invalid("qp is NULL"));
  SvQp* sv = ToSv(qp);
  if (!sv->core) return ReturnErrno(kVerb, Name(qp), Invalid("an ibv_open_qp handle is not a DCI"));
  const Status status = sv->core->ResetDciStream(stream_id);
  return status.ok() ? 0 : ReturnErrno(kVerb, Name(qp), status);
}

// mlx5dv_map_ah_to_qp(3): maps the AH's destination to the congestion control the QP's ECE
// negotiated. softverbs has no congestion control algorithms to choose between (ibv_set_ece
// offers no options), so the mapping is the bookkeeping mlx5 keeps: one per AH, the first wins
// ("A duplicate mapping to the same address handle is ignored [...] return success"). mlx5
// refuses an AH without a GRH (EOPNOTSUPP); a RoCE AH always has one (core/ah.h).
int MapAhToQp(ibv_ah* ah, uint32_t qp_num) {
  constexpr const char* kVerb = "mlx5dv_map_ah_to_qp";
  if (ah == nullptr) return ReturnErrno(kVerb, "ah NULL", Invalid("ah is NULL"));
  const std::string object = "ah " + std::to_string(ah->handle);
  // The firmware takes the congestion control from QP qp_num: it must be a QP of this context.
  if (!ToSv(ah->context)->core->HasQp(qp_num))
    return ReturnErrno(kVerb, object, Invalid("qp_num " + std::to_string(qp_num) + " is not a QP of this context"));
  uint32_t none = 0;
  ToSv(ah)->mapped_qpn.compare_exchange_strong(none, qp_num);
  return 0;
}

// mlx5dv_qp_cancel_posted_send_wrs(3): "Number of work requests that were canceled, or -errno".
int CancelPostedSendWrs(mlx5dv_qp_ex* mqp, uint64_t wr_id) {
  constexpr const char* kVerb = "mlx5dv_qp_cancel_posted_send_wrs";
  if (mqp == nullptr) return ReturnNegErrno(kVerb, "qp NULL", Invalid("mqp is NULL"));
  SvQp* sv = ToSv(mqp);
  Result<uint32_t> canceled = sv->core->CancelPostedSends(wr_id);
  if (!canceled.ok()) return ReturnNegErrno(kVerb, Name(&sv->qpx.qp_base), canceled.status());
  return static_cast<int>(canceled.value());
}

constexpr SvMlx5Provider kProvider = {sizeof(SvMlx5Provider), IsSupported, QueryDevice,      CreateQp,
                                      QpExFromIbvQpEx,        CreateMkey,  DestroyMkey,      MkeyCheck,
                                      DciStreamIdReset,       MapAhToQp,   CancelPostedSendWrs};

}  // namespace
}  // namespace softverbs::abi

// libmlx5.so.1's bridge (provider.h); listed in docs/support-matrix.md as a private export.
SV_EXPORT const SvMlx5Provider* sv_private_mlx5_provider(void) { return &softverbs::abi::kProvider; }
