// The classic BPF program that steers a RoCEv2 datagram to the member of a SO_REUSEPORT group
// that owns its destination QP.
//
// The kernel runs a reuseport program on the UDP payload (the skb is pulled past the UDP header)
// and picks reuse->socks[return value]; a value >= the group's size falls back to the hash
// (net/core/sock_reuseport.c: run_bpf_filter, reuseport_select_sock). cBPF has no maps, so the
// QPN -> slot table is compiled into the program as a binary search of jump instructions.
#pragma once

#include <linux/filter.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace softverbs::fabric::wire {

// QPNs [first, last] belong to the group member at kernel slot `index`.
struct QpnRange {
  uint32_t first = 0;
  uint32_t last = 0;
  uint32_t index = 0;
  friend bool operator==(const QpnRange&, const QpnRange&) = default;
};

// Returned for QPNs no range covers and for datagrams too short to hold a BTH DestQP: any value
// >= the group's size makes the kernel fall back to its hash.
inline constexpr uint32_t kSteerFallback = 0xffffffffu;
// The classic BPF limit (BPF_MAXINSNS, include/uapi/linux/bpf_common.h).
inline constexpr size_t kMaxSteeringInstructions = BPF_MAXINSNS;
// BTH DestQP is payload bytes 5..7 (IBA 9.2, Figure 27); the word at 4 holds it in its low 24 bits.
inline constexpr uint32_t kDestQpWordOffset = 4;
inline constexpr uint32_t kQpnMask = 0xffffff;

// The program for `ranges` (any order; QPNs above 24 bits are ignored; where ranges overlap, the
// one that starts first wins). About two instructions per range boundary: roughly 1000 ranges
// with gaps between them, or 2000 adjacent ones, fit in kMaxSteeringInstructions; the caller
// checks before attaching.
std::vector<sock_filter> BuildSteeringProgram(const std::vector<QpnRange>& ranges);

}  // namespace softverbs::fabric::wire
