// The core's own vocabulary for verbs objects. abi/ is the only layer that sees rdma-core's
// structs; it converts them to these types. Enumerators carry the numeric values of the matching
// rdma-core enums so the conversion is a cast; abi/verbs/type_checks.cc static_asserts every one.
// They are as wide as a C enum, so an out-of-range value from a caller survives the cast and is
// refused by the checks instead of being truncated into a valid one.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace softverbs::core {

// ibv_qp_state
enum class QpState : uint32_t { kReset = 0, kInit, kRtr, kRts, kSqd, kSqe, kErr, kUnknown };

// ibv_qp_type (IBV_QPT_DRIVER is 0xff)
enum class QpType : uint32_t {
  kRc = 2,
  kUc = 3,
  kUd = 4,
  kRawPacket = 8,
  kXrcSend = 9,
  kXrcRecv = 10,
  kDriver = 0xff,
};

// ibv_mtu
enum class Mtu : uint32_t { k256 = 1, k512, k1024, k2048, k4096 };
inline uint32_t MtuBytes(Mtu m) { return 128u << static_cast<int>(m); }

// ibv_mig_state
enum class MigState : uint32_t { kMigrated = 0, kRearm, kArmed };

// ibv_qp_attr_mask bits.
namespace attr {
inline constexpr uint32_t kState = 1u << 0;
inline constexpr uint32_t kCurState = 1u << 1;
inline constexpr uint32_t kEnSqdAsyncNotify = 1u << 2;
inline constexpr uint32_t kAccessFlags = 1u << 3;
inline constexpr uint32_t kPkeyIndex = 1u << 4;
inline constexpr uint32_t kPort = 1u << 5;
inline constexpr uint32_t kQkey = 1u << 6;
inline constexpr uint32_t kAv = 1u << 7;
inline constexpr uint32_t kPathMtu = 1u << 8;
inline constexpr uint32_t kTimeout = 1u << 9;
inline constexpr uint32_t kRetryCnt = 1u << 10;
inline constexpr uint32_t kRnrRetry = 1u << 11;
inline constexpr uint32_t kRqPsn = 1u << 12;
inline constexpr uint32_t kMaxQpRdAtomic = 1u << 13;
inline constexpr uint32_t kAltPath = 1u << 14;
inline constexpr uint32_t kMinRnrTimer = 1u << 15;
inline constexpr uint32_t kSqPsn = 1u << 16;
inline constexpr uint32_t kMaxDestRdAtomic = 1u << 17;
inline constexpr uint32_t kPathMigState = 1u << 18;
inline constexpr uint32_t kCap = 1u << 19;
inline constexpr uint32_t kDestQpn = 1u << 20;
// bits 21..24 are kernel-internal in rdma-core (IB_QP_RESERVED1..4): never valid from userspace.
inline constexpr uint32_t kRateLimit = 1u << 25;
inline constexpr uint32_t kAllValid = ((1u << 21) - 1) | kRateLimit;
}  // namespace attr

// ibv_access_flags
namespace access {
inline constexpr uint32_t kLocalWrite = 1u << 0;
inline constexpr uint32_t kRemoteWrite = 1u << 1;
inline constexpr uint32_t kRemoteRead = 1u << 2;
inline constexpr uint32_t kRemoteAtomic = 1u << 3;
inline constexpr uint32_t kMwBind = 1u << 4;
inline constexpr uint32_t kZeroBased = 1u << 5;
inline constexpr uint32_t kOnDemand = 1u << 6;
inline constexpr uint32_t kHugetlb = 1u << 7;
// Bits 20..29 are "optional" access flags: a device that does not know one ignores it
// (IBV_ACCESS_OPTIONAL_RANGE in verbs.h). Relaxed ordering is the first of them.
inline constexpr uint32_t kRelaxedOrdering = 1u << 20;
inline constexpr uint32_t kOptionalRange = 0x3ff00000u;
}  // namespace access

using Gid = std::array<uint8_t, 16>;

// ibv_ah_attr with its ibv_global_route.
struct AddressVector {
  Gid dgid{};
  uint32_t flow_label = 0;
  uint8_t sgid_index = 0;
  uint8_t hop_limit = 0;
  uint8_t traffic_class = 0;
  uint16_t dlid = 0;
  uint8_t sl = 0;
  uint8_t src_path_bits = 0;
  uint8_t static_rate = 0;
  bool is_global = false;
  uint8_t port_num = 0;
};

// ibv_qp_cap
struct QpCaps {
  uint32_t max_send_wr = 0;
  uint32_t max_recv_wr = 0;
  uint32_t max_send_sge = 0;
  uint32_t max_recv_sge = 0;
  uint32_t max_inline_data = 0;
};

// ibv_qp_attr: what ibv_modify_qp sets and ibv_query_qp returns.
struct QpAttributes {
  QpState qp_state = QpState::kReset;
  QpState cur_qp_state = QpState::kReset;
  Mtu path_mtu = Mtu::k1024;
  MigState path_mig_state = MigState::kMigrated;
  uint32_t qkey = 0;
  uint32_t rq_psn = 0;
  uint32_t sq_psn = 0;
  uint32_t dest_qp_num = 0;
  uint32_t qp_access_flags = 0;
  QpCaps cap;
  AddressVector ah_attr;
  AddressVector alt_ah_attr;
  uint16_t pkey_index = 0;
  uint16_t alt_pkey_index = 0;
  uint8_t en_sqd_async_notify = 0;
  uint8_t sq_draining = 0;
  uint8_t max_rd_atomic = 0;
  uint8_t max_dest_rd_atomic = 0;
  uint8_t min_rnr_timer = 0;
  uint8_t port_num = 0;
  uint8_t timeout = 0;
  uint8_t retry_cnt = 0;
  uint8_t rnr_retry = 0;
  uint8_t alt_port_num = 0;
  uint8_t alt_timeout = 0;
  uint32_t rate_limit = 0;
  // Set with rate_limit by ibv_modify_qp_rate_limit(3) only (ibv_modify_qp leaves them 0, the
  // device's defaults): the burst and typical packet sizes in bytes.
  uint32_t max_burst_sz = 0;
  uint16_t typical_pkt_sz = 0;
};

// "RC", "UD", ... and "INIT", "RTR", ... as the log lines print them.
const char* QpTypeName(QpType type);
const char* QpStateName(QpState state);

}  // namespace softverbs::core
