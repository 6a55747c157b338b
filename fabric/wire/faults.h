// Deterministic fault injection on datagrams: loss, duplication, reordering, delay, corruption.
//
// Every decision is a pure function of (seed, direction, DestQP, the datagram's index in that
// direction and QP's stream, fault kind): splitmix64 over a counter, never a clock or a shared
// random state. The same seed and the same datagrams in each stream give the same decisions, however
// streams interleave and however long anything takes; only *when* a delayed datagram leaves
// depends on the clock.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "fabric/wire/fault_spec.h"
#include "fabric/wire/udp_address.h"

namespace softverbs::fabric::wire {

struct Datagram {
  UdpAddress peer;          // the destination (tx) or the source (rx)
  uint16_t local_port = 0;  // tx: the source port to send from (0: the port's own)
  std::vector<uint8_t> bytes;
  UdpAddress source;        // softverbs-relay --transparent: the original sender, kept as the source
};

struct FaultStats {
  uint64_t seen = 0, lost = 0, duplicated = 0, reordered = 0, delayed = 0, corrupted = 0;
};

// The splitmix64 finaliser (Steele, Lea, Flood 2014; the constants of java.util.SplittableRandom).
inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// BTH DestQP (payload bytes 5..7, big-endian); nullopt if the datagram is shorter than a BTH.
std::optional<uint32_t> DestQpOf(std::span<const uint8_t> payload);

class FaultInjector {
 public:
  explicit FaultInjector(FaultSpec spec);

  bool Affects(Direction dir) const { return affects_[static_cast<int>(dir)]; }

  // Passes one datagram through the faults of its direction and appends to `out` what leaves now:
  // nothing (lost or held), the datagram, or two copies; then any held datagrams of the same stream
  // that this one releases (a reordered datagram follows `reorder_after` later ones).
  void Process(Direction dir, Datagram dg, uint64_t now_ns, std::vector<Datagram>& out);
  // Appends the held datagrams of `dir` whose time has come, earliest first.
  void ReleaseDue(Direction dir, uint64_t now_ns, std::vector<Datagram>& out);
  // The earliest time a held datagram is due; UINT64_MAX if none is held.
  uint64_t NextDeadline() const;
  size_t held() const { return held_.size(); }

  const FaultStats& stats(Direction dir) const { return stats_[static_cast<int>(dir)]; }
  const FaultSpec& spec() const { return spec_; }

 private:
  struct Held {
    Direction dir;
    uint64_t stream;
    uint64_t order;      // insertion order: equal deadlines leave in arrival order
    uint64_t not_before;  // the configured delay
    uint64_t deadline;    // when it leaves at the latest
    uint32_t remaining;   // later datagrams of its stream until a reordered one leaves
    Datagram dg;
  };
  static constexpr uint32_t kNoCount = UINT32_MAX;

  uint64_t Draw(uint64_t stream, uint64_t index, uint64_t kind) const;
  bool Chance(double p, uint64_t stream, uint64_t index, uint64_t kind) const;
  void CountDown(Direction dir, uint64_t stream, uint64_t now_ns, std::vector<Datagram>& out);

  FaultSpec spec_;
  bool affects_[2];
  std::map<uint64_t, uint64_t> next_index_;  // per stream: the index of its next datagram
  std::vector<Held> held_;
  uint64_t order_ = 0;
  FaultStats stats_[2];
};

}  // namespace softverbs::fabric::wire
