// Work requests and completion codes in the transport's terms. Values equal rdma-core's enums
// (ibv_wr_opcode, ibv_send_flags, ibv_wc_opcode, ibv_wc_status, ibv_wc_flags); abi/ proves it in
// type_checks.cc and converts by copying fields.
#pragma once

#include <cstdint>
#include <memory>

namespace softverbs::transport {

class InternalWork;  // transport/rendezvous.h

inline constexpr uint32_t kMaxSge = 32;            // the device's max_sge / max_recv_sge
inline constexpr uint32_t kMaxInlineData = 1024;    // the device's max_inline_data

struct Sge {
  uint64_t addr;
  uint32_t length;
  uint32_t lkey;
};

// ibv_wr_opcode
enum class WrOpcode : uint32_t {
  kRdmaWrite = 0,
  kRdmaWriteWithImm = 1,
  kSend = 2,
  kSendWithImm = 3,
  kRdmaRead = 4,
  kAtomicCmpSwp = 5,
  kAtomicFetchAdd = 6,
  kLocalInv = 7,
  kBindMw = 8,
  kSendWithInv = 9,
  kTso = 10,
  kDriver1 = 11,  // mlx5: a UMR configuring an indirect mkey (transport/indirect_key.h)
  kAtomicWrite = 15,
};

// Opcodes whose message carries the local bytes, and so may carry them inline (ibv_post_send(3):
// IBV_SEND_INLINE is "valid only for the Send and RDMA Write opcodes"; mlx5 ignores it on READ and
// atomics, whose SGEs are written, not sent). ATOMIC WRITE (IBA 1.5 9.4.6) sends its 8 bytes
// like an RDMA WRITE: ibv_wr_atomic_write passes them inline.
inline bool CarriesData(WrOpcode op) {
  return op == WrOpcode::kSend || op == WrOpcode::kSendWithImm || op == WrOpcode::kSendWithInv ||
         op == WrOpcode::kRdmaWrite || op == WrOpcode::kRdmaWriteWithImm || op == WrOpcode::kAtomicWrite;
}

// ibv_send_flags
namespace send_flag {
inline constexpr uint32_t kFence = 1u << 0;
inline constexpr uint32_t kSignaled = 1u << 1;
inline constexpr uint32_t kSolicited = 1u << 2;
inline constexpr uint32_t kInline = 1u << 3;
inline constexpr uint32_t kIpCsum = 1u << 4;
}  // namespace send_flag

// ibv_wc_opcode
namespace wc_opcode {
inline constexpr uint32_t kSend = 0;
inline constexpr uint32_t kRdmaWrite = 1;
inline constexpr uint32_t kRdmaRead = 2;
inline constexpr uint32_t kCompSwap = 3;
inline constexpr uint32_t kFetchAdd = 4;
inline constexpr uint32_t kBindMw = 5;
inline constexpr uint32_t kLocalInv = 6;
inline constexpr uint32_t kAtomicWrite = 9;  // IBV_WC_ATOMIC_WRITE
inline constexpr uint32_t kRecv = 1u << 7;
inline constexpr uint32_t kRecvRdmaWithImm = kRecv + 1;
// Tag matching (ibv_post_srq_ops(3)): list operations and tagged receives of a TM SRQ.
inline constexpr uint32_t kTmAdd = kRecv + 2, kTmDel = kRecv + 3, kTmSync = kRecv + 4, kTmRecv = kRecv + 5,
                          kTmNoTag = kRecv + 6;
inline constexpr uint32_t kDriver1 = kRecv + 7;  // IBV_WC_DRIVER1 = MLX5DV_WC_UMR
}  // namespace wc_opcode

// ibv_wc_status
namespace wc_status {
inline constexpr uint32_t kSuccess = 0;
inline constexpr uint32_t kLocLenErr = 1;
inline constexpr uint32_t kLocQpOpErr = 2;
inline constexpr uint32_t kLocProtErr = 4;
inline constexpr uint32_t kWrFlushErr = 5;
inline constexpr uint32_t kMwBindErr = 6;
inline constexpr uint32_t kRemInvReqErr = 9;
inline constexpr uint32_t kRemAccessErr = 10;
inline constexpr uint32_t kRemOpErr = 11;
inline constexpr uint32_t kRetryExcErr = 12;
inline constexpr uint32_t kRnrRetryExcErr = 13;
inline constexpr uint32_t kFatalErr = 19;
inline constexpr uint32_t kTmErr = 22;
inline constexpr uint32_t kTmRndvIncomplete = 23;
}  // namespace wc_status

// ibv_wc_flags
namespace wc_flag {
inline constexpr uint32_t kGrh = 1u << 0;
inline constexpr uint32_t kWithImm = 1u << 1;
inline constexpr uint32_t kWithInv = 1u << 3;
inline constexpr uint32_t kTmSyncReq = 1u << 4, kTmMatch = 1u << 5, kTmDataValid = 1u << 6;
}  // namespace wc_flag

// The UD destination of a send (from its address handle and the WR).
struct UdDestination {
  uint8_t dgid[16];
  uint8_t sgid[16];  // the local GID the AH's sgid_index names
  uint32_t flow_label;
  uint8_t traffic_class;
  uint8_t hop_limit;
  uint32_t remote_qpn;
  uint32_t remote_qkey;
  bool on_host;  // dgid is one of this host's GIDs (the same-host fabric reaches it)
};

// The DC destination of a DCI's work request (mlx5dv_wr_set_dc_addr(3)): the DCT number, the
// access key presented to it, and the AH's address, which decides the fabric; the stream of
// mlx5dv_wr_set_dc_addr_stream (0 for mlx5dv_wr_set_dc_addr: mlx5dv_wr_post(3)).
struct DcDestination {
  bool set = false;
  uint16_t stream_id = 0;
  uint32_t remote_dctn = 0;
  uint64_t access_key = 0;
  uint8_t dgid[16] = {};
  bool on_host = false;  // dgid is one of this host's GIDs
};

// A memory window bind (IBV_WR_BIND_MW, ibv_bind_mw: struct ibv_mw_bind_info and the R_Key the
// window takes), executed by transport/window_key.h.
struct BindRequest {
  uint32_t window = 0;  // WindowKey::handle() of the window to bind
  uint32_t rkey = 0;    // its R_Key once bound
  uint32_t mr_key = 0;  // the MR's lkey; 0 (no MR) only with length 0
  uint64_t addr = 0;    // first byte, in the MR's address space (its iova)
  uint64_t length = 0;  // 0: a type 1 window is unbound
  uint32_t access = 0;  // mw_access_flags (ibv_access_flags)
};

// One send work request (ibv_send_wr). Local data is either the SGE list (checked against the
// poster's keys) or inline bytes copied at post time (IBV_SEND_INLINE: the buffer may be reused as
// soon as ibv_post_send returns).
//
// Every post constructs one (and the requester another, inside its queue entry): the fields
// with defaults come first, next to each other, so that constructing one is a few wide stores;
// the SGE array and the UD destination, which are read only up to num_sge and on UD QPs, are
// left for the poster to fill.
struct SendWr {
  uint64_t wr_id = 0;
  WrOpcode opcode = WrOpcode::kSend;
  uint32_t flags = 0;     // send_flag
  uint32_t imm_data = 0;  // network order, as the application gave it
  uint32_t invalidate_rkey = 0;  // LOCAL_INV, SEND_WITH_INV: the R_Key to invalidate
  uint32_t num_sge = 0;
  uint32_t inline_length = 0;  // with kInline: the bytes are in inline_data
  uint8_t* inline_data = nullptr;
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  uint32_t xrc_srqn = 0;  // XRC_SEND: the XRC SRQ at the target (wr.qp_type.xrc.remote_srqn)
  uint64_t compare_add = 0;
  uint64_t swap = 0;
  // kTso (raw packet QPs): the packet header, copied at post time, and the segment size.
  const uint8_t* tso_header = nullptr;
  uint16_t tso_header_size = 0;
  uint16_t tso_mss = 0;
  // kDriver1: set by the mlx5dv_wr_mr_* builders, whose UMR layout is the inline bytes
  // (transport/indirect_key.h); ibv_post_send cannot post one.
  bool umr = false;
  // Set on a work request the QP runs for itself (the tag matching rendezvous READ and FIN,
  // transport/rendezvous.h): its completion goes there, never to the send CQ.
  std::shared_ptr<InternalWork> internal;
  DcDestination dc;  // DCI only
  BindRequest bind;  // BIND_MW only
  Sge sge[kMaxSge];  // the first num_sge
  UdDestination ud;  // UD only
};

// A SEND, SEND with immediate, RDMA WRITE, READ or atomic with one SGE: the work requests the
// requester may run at post time on a lane of its own (Requester::PostOnLane), converted from
// ibv_send_wr without the ~700 bytes of a SendWr. With kInline on a SEND or WRITE, sge.addr holds
// the bytes (read now, as ibv_post_send(3) reads inline data) and sge.lkey is not looked at.
struct LaneWr {
  uint64_t wr_id;
  WrOpcode opcode;
  uint32_t flags;  // send_flag
  Sge sge;
  uint64_t remote_addr;  // WRITE, READ, atomics
  uint32_t rkey;
  uint32_t imm_data;     // SEND with immediate (network order)
  uint64_t compare_add;  // atomics
  uint64_t swap;         // CMP_AND_SWP
};

}  // namespace softverbs::transport
