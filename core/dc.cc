#include "core/dc.h"

#include "base/strings.h"
#include "core/device_limits.h"
#include "core/qp.h"

namespace softverbs::core {

const char* DcRoleName(DcRole role) {
  switch (role) {
    case DcRole::kDci: return "DCI";
    case DcRole::kDct: return "DCT";
    case DcRole::kNone: break;
  }
  return "none";
}

QpType TransportTypeOf(QpType type, DcRole role) {
  // An XRC initiator runs RC's requester too (IBA annex A14: XRC is RC with the XRCETH).
  if (type == QpType::kXrcSend) return QpType::kRc;
  return type == QpType::kDriver && role != DcRole::kNone ? QpType::kRc : type;
}

namespace {

// mlx5dv_qp_init_attr.create_flags, each as mlx5dv_create_qp(3) describes it.
Status CheckMlx5CreateFlags(const QpInitAttributes& a) {
  using namespace mlx5_create_flag;
  uint32_t f = a.mlx5_create_flags;
  constexpr uint32_t kKnown = kTunnelOffloads | kTirAllowSelfLoopbackUc | kTirAllowSelfLoopbackMc |
                              kDisableScatterToCqe | kAllowScatterToCqe | kPacketBasedCreditMode | kSigPipelining;
  if (f & ~kKnown) return Invalid("mlx5dv create_flags has unknown bits " + Hex(f & ~kKnown));
  // Tunnel offloads (checksum/LRO of incoming tunnelled traffic) and the self-loopback
  // permissions act on a TIR: the receive side of a raw packet QP, RSS or not (the kernel's mlx5
  // takes them on IB_QPT_RAW_PACKET only; other types: EINVAL). Their effect: core/raw_qp.h.
  if (a.type == QpType::kRawPacket) f &= ~(kTunnelOffloads | kTirAllowSelfLoopbackUc | kTirAllowSelfLoopbackMc);
  if (f & kTunnelOffloads)
    return Invalid("MLX5DV_QP_CREATE_TUNNEL_OFFLOADS applies to raw packet (TIR) QPs only, not " +
                   std::string(QpTypeName(a.type)) + " QPs");
  if (f & (kTirAllowSelfLoopbackUc | kTirAllowSelfLoopbackMc))
    return Invalid("MLX5DV_QP_CREATE_TIR_ALLOW_SELF_LOOPBACK_UC/MC apply to raw packet (TIR) QPs only, not " +
                   std::string(QpTypeName(a.type)) + " QPs");
  // MLX5DV_QP_CREATE_SIG_PIPELINING: any QP type (providers/mlx5/verbs.c sets drain_sigerr
  // whatever the type); the requester stops at a signature error (transport/sig_pipelining.cc).
  if ((f & kDisableScatterToCqe) && (f & kAllowScatterToCqe))
    return Invalid("MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE and ALLOW_SCATTER_TO_CQE contradict each other");
  const QpType transport = TransportTypeOf(a.type, a.dc.role);
  // "Allow scatter to CQE for requester": the requester's READ/atomic responses, so a QP that can
  // issue them (RC or DCI). Scatter to CQE is a placement optimisation: softverbs has no CQE to
  // scatter into, both flags change no behaviour.
  if ((f & kAllowScatterToCqe) && (transport != QpType::kRc || a.dc.role == DcRole::kDct))
    return Invalid("MLX5DV_QP_CREATE_ALLOW_SCATTER_TO_CQE concerns a requester's READ/atomic responses: "
                   "RC QPs and DCIs only");
  // "end-to-end packet-based credit ... (IB spec. section 9.7.7.2)": the credits of an RC
  // connection. Accepted on RC (softverbs' RNR flow control is per message either way).
  if ((f & kPacketBasedCreditMode) && a.type != QpType::kRc)
    return Invalid("MLX5DV_QP_CREATE_PACKET_BASED_CREDIT_MODE is RC end-to-end flow control (IBA 9.7.7.2): "
                   "RC QPs only");
  return Status::Ok();
}

// mlx5dv_create_qp(3) dci_streams within mlx5dv_query_device's dci_streams_caps; mlx5
// (providers/mlx5/verbs.c) refuses either log above its cap with EINVAL.
Status CheckDciStreams(const DcInit& dc) {
  if (!dc.has_streams) return Status::Ok();
  if (dc.log_num_concurrent > DeviceLimits::kMaxLogDciStreams)
    return Invalid("dci_streams.log_num_concurent " + std::to_string(dc.log_num_concurrent) +
                   " exceeds dci_streams_caps.max_log_num_concurent " + std::to_string(DeviceLimits::kMaxLogDciStreams));
  if (dc.log_num_errored > DeviceLimits::kMaxLogDciErrored)
    return Invalid("dci_streams.log_num_errored " + std::to_string(dc.log_num_errored) +
                   " exceeds dci_streams_caps.max_log_num_errored " + std::to_string(DeviceLimits::kMaxLogDciErrored));
  return Status::Ok();
}

}  // namespace

Status CheckProviderInit(QpInitAttributes& a) {
  if (a.has_mlx5_create_flags) SV_RETURN_IF_ERROR(CheckMlx5CreateFlags(a));
  if (a.type != QpType::kDriver) {
    if (a.dc.role != DcRole::kNone) return Invalid("a DC QP (MLX5DV_QP_INIT_ATTR_MASK_DC) must have qp_type IBV_QPT_DRIVER");
    return Status::Ok();
  }
  switch (a.dc.role) {
    case DcRole::kNone:
      return Invalid("IBV_QPT_DRIVER QPs of softverbs0 are DC QPs: set MLX5DV_QP_INIT_ATTR_MASK_DC");
    case DcRole::kDct:
      // A DCT has no receive queue of its own: it receives through an SRQ, and sends nothing.
      if (a.srq == nullptr) return Invalid("a DCT receives through an SRQ: srq is NULL");
      if (a.has_send_ops_flags && a.send_ops_flags != 0)
        return Invalid("a DCT has no send queue: send_ops_flags must be 0");
      a.cap.max_send_wr = 0;
      a.cap.max_send_sge = 0;
      a.cap.max_inline_data = 0;
      return Status::Ok();
    case DcRole::kDci:
      // A DCI receives nothing: receive capabilities are ignored (and reported as 0).
      a.cap.max_recv_wr = 0;
      a.cap.max_recv_sge = 0;
      return CheckDciStreams(a.dc);
  }
  return Invalid("dc_type is not MLX5DV_DCTYPE_DCT or MLX5DV_DCTYPE_DCI");
}

Status MissingDcDestination() {
  return Invalid("a DCI work request needs its destination: call mlx5dv_wr_set_dc_addr after the "
                 "ibv_wr_* operation (mlx5dv_wr_post(3)); ibv_post_send cannot address a DCT");
}

}  // namespace softverbs::core
