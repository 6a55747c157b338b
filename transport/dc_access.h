// Who may reach a DCT, and what happens otherwise (the DC transport's responder-side rule).
//
// A DCT serves only DC initiators presenting its 64-bit access key; a DCI reaches only DCTs. A
// request that breaks this is silently discarded by the target: mlx5 hardware answers a DC
// access-key violation with no NAK, it only raises the DCT-key-violation event to the DCT's
// owner (MLX5_EVENT_TYPE_DCT_KEY_VIOLATION, Linux include/linux/mlx5/device.h), exactly as an IB
// responder discards a packet whose destination QP does not exist (IBA 9.6.1.1 / C9-54). The
// DCI therefore sees no response: it retries after its local ACK timeout, retry_cnt times, and
// completes the WR with IBV_WC_RETRY_EXC_ERR (IBA 9.7.6.1.3) -- the same completion as an
// unknown or destroyed DCT.
#pragma once

#include <cstdint>

#include "transport/qp_endpoint.h"

namespace softverbs::transport {

// Whether a request from a QP (a DCI when `from_dci`, presenting `access_key`) is accepted by
// `target`. Inline: the responder asks it for every request.
inline bool DcAdmits(const QpEndpoint& target, bool from_dci, uint64_t access_key) {
  if (!from_dci && !target.dct) return true;        // RC/UC/UD to a non-DC QP: not DC's business
  if (from_dci != (target.dct != 0)) return false;  // a DCI meets DCTs only, and only DCIs reach a DCT
  return target.dc_access_key == access_key;
}

}  // namespace softverbs::transport
