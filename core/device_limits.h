// The limits softverbs0 advertises in ibv_query_device(_ex) and enforces everywhere.
// They are documented in docs/device.md; changing one here means changing it there.
#pragma once

#include <cstdint>

#include "core/types.h"
#include "fabric/host/host_registry.h"
#include "transport/work_request.h"

namespace softverbs::core {

struct DeviceLimits {
  // Host-wide object tables (fabric/host/registry sizes them).
  static constexpr uint32_t kMaxQp = fabric::HostRegistry::kQpSlots;
  static constexpr uint32_t kMaxMr = fabric::HostRegistry::kKeySlots;  // MRs and MWs share keys
  static constexpr uint32_t kMaxSrq = fabric::HostRegistry::kSrqSlots;
  // Per-object limits.
  static constexpr uint32_t kMaxQpWr = 32768;
  // Tag matching (tm_caps): a list of 255 tags ((1 << log_tag_matching_list_sz) - 1 on mlx5),
  // a rendezvous header of at most 64 bytes (MLX5_TM_MAX_RNDV_MSG_SIZE).
  static constexpr uint32_t kMaxTmTags = 255;
  static constexpr uint32_t kMaxRndvHdrSize = 64;
  // TSO on raw packet QPs (ibv_query_device_ex tso_caps): the largest payload of one WR and the
  // largest header it may carry.
  static constexpr uint32_t kMaxTso = 256 * 1024;
  static constexpr uint32_t kMaxTsoHeader = 256;
  static constexpr uint32_t kMaxSge = transport::kMaxSge;
  static constexpr uint32_t kMaxSgeRd = 32;
  static constexpr uint32_t kMaxInlineData = transport::kMaxInlineData;
  // max_cq, max_pd, max_ah: per process (core/object_quota.h).
  static constexpr uint32_t kMaxCq = 65536;
  // A CQ entry takes 192 bytes of the process's shared arena (transport/cq_ring.h: the completion
  // and the landing area of a small SEND), and a ring is touched all around as it turns, so a CQ
  // of max_cqe costs max_cqe * 192 bytes of resident memory: 192 MiB here, where mlx5's 2^22 - 1
  // would cost 768 MiB (4.3 s to create). Not lower: libfabric's verbs;ofi_rxm asks for CQs of
  // 2^18 entries, which every mlx5 device grants (docs/device.md).
  static constexpr uint32_t kMaxCqe = (1u << 20) - 1;
  static constexpr uint32_t kMaxPd = 65536;
  static constexpr uint32_t kMaxAh = 1u << 20;
  static constexpr uint32_t kMaxMw = kMaxMr;
  static constexpr uint32_t kMaxQpRdAtom = 16;      // max_qp_rd_atom (responder resources)
  static constexpr uint32_t kMaxQpInitRdAtom = 16;  // max_qp_init_rd_atom (initiator depth)
  static constexpr uint32_t kMaxSrqWr = 32768;
  static constexpr uint32_t kMaxSrqSge = 32;
  static constexpr uint32_t kMaxXrcd = 1024;
  static constexpr uint64_t kMaxMrSize = 1ull << 47;  // the x86-64 user address space
  // ibv_alloc_dm (core/dm.h): one allocation, a memfd of its own. ConnectX-6's MEMIC size.
  static constexpr uint64_t kMaxDmSize = 256 * 1024;
  // ibv_modify_cq moderation (cq_mod_caps; core/cq_moderation.h): mlx5's, a 16-bit count
  // (MLX5_MAX_CQ_COUNT) and a 12-bit period in microseconds (MLX5_MAX_CQ_PERIOD).
  static constexpr uint32_t kMaxCqModCount = 0xffff;
  static constexpr uint32_t kMaxCqModPeriodUs = 0xfff;
  // Packet pacing (packet_pacing_caps; transport/pacer.h): any rate up to the port's 100 Gb/s,
  // in kbps, on the QP types whose send queue is the requester (RC, UC, UD; core/qp_state_machine.cc).
  static constexpr uint32_t kPacingMinKbps = 1;
  static constexpr uint32_t kPacingMaxKbps = 100000000;
  static constexpr uint64_t kPageSizeCap = 0xfffff000;  // 4 KiB and larger pages
  static constexpr uint32_t kMaxMsgSize = 1u << 31;      // IBA: 2^31 bytes per message
  // DCI streams (mlx5dv_query_device dci_streams_caps; transport/dci_streams.h): a stream is its
  // 16-bit stream_id, and a software send queue has no per-stream hardware context to run out
  // of, so every stream id may be its own stream and every one may be in error.
  static constexpr uint8_t kMaxLogDciStreams = 16;
  static constexpr uint8_t kMaxLogDciErrored = 16;
  // Port 1.
  static constexpr uint8_t kPortCount = 1;
  static constexpr uint32_t kGidTableLen = 64;
  static constexpr uint16_t kPkeyTableLen = 1;
  static constexpr uint16_t kDefaultPkey = 0xffff;
  static constexpr Mtu kMaxMtu = Mtu::k4096;  // RoCE: PMTU <= 4096
  // How port 1 presents itself (ibv_query_port and the sysfs view render these): a 100 Gb/s
  // class Ethernet port, 4X lanes at EDR's 25 Gb/s, physically LinkUp (IBA 14.2.5.6 PortInfo).
  static constexpr uint8_t kActiveWidth = 2;    // 4X
  static constexpr uint8_t kActiveSpeed = 32;   // EDR
  static constexpr uint8_t kPhysStateLinkUp = 5;
  // CM_SUP (bit 16): the connection manager works on this port; IP_BASED_GIDS (bit 26): the
  // RoCEv2 GIDs are the addresses of the network namespace.
  static constexpr uint32_t kPortCapFlags = (1u << 16) | (1u << 26);
  static constexpr uint32_t kMaxRnrRetry = 7;  // 7 means "retry forever" (IBA 9.7.5.2.8)
  static constexpr uint32_t kMaxRetryCnt = 7;
  static constexpr uint32_t kMaxTimeout = 31;
  static constexpr uint32_t kMaxMinRnrTimer = 31;
};

}  // namespace softverbs::core
