// The limits of ibv_query_device(3) on the objects a process keeps to itself: max_pd, max_cq and
// max_ah. An HCA refuses the object past its limit (ENOMEM) and so does softverbs0: each such
// object holds one unit of its kind's quota while it lives. They are counted per process (all its
// contexts of softverbs0 together), since the process's own memory is what they use. QPs, SRQs,
// MRs and MWs are bounded by the host-wide tables of fabric/host instead (max_qp, max_srq,
// max_mr = max_mw).
#pragma once

#include <cstdint>

#include "base/status.h"

namespace softverbs::core {

enum class QuotaKind : uint8_t { kPd, kCq, kAh };

// One counted object. Empty (counts nothing) when default-constructed or moved from.
class QuotaHold {
 public:
  QuotaHold() = default;
  // A unit of `kind`, or ENOMEM naming the limit when the process holds as many as it allows.
  static Result<QuotaHold> Take(QuotaKind kind);
  ~QuotaHold();
  QuotaHold(QuotaHold&& other) noexcept : kind_(other.kind_) { other.kind_ = -1; }
  QuotaHold& operator=(QuotaHold&& other) noexcept;
  QuotaHold(const QuotaHold&) = delete;
  QuotaHold& operator=(const QuotaHold&) = delete;

 private:
  explicit QuotaHold(QuotaKind kind) : kind_(static_cast<int>(kind)) {}
  int kind_ = -1;
};

// Units of `kind` held by this process now.
uint32_t QuotaInUse(QuotaKind kind);
// Tests only: sets the limit of `kind` (the device limit by default) and returns the previous one.
uint32_t SetQuotaLimitForTesting(QuotaKind kind, uint32_t limit);

}  // namespace softverbs::core
