#include "fabric/host/hazard_lines.h"

#include <sys/syscall.h>
#include <unistd.h>

#include "fabric/host/host_directory.h"

namespace softverbs::fabric {
namespace {

uint32_t ThreadId() { return static_cast<uint32_t>(syscall(SYS_gettid)); }

// The line this thread claimed, and in which process (a child of fork() claims its own: the
// parent's lines are in the parent's block).
struct ThreadClaim {
  HazardLine* line = nullptr;
  LocalProcess* process = nullptr;  // a child of fork() has a LocalProcess of its own
  void Give() {
    if (line != nullptr && process->is_current()) line->tid.store(0, std::memory_order_release);
    line = nullptr;
    internal::t_claim_cache = {nullptr, nullptr};
  }
  ~ThreadClaim() { Give(); }
};

HazardLine* Claim(LocalProcess& local) {
  HazardLine* lines = local.registry().hazards(local.slot());
  const uint32_t tid = ThreadId();
  for (uint32_t i = 0; i < HostRegistry::kHazardLinesPerProcess; ++i) {
    uint32_t free = 0;
    if (lines[i].tid.load(std::memory_order_relaxed) == 0 &&
        lines[i].tid.compare_exchange_strong(free, tid, std::memory_order_acq_rel))
      return &lines[i];
  }
  return nullptr;
}

// Calls `fn(line, process slot)` for every line of every process holding a slot now.
template <typename Fn>
void ForEachLine(HostRegistry& registry, Fn&& fn) {
  const uint32_t extent = registry.processes().extent();
  for (uint32_t p = 0; p < extent; ++p) {
    if (registry.processes().slot(p).owner.load(std::memory_order_acquire) == 0) continue;
    HazardLine* lines = registry.hazards(p);
    for (uint32_t i = 0; i < HostRegistry::kHazardLinesPerProcess; ++i)
      if (lines[i].tid.load(std::memory_order_acquire) != 0) fn(lines[i], p);
  }
}

bool OwnerAlive(HostRegistry& registry, uint32_t process_slot) {
  const uint64_t owner = registry.processes().slot(process_slot).owner.load(std::memory_order_acquire);
  return owner != 0 && ProcessToken(owner).IsAlive();
}

}  // namespace

constinit thread_local internal::ClaimCache internal::t_claim_cache{nullptr, nullptr};

HazardLine* internal::ClaimThisThreadHazards(LocalProcess& local) {
  static thread_local ThreadClaim claim;  // owns the line: given back when the thread exits
  if (claim.process != &local) {
    claim.Give();
    claim.line = Claim(local);
    claim.process = &local;
  }
  internal::t_claim_cache = {claim.process, claim.line};
  return claim.line;
}

bool Announced(HostRegistry& registry, uint32_t value) {
  HazardStoreLoadBarrier();
  bool found = false;
  ForEachLine(registry, [&](HazardLine& line, uint32_t) {
    for (auto& e : line.held) found = found || e.load(std::memory_order_acquire) == value;
  });
  return found;
}

PinWait WaitUnannounced(HostRegistry& registry, uint32_t value, const std::string& what, int limit_ms) {
  const uint32_t self = ThreadId();
  const uint64_t self_owner = ProcessToken::Self().raw();
  // Whether another thread announces `value` now; with `clear_dead` the entries of processes
  // that died are dropped (and counted) instead, and `who` lists the holders for the log.
  auto scan = [&](bool clear_dead, uint32_t* cleared, std::string* who) {
    bool held = false;
    HazardStoreLoadBarrier();  // after the caller's withdrawal
    ForEachLine(registry, [&](HazardLine& line, uint32_t p) {
      const bool own_process = registry.processes().slot(p).owner.load(std::memory_order_acquire) == self_owner;
      if (own_process && line.tid.load(std::memory_order_relaxed) == self) return;
      for (auto& e : line.held) {
        if (e.load(std::memory_order_acquire) != value) continue;
        if (clear_dead && !own_process && !OwnerAlive(registry, p)) {
          // A dead thread never retracts: its entry is dropped.
          uint32_t v = value;
          if (e.compare_exchange_strong(v, 0, std::memory_order_acq_rel)) ++*cleared;
          continue;
        }
        held = true;
        if (who) {
          *who += (who->empty() ? "" : ", ") + std::string("thread ") + std::to_string(line.tid.load()) + " of pid " +
                  std::to_string(ProcessToken(registry.processes().slot(p).owner.load()).pid());
        }
      }
    });
    return held;
  };
  const Holders h{
      [&] { return scan(false, nullptr, nullptr); },
      [&] {
        uint32_t cleared = 0;
        scan(true, &cleared, nullptr);
        return cleared;
      },
      [&] {
        std::string who;
        scan(false, nullptr, &who);
        return who;
      },
      [&] {
        ForEachLine(registry, [&](HazardLine& line, uint32_t) {
          for (auto& e : line.held) {
            uint32_t v = value;
            e.compare_exchange_strong(v, 0, std::memory_order_acq_rel);
          }
        });
      },
  };
  return WaitWhileHeld(h, what, limit_ms);
}

}  // namespace softverbs::fabric
