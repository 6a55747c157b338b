#include "fabric/host/pin_line.h"

#include <sched.h>
#include <time.h>

#include <algorithm>

#include <chrono>

#include "base/log.h"

namespace softverbs::fabric {
namespace {

constexpr uint64_t kCountMask = 0xffffffffull;
constexpr uint32_t kGenerationMask = (1u << kPinnerGenerationBits) - 1;

uint32_t IdOf(uint64_t word) { return static_cast<uint32_t>(word >> 32); }
uint32_t CountOf(uint64_t word) { return static_cast<uint32_t>(word & kCountMask); }

// A word with a count taken by `pinner`: one more pin on a word of its own, or a free word.
std::atomic<uint64_t>* TryPin(PinLine& line, uint32_t pinner) {
  for (auto& w : line.words) {
    uint64_t v = w.load(std::memory_order_relaxed);
    if (IdOf(v) == pinner && CountOf(v) != 0 && w.compare_exchange_strong(v, v + 1, std::memory_order_seq_cst))
      return &w;
  }
  const uint64_t mine = static_cast<uint64_t>(pinner) << 32 | 1;
  for (auto& w : line.words) {
    uint64_t v = w.load(std::memory_order_relaxed);
    if (CountOf(v) == 0 && w.compare_exchange_strong(v, mine, std::memory_order_seq_cst)) return &w;
  }
  return nullptr;
}

}  // namespace

uint32_t PinnerId(uint32_t process_slot, uint32_t slot_generation) {
  return (process_slot + 1) << kPinnerGenerationBits | (slot_generation & kGenerationMask);
}

bool PinnerAlive(HostRegistry& registry, uint32_t pinner) {
  if (pinner == kAnonymousPinner) return true;
  const uint32_t process_slot = (pinner >> kPinnerGenerationBits) - 1;
  // A number read from shared memory: beyond the table's extent no process ever had the slot
  // (and reading it would allocate a page of the sparse registry).
  if (process_slot >= registry.processes().extent()) return false;
  HostSlot& s = registry.processes().slot(process_slot);
  const uint64_t owner = s.owner.load(std::memory_order_acquire);
  if (owner == 0) return false;  // the slot was reclaimed: its process is gone
  // A slot being taken over has its new owner before its new generation: judged alive, and
  // looked at again later (the safe side).
  if ((s.generation.load(std::memory_order_acquire) & kGenerationMask) != (pinner & kGenerationMask)) return false;
  return ProcessToken(owner).IsAlive();
}

std::atomic<uint64_t>* Pin(HostRegistry& registry, PinLine& line, uint32_t pinner) {
  for (uint32_t spins = 0;; ++spins) {
    if (auto* w = TryPin(line, pinner)) return w;
    // Eight other processes hold pins: drop those that died, otherwise let them finish.
    if (spins % 64 == 0) ClearDeadPins(registry, line);
    sched_yield();
  }
}

void Unpin(std::atomic<uint64_t>* word, uint32_t pinner) {
  uint64_t v = word->load(std::memory_order_relaxed);
  while (IdOf(v) == pinner && CountOf(v) != 0 &&
         !word->compare_exchange_weak(v, v - 1, std::memory_order_acq_rel)) {
  }
}

uint32_t PinsHeld(const PinLine& line) {
  uint32_t n = 0;
  for (const auto& w : line.words) n += CountOf(w.load(std::memory_order_seq_cst));
  return n;
}

uint32_t ClearDeadPins(HostRegistry& registry, PinLine& line) {
  uint32_t cleared = 0;
  for (auto& w : line.words) {
    uint64_t v = w.load(std::memory_order_acquire);
    if (CountOf(v) == 0 || PinnerAlive(registry, IdOf(v))) continue;
    // A dead process never changes its word again: only a pinner taking a free word could, and
    // this one is not free.
    if (w.compare_exchange_strong(v, 0, std::memory_order_acq_rel)) cleared += CountOf(v);
  }
  return cleared;
}

PinWaitCounters& PinWaits() {
  static PinWaitCounters counters;
  return counters;
}

std::string LivePinners(HostRegistry& registry, const PinLine& line) {
  std::string who;
  for (const auto& w : line.words) {
    uint64_t v = w.load(std::memory_order_acquire);
    if (CountOf(v) == 0) continue;
    uint32_t id = IdOf(v);
    uint32_t ps = (id >> kPinnerGenerationBits) - 1;
    pid_t pid = id == kAnonymousPinner || ps >= registry.processes().extent()
                    ? 0
                    : ProcessToken(registry.processes().slot(ps).owner.load()).pid();
    who += (who.empty() ? "" : ", ") + std::to_string(CountOf(v)) + " of pid " + std::to_string(pid);
  }
  return who;
}

namespace {

// Between looks at a line still pinned: yield at first (an access in flight ends within
// microseconds), then sleep, up to a millisecond, so that a wait for a stopped process costs
// no CPU.
void Pause(uint32_t spins) {
  if (spins < 1024) {
    sched_yield();
    return;
  }
  const long ns = std::min<long>(1000000, 1000L << std::min<uint32_t>((spins - 1024) / 64, 10));
  timespec ts{0, ns};
  nanosleep(&ts, nullptr);
}

}  // namespace

PinWait WaitWhileHeld(const Holders& h, const std::string& what, int limit_ms) {
  PinWait result;
  if (!h.held()) return result;
  // Holders that died first: they would never let go.
  result.dead_cleared = h.clear_dead();
  const auto start = std::chrono::steady_clock::now();
  auto next_log = start + std::chrono::milliseconds(kStallLogMs);
  for (uint32_t spins = 1; h.held(); ++spins) {
    result.waited = true;
    if (spins % 256 == 0) result.dead_cleared += h.clear_dead();
    const auto now = std::chrono::steady_clock::now();
    if (limit_ms >= 0 && now - start > std::chrono::milliseconds(limit_ms)) {
      SV_LOG(kWarn, "%s: accesses in flight never finished (%s still holding); counted as gone", what.c_str(),
             h.who().c_str());
      h.drop();
      result.gave_up = true;
      break;
    }
    if (now >= next_log) {
      // A live process holds it: stopped, traced or frozen, or very slow. It may still write,
      // so this wait goes on (a NIC's invalidation waits for its DMA); say whom for.
      h.clear_dead();
      const std::string who = h.who();
      if (!who.empty())
        SV_LOG(kWarn, "%s: waiting %lld s for accesses in flight of live process(es) (%s holding; stopped?)",
               what.c_str(),
               static_cast<long long>(std::chrono::duration_cast<std::chrono::seconds>(now - start).count()),
               who.c_str());
      if (result.logged++ == 0) PinWaits().stalled.fetch_add(1, std::memory_order_relaxed);
      next_log = now + std::chrono::milliseconds(kStallRelogMs);
    }
    Pause(spins);
  }
  PinWaits().dead_cleared.fetch_add(result.dead_cleared, std::memory_order_relaxed);
  if (result.waited) PinWaits().live_waits.fetch_add(1, std::memory_order_relaxed);
  if (result.gave_up) PinWaits().gave_up.fetch_add(1, std::memory_order_relaxed);
  return result;
}

PinWait WaitUnpinned(HostRegistry& registry, PinLine& line, const std::string& what, int limit_ms) {
  const Holders h{
      [&] { return PinsHeld(line) != 0; },
      [&] { return ClearDeadPins(registry, line); },
      [&] { return LivePinners(registry, line); },
      [&] {
        for (auto& w : line.words) w.store(0, std::memory_order_release);
      },
  };
  return WaitWhileHeld(h, what, limit_ms);
}

}  // namespace softverbs::fabric
