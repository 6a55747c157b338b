// The identity of one live process incarnation on this host: its pid and its start time, so a
// recycled pid is never mistaken for the process that owned a shared entry before it died.
#pragma once

#include <cstdint>
#include <sys/types.h>

namespace softverbs::fabric {

class ProcessToken {
 public:
  constexpr ProcessToken() = default;
  constexpr explicit ProcessToken(uint64_t raw) : raw_(raw) {}

  // The calling process (recomputed after fork()).
  static ProcessToken Self();
  // The token of `pid` as of now; empty if it does not exist.
  static ProcessToken Of(pid_t pid);

  uint64_t raw() const { return raw_; }
  pid_t pid() const { return static_cast<pid_t>(raw_ >> 32); }
  bool empty() const { return raw_ == 0; }
  // True while the same incarnation of the process runs.
  bool IsAlive() const;

  friend bool operator==(ProcessToken a, ProcessToken b) { return a.raw_ == b.raw_; }

 private:
  uint64_t raw_ = 0;  // pid << 32 | low 32 bits of the start time (clock ticks since boot)
};

}  // namespace softverbs::fabric
