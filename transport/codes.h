// The codes the transport reads in QP endpoints and work requests: rdma-core's enum values
// (ibv_qp_type, ibv_qp_state, ibv_access_flags), which the core writes there. The transport's
// one copy of them (core/types.h holds the core's, a layer above).
#pragma once

#include <cstdint>

namespace softverbs::transport {

namespace qp_type {  // enum ibv_qp_type
inline constexpr uint32_t kRc = 2, kUc = 3, kUd = 4, kXrcRecv = 10;
}  // namespace qp_type

namespace qp_state {  // enum ibv_qp_state
inline constexpr uint32_t kReset = 0, kInit = 1, kRtr = 2, kRts = 3, kSqd = 4, kSqe = 5, kErr = 6;
}  // namespace qp_state

namespace access_bit {  // enum ibv_access_flags
inline constexpr uint32_t kLocalWrite = 1u << 0, kRemoteWrite = 1u << 1, kRemoteRead = 1u << 2,
                          kRemoteAtomic = 1u << 3, kMwBind = 1u << 4, kZeroBased = 1u << 5,
                          kOnDemand = 1u << 6;
}  // namespace access_bit

}  // namespace softverbs::transport
