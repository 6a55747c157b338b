// Per-thread announcements of the memory keys a thread is accessing: the initiator's way to hold
// a key without writing a cache line that anyone else writes. A key's PinLine (pin_line.h) is
// one line for every pinner of the key, and the owner pins its own keys as lkeys while its peer
// pins them as rkeys: in a ping-pong each access pulled that line across cores twice. Here a
// thread writes only its own line (hazard pointers, Michael 2004), and the rare withdrawer reads
// every live thread's line instead.
//
// The order that makes it safe: the accessor stores its announcement, then (sequentially
// consistent fence) reads the key; the withdrawer stores the key's withdrawal, then (fence) reads
// the announcements. Either the accessor sees the key gone, or the withdrawer sees the
// announcement and waits for its retraction (as for a pin: forever while its process lives,
// at once if it died).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "fabric/host/host_registry.h"
#include "fabric/host/pin_line.h"

namespace softverbs::fabric {

class LocalProcess;

struct alignas(64) HazardLine {
  static constexpr int kEntries = 15;
  std::atomic<uint32_t> tid;              // the thread owning the line (0: free)
  std::atomic<uint32_t> held[kEntries];   // announced values (a key slot + 1); 0: empty
};
static_assert(sizeof(HazardLine) == 64);

// What a line announces: a memory key as its slot + 1 (below 2^17), a QP an initiator is
// delivering to as kQpHazard | its number (QP numbers are below 2^24). One line holds both, so
// a work request's lkey, target QP and rkey are announced by stores to one line this thread
// alone writes (the QP's PinLine, which every sender to it shares, stays for threads without
// a line).
inline constexpr uint32_t kQpHazard = 0x80000000u;
inline uint32_t QpHazardValue(uint32_t qpn) { return kQpHazard | qpn; }

// This thread's line among `local`'s, claimed at first use and given back when the thread
// exits; nullptr when every line of the process is taken (the caller pins as before).
namespace internal {
// The claim's answer, read on every access: two plain pointers, constant-initialized, so the
// access needs no thread_local wrapper call (the claim's destructor would make one necessary).
// Not initial-exec: that would put the library's whole TLS block (post.cc's inline buffers among
// it) in the static TLS that glibc keeps small for dlopen (pyverbs loads us that way).
struct ClaimCache {
  LocalProcess* process;
  HazardLine* line;
};
extern constinit thread_local ClaimCache t_claim_cache;
HazardLine* ClaimThisThreadHazards(LocalProcess& local);
}  // namespace internal
// (inline: read on every work request)
inline HazardLine* ThisThreadHazards(LocalProcess& local) {
  if (internal::t_claim_cache.process == &local) return internal::t_claim_cache.line;  // nullptr: all taken
  return internal::ClaimThisThreadHazards(local);
}

// The store-then-load barrier of both sides (the accessor's announcement before its read of the
// key; the withdrawer's withdrawal before its read of the announcements). ThreadSanitizer does
// not model fences (GCC refuses them under -fsanitize=thread): there both sides make a
// sequentially consistent read-modify-write of one shared word instead, which orders them for
// it (and for the CPU: a locked instruction is a full barrier on x86).
inline void HazardStoreLoadBarrier() {
#if defined(__SANITIZE_THREAD__)
  static std::atomic<uint32_t> word{0};
  word.fetch_add(0, std::memory_order_seq_cst);
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

// Announce's store without its barrier: for a caller that announces several values, then
// calls HazardStoreLoadBarrier once before it reads anything they protect.
inline std::atomic<uint32_t>* AnnounceUnfenced(HazardLine& line, uint32_t value) {
  for (auto& e : line.held) {
    if (e.load(std::memory_order_relaxed) != 0) continue;
    // Only this thread writes its line's entries: a plain store.
    e.store(value, std::memory_order_relaxed);
    return &e;
  }
  return nullptr;
}

// Announces `value` in `line` (this thread's); the entry to retract, or nullptr when the line is
// full. Every load after it is ordered after the announcement (the withdrawer's side stores,
// fences, then reads this). Inline: three per work request.
inline std::atomic<uint32_t>* Announce(HazardLine& line, uint32_t value) {
  std::atomic<uint32_t>* e = AnnounceUnfenced(line, value);
  if (e != nullptr) HazardStoreLoadBarrier();
  return e;
}
inline void Retract(std::atomic<uint32_t>* entry) { entry->store(0, std::memory_order_release); }

// Whether a thread of a process holding a slot (this one included) announces `value` now. A
// dead process's entry counts until a wait drops it or its slot is reclaimed (the safe side);
// reads the lines only (no system call, no allocation).
bool Announced(HostRegistry& registry, uint32_t value);
// Waits until no thread of a live process other than the calling thread announces `value`
// (the caller's own accesses are sequenced with it, not in flight). Announcements of dead
// processes are cleared without waiting. Same contract and counters as WaitUnpinned.
PinWait WaitUnannounced(HostRegistry& registry, uint32_t value, const std::string& what, int limit_ms = kWaitForever);

}  // namespace softverbs::fabric
