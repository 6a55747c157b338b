// The Dynamically Connected transport's rules in the core (mlx5dv_create_qp(3)): which QPs are
// DC QPs and what their creation and posting require. A DC QP is an IBV_QPT_DRIVER QP with a role:
//  - DCT (target): receives through an SRQ into its receive CQ; reachable by its DCT number
//    (a number of the host-wide QP number space) from any DCI presenting its 64-bit access key.
//  - DCI (initiator): has a send queue only; every work request names its destination
//    (AH + DCT number + access key, mlx5dv_wr_set_dc_addr(3)). Reliability, ordering and
//    completion semantics are RC's (IBA 9.7): one DCI is one ordered stream, a completion error
//    moves it to ERR and flushes what follows -- unless it was created with DCI streams
//    (mlx5dv_dci_streams): then an error stops only its stream until 2^log_num_errored streams
//    are in error (transport/dci_streams.h).
#pragma once

#include <cstdint>

#include "base/status.h"
#include "core/types.h"

namespace softverbs::core {

struct QpInitAttributes;

enum class DcRole : uint8_t { kNone, kDci, kDct };

// mlx5dv_dc_init_attr in the core's terms.
struct DcInit {
  DcRole role = DcRole::kNone;
  uint64_t dct_access_key = 0;
  // DCI with MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS: mlx5dv_dci_streams.
  bool has_streams = false;
  uint8_t log_num_concurrent = 0;
  uint8_t log_num_errored = 0;
};

// enum mlx5dv_qp_create_flags (mlx5dv_qp_init_attr.create_flags).
namespace mlx5_create_flag {
inline constexpr uint32_t kTunnelOffloads = 1u << 0;
inline constexpr uint32_t kTirAllowSelfLoopbackUc = 1u << 1;
inline constexpr uint32_t kTirAllowSelfLoopbackMc = 1u << 2;
inline constexpr uint32_t kDisableScatterToCqe = 1u << 3;
inline constexpr uint32_t kAllowScatterToCqe = 1u << 4;
inline constexpr uint32_t kPacketBasedCreditMode = 1u << 5;
inline constexpr uint32_t kSigPipelining = 1u << 6;
}  // namespace mlx5_create_flag

const char* DcRoleName(DcRole role);  // "DCI", "DCT", "none"

// The service type a QP's transport roles run: RC for RC QPs and for both DC roles (a DCI is
// RC-reliable; a DCT answers like an RC responder), the QP's own type otherwise.
QpType TransportTypeOf(QpType type, DcRole role);

// The provider-specific half of QP creation (mlx5dv_create_qp(3)): the DC rules and
// mlx5dv_qp_init_attr.create_flags. Called by Qp::Create after the ibv_create_qp_ex(3) checks
// that apply to every QP; may adjust `a.cap` (a DCT has no send queue, a DCI no receive queue).
Status CheckProviderInit(QpInitAttributes& a);

// What a work request of a DCI must carry: its destination, set by mlx5dv_wr_set_dc_addr on each
// WR (mlx5dv_wr_post(3)). Inline: asked on every post.
Status MissingDcDestination();
inline Status CheckDcWorkRequest(DcRole role, bool has_dc_destination) {
  return role != DcRole::kDci || has_dc_destination ? Status::Ok() : MissingDcDestination();
}

}  // namespace softverbs::core
