// Counts of accesses in flight that a withdrawer waits for (a memory key's pins), kept per
// pinning process so that pins of a process that died are recognised at once: a NIC's DMA
// stops with the process that drove it, and so must the count that stands for it.
//
// One cache line of 8 words; each word is (pinner id << 32 | count). A pinner increments the
// count of a word that carries its id, or takes a word whose count is 0. Every change is one
// compare-and-swap of one word, so a process dying at any instruction leaves each word either
// counting its pin or not: a withdrawer that finds a word whose pinner is dead clears it.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "fabric/host/host_registry.h"

namespace softverbs::fabric {

// Who pins: (process slot + 1) << 19 | the slot's allocation count (19 bits), so a process that
// reuses the slot of a dead one is another pinner. kAnonymousPinner is never judged dead (a
// process without a slot in the registry that holds the line).
inline constexpr uint32_t kAnonymousPinner = 0xffffffffu;
inline constexpr uint32_t kPinnerGenerationBits = 19;
uint32_t PinnerId(uint32_t process_slot, uint32_t slot_generation);
// False once the process that `pinner` names has died or its slot went to another process.
bool PinnerAlive(HostRegistry& registry, uint32_t pinner);

struct alignas(64) PinLine {
  static constexpr int kWords = 8;
  std::atomic<uint64_t> words[kWords];
};
static_assert(sizeof(PinLine) == 64);

// What a wait for a line's pins did.
struct PinWait {
  uint32_t dead_cleared = 0;  // pins of dead processes dropped (their words cleared)
  bool gave_up = false;       // live pins still held after an explicit limit: counted as gone
  bool waited = false;        // live pins were waited for
  uint32_t logged = 0;        // times the wait logged the live pinners it was waiting for
};

// What this process's waits did so far, every line together (tests, `softverbs status`).
struct PinWaitCounters {
  std::atomic<uint64_t> dead_cleared{0};  // pins of dead processes dropped without waiting
  std::atomic<uint64_t> live_waits{0};    // waits that found live pins
  std::atomic<uint64_t> stalled{0};       // ... that still found them after kStallLogMs (logged)
  std::atomic<uint64_t> gave_up{0};       // ... and stopped at an explicit limit
};
PinWaitCounters& PinWaits();

// No limit: the wait lasts as long as a live pinner holds its pin (the default).
inline constexpr int kWaitForever = -1;
// A wait still going on after this long logs the pids it waits for, and again every
// kStallRelogMs.
inline constexpr int kStallLogMs = 1000;
inline constexpr int kStallRelogMs = 10000;

// Takes one pin for `pinner`; returns the word to release. Spins (yielding) only while the 8
// words all count pins of other live processes, clearing dead ones.
std::atomic<uint64_t>* Pin(HostRegistry& registry, PinLine& line, uint32_t pinner);
// Releases a pin taken by `pinner` on `word`. A word cleared in between (its pinner judged gone)
// is left alone.
void Unpin(std::atomic<uint64_t>* word, uint32_t pinner);
// The pins the line counts now.
uint32_t PinsHeld(const PinLine& line);
// Clears the words of dead pinners; returns how many pins they held.
uint32_t ClearDeadPins(HostRegistry& registry, PinLine& line);
// Waits until the line holds no pin. Dead pinners are cleared at the first look, without
// waiting; live ones are waited for as long as they hold their pins -- a stopped process
// (SIGSTOP, a debugger, a frozen cgroup) too: once the wait returns nobody can still be in an
// access, as a NIC's invalidation does not return while its DMA may still write (issue 17 item
// 1, docs/data-path.md "Guarantees"). A wait that lasts is logged with the pids it waits for
// (after kStallLogMs, then every kStallRelogMs). `limit_ms` >= 0 bounds it (tests only): then
// the live pins are cleared and `gave_up`. `what` names the verb and object for the log
// ("ibv_dereg_mr(key slot 12)").
PinWait WaitUnpinned(HostRegistry& registry, PinLine& line, const std::string& what, int limit_ms = kWaitForever);
// The wait of WaitUnpinned for any kind of holder (fabric/host/hazard_lines.h announces too):
// whether one holds on now, dropping dead ones (how many they held), the live ones for the log,
// and dropping every hold when a test's limit runs out.
struct Holders {
  std::function<bool()> held;
  std::function<uint32_t()> clear_dead;
  std::function<std::string()> who;
  std::function<void()> drop;
};
PinWait WaitWhileHeld(const Holders& holders, const std::string& what, int limit_ms = kWaitForever);
// Pids of the live processes holding pins on `line`, with their counts ("2 of pid 123").
std::string LivePinners(HostRegistry& registry, const PinLine& line);

}  // namespace softverbs::fabric
