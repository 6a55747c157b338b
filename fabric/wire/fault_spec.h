// The fault-injection grammar: SOFTVERBS_FAULTS (and softverbs-relay --faults) parsed into rules.
// The grammar is documented in fabric/wire/README.md ("Fault injection").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace softverbs::fabric::wire {

enum class Direction : uint8_t { kTx = 0, kRx = 1 };

// What applies to one datagram once the rules are resolved for its direction and DestQP.
struct FaultSettings {
  double loss = 0;     // probabilities, 0..1
  double dup = 0;
  double reorder = 0;
  double corrupt = 0;
  uint64_t delay_ns = 0;                     // every datagram waits this long
  uint32_t reorder_after = 3;                // a held datagram follows this many later ones...
  uint64_t reorder_max_ns = 1'000'000;       // ...or goes out at this deadline, whichever is first
  bool any() const { return loss > 0 || dup > 0 || reorder > 0 || corrupt > 0 || delay_ns > 0; }
};

enum class FaultKey : uint8_t { kLoss, kDup, kReorder, kCorrupt, kDelay, kReorderAfter, kReorderMax };

// One item of the spec: `key=value` limited to a direction and/or a DestQP.
struct FaultRule {
  std::optional<Direction> dir;
  std::optional<uint32_t> qp;
  FaultKey key = FaultKey::kLoss;
  double probability = 0;  // kLoss, kDup, kReorder, kCorrupt
  uint64_t amount = 0;     // kDelay, kReorderMax (ns); kReorderAfter (datagrams)
};

class FaultSpec {
 public:
  // The default seed when the spec names none: a run without seed= is still reproducible.
  static constexpr uint64_t kDefaultSeed = 1;

  // Refuses a malformed spec with a Status naming the item and the problem.
  static Result<FaultSpec> Parse(const std::string& text);
  // SOFTVERBS_FAULTS; nullopt when unset or empty.
  static Result<std::optional<FaultSpec>> FromEnvironment();

  // The most specific rule for each key wins: direction and QP > QP > direction > neither.
  FaultSettings Resolve(Direction dir, std::optional<uint32_t> qp) const;
  // Whether any rule could apply to datagrams of `dir`.
  bool Affects(Direction dir) const;

  uint64_t seed() const { return seed_; }
  const std::vector<FaultRule>& rules() const { return rules_; }

 private:
  uint64_t seed_ = kDefaultSeed;
  std::vector<FaultRule> rules_;
};

}  // namespace softverbs::fabric::wire
