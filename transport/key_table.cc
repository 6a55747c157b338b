#include "transport/key_table.h"

#include <sched.h>
#include <unistd.h>

#include <string>

#include "base/log.h"
#include "base/memory_map.h"
#include "fabric/host/hazard_lines.h"
#include "fabric/host/pin_line.h"
#include "fabric/host/process_token.h"

namespace softverbs::transport {
namespace {

fabric::KeyEntry& Entry(fabric::HostRegistry& registry, uint32_t slot) {
  return fabric::EntryOf<fabric::KeyEntry>(registry.keys().slot(slot));
}

// Seqlock writer: odd while the fields change (their release stores stay after the odd mark).
// Then the route epoch: kept routes check the key again (before any wait for its accesses).
template <typename Fn>
void WriteLocked(fabric::HostRegistry& registry, fabric::KeyEntry& e, Fn&& fn) {
  e.seq.fetch_add(1, std::memory_order_seq_cst);
  fn();
  e.seq.fetch_add(1, std::memory_order_release);
  registry.BumpRouteEpoch();
}

constexpr auto kRel = std::memory_order_release;
constexpr auto kAcq = std::memory_order_acquire;

}  // namespace

bool OnDemandPresentSlow(fabric::HostRegistry& registry, const KeyView& k, uint64_t host_addr, uint64_t length,
                         bool writes) {
  if (!k.on_demand() || length == 0) return true;
  const fabric::ProcessToken owner(registry.processes().slot(k.owner_process_slot()).owner.load(kAcq));
  if (owner.empty()) return false;
  const int pid = owner.pid() == getpid() ? 0 : owner.pid();
  const MappedAs m = InspectRangeOf(pid, host_addr, length);
  const bool present = writes ? m == MappedAs::kWritable : m != MappedAs::kUnmapped;
  if (!present)
    SV_LOG(kError, "on-demand key 0x%x: [0x%llx, +%llu) of pid %d is not %s memory now (the page fault fails)",
           k.key, static_cast<unsigned long long>(host_addr), static_cast<unsigned long long>(length), owner.pid(),
           writes ? "writable" : "mapped");
  return present;
}

Result<NewKey> AllocateKey(fabric::HostRegistry& registry) {
  fabric::SlotTable& keys = registry.keys();
  auto slot = keys.Allocate(fabric::ProcessToken::Self());
  // MRs, MWs and mkeys share this table: it is the device limit max_mr (= max_mw).
  if (!slot.ok())
    return Status(ENOMEM, "the device limit max_mr = max_mw " + std::to_string(fabric::HostRegistry::kKeySlots) +
                              " is reached: no memory key left (" + slot.status().rule() + ")");
  const uint32_t generation = keys.slot(*slot).generation.load(std::memory_order_relaxed);
  return NewKey{*slot, (*slot + 1) << 8 | (generation & 0xff)};
}

void PublishKey(fabric::HostRegistry& registry, uint32_t slot, const KeyView& view) {
  fabric::KeyEntry& e = Entry(registry, slot);
  WriteLocked(registry, e, [&] {
    e.access.store(view.access, kRel);
    e.owner.store(view.owner, kRel);
    e.pd.store(view.pd, kRel);
    e.addr.store(view.addr, kRel);
    e.length.store(view.length, kRel);
    e.iova.store(view.iova, kRel);
    e.key.store(view.key, kRel);
  });
}

namespace {

// This process's pinner id in `registry` (fabric/host/pin_line.h). Cached: a pin is on every
// access, and a load of the fork generation is all it costs after the first.
uint32_t SelfPinner(fabric::HostRegistry& registry) {
  static std::atomic<fabric::LocalProcess*> cached{nullptr};
  fabric::LocalProcess* local = cached.load(std::memory_order_acquire);
  if (local == nullptr || !local->is_current()) {
    auto got = fabric::LocalProcess::Get();
    if (!got.ok()) return fabric::kAnonymousPinner;
    local = got.value();
    cached.store(local, std::memory_order_release);
  }
  // A registry opened apart from this process's (tests) has no slot of ours.
  return &local->registry() == &registry ? local->pinner_id() : fabric::kAnonymousPinner;
}

// This thread's hazard line in `registry`, or nullptr (a registry apart from this process's, a
// process whose threads took every line). Remembered per thread for the registry it was asked
// for and the fork generation it was found in (a child of fork() finds its own): a pin is on
// every access.
struct HazardsSeen {
  fabric::HostRegistry* registry = nullptr;
  uint32_t fork_generation = 0;
  fabric::HazardLine* line = nullptr;
};
constinit thread_local HazardsSeen t_hazards_seen;

fabric::HazardLine* SelfHazards(fabric::HostRegistry& registry) {
  HazardsSeen& seen = t_hazards_seen;
  const uint32_t generation = fabric::LocalProcess::ForkGeneration();
  if (seen.registry == &registry && seen.fork_generation == generation) return seen.line;
  auto got = fabric::LocalProcess::Get();
  if (!got.ok()) return nullptr;
  fabric::LocalProcess* local = got.value();
  fabric::HazardLine* line = &local->registry() == &registry ? fabric::ThisThreadHazards(*local) : nullptr;
  seen = {&registry, generation, line};
  return line;
}

void Account(const fabric::PinWait& w, uint32_t slot) {
  if (w.dead_cleared != 0) {
    KeyWaits().dead_pins_cleared.fetch_add(w.dead_cleared, std::memory_order_relaxed);
    SV_LOG(kInfo, "key invalidation: dropped %u pin(s) of dead initiator(s) on key slot %u", w.dead_cleared, slot);
  }
  if (w.waited) KeyWaits().live_waits.fetch_add(1, std::memory_order_relaxed);
  if (w.gave_up) KeyWaits().gave_up.fetch_add(1, std::memory_order_relaxed);
}

void WaitForAccesses(fabric::HostRegistry& registry, uint32_t slot) {
  // Accesses that held the key before it was withdrawn finish first. Those of initiators that
  // died are dropped at once; a live one is waited for however long it takes (a stopped
  // initiator could write when it resumes), and copies re-check the key between bounded
  // chunks (transport/host/mapped_copy.h), so a running one lets go within one chunk.
  const std::string what = "withdrawal of key slot " + std::to_string(slot) +
                           " (ibv_dereg_mr, ibv_rereg_mr or an invalidation)";
  fabric::PinLine& line = registry.key_pins(slot);
  if (fabric::PinsHeld(line) != 0) Account(fabric::WaitUnpinned(registry, line, what), slot);
  Account(fabric::WaitUnannounced(registry, slot + 1, what), slot);
}

}  // namespace

void WithdrawKey(fabric::HostRegistry& registry, uint32_t slot) {
  fabric::KeyEntry& e = Entry(registry, slot);
  WriteLocked(registry, e, [&] { e.key.store(0, kRel); });
  WaitForAccesses(registry, slot);
}

uint32_t KeyHeldBy(fabric::HostRegistry& registry, uint32_t slot) {
  return Entry(registry, slot).key.load(kAcq);
}

bool OwnKeysTouch(fabric::HostRegistry& registry, uint64_t lo, uint64_t hi) {
  const uint64_t self = fabric::ProcessToken::Self().raw();
  fabric::SlotTable& keys = registry.keys();
  const uint32_t extent = keys.extent();
  for (uint32_t slot = 0; slot < extent; ++slot) {
    if (keys.slot(slot).owner.load(kAcq) != self) continue;
    fabric::KeyEntry& e = Entry(registry, slot);
    if (e.seq.load(kAcq) & 1) return true;  // being published or withdrawn right now
    if (e.access.load(kAcq) & kIndirectKey) continue;
    if (e.key.load(kAcq) == 0 && !KeyAccessed(registry, slot)) continue;
    const uint64_t addr = e.addr.load(kAcq), length = e.length.load(kAcq);
    if (addr < hi && lo < addr + length) return true;
  }
  return false;
}

bool KeyAccessed(fabric::HostRegistry& registry, uint32_t slot) {
  return fabric::PinsHeld(registry.key_pins(slot)) != 0 || fabric::Announced(registry, slot + 1);
}

KeyWaitCounters& KeyWaits() {
  static KeyWaitCounters counters;
  return counters;
}

bool InvalidateKey(fabric::HostRegistry& registry, uint32_t key) {
  const uint32_t slot = KeySlot(key);
  if (key == 0 || slot >= registry.keys().extent()) return false;
  fabric::KeyEntry& e = Entry(registry, slot);
  // Only `key` changes, to 0: a reader that saw the old key read the fields it had (still
  // valid), and the pins it took before the swap are waited for below.
  uint32_t expected = key;
  if (!e.key.compare_exchange_strong(expected, 0, std::memory_order_seq_cst)) return false;
  WaitForAccesses(registry, slot);
  return true;
}

KeyPin& KeyPin::operator=(KeyPin&& o) noexcept {
  if (this != &o) {
    Release();
    pin_ = std::exchange(o.pin_, nullptr);
    hazard_ = std::exchange(o.hazard_, nullptr);
    pinner_ = o.pinner_;
    view_ = o.view_;
  }
  return *this;
}

namespace {

// A consistent copy of entry `e` (seqlock read); false if it does not hold `key` now. `seq_out`:
// the count it was read under.
bool ReadView(fabric::KeyEntry& e, uint32_t key, KeyView* out, uint32_t* seq_out = nullptr) {
  for (;;) {
    uint32_t seq = e.seq.load(std::memory_order_acquire);
    if (seq & 1) {
      sched_yield();
      continue;
    }
    // Acquire loads: none of them moves after the second read of seq.
    KeyView v{e.key.load(kAcq), e.access.load(kAcq), e.pd.load(kAcq), e.addr.load(kAcq), e.length.load(kAcq),
              e.iova.load(kAcq), e.owner.load(kAcq)};
    if (e.seq.load(kAcq) != seq) continue;
    if (v.key != key) return false;  // withdrawn, or a stale variant of a reused slot
    *out = v;
    if (seq_out != nullptr) *seq_out = seq;
    return true;
  }
}

}  // namespace

KeyPin KeyPin::Acquire(fabric::HostRegistry& registry, uint32_t key) {
  KeyPin pin;
  const uint32_t slot = KeySlot(key);
  // A key from a peer: beyond the table's extent no key was ever published, and reading that
  // slot would allocate a page of the sparse registry (docs/data-path.md, "Sized by use").
  if (key == 0 || slot >= registry.keys().extent()) return pin;
  // Announce or pin first, then read a consistent copy: a withdrawal after that waits for us,
  // and one before it is seen as key == 0 (both sides store, then load: sequentially consistent).
  if (fabric::HazardLine* line = SelfHazards(registry)) {
    if (std::atomic<uint32_t>* entry = fabric::Announce(*line, slot + 1)) {
      if (ReadView(Entry(registry, slot), key, &pin.view_)) {
        pin.hazard_ = entry;
        return pin;
      }
      fabric::Retract(entry);
      return pin;
    }
  }
  const uint32_t pinner = SelfPinner(registry);
  std::atomic<uint64_t>* word = fabric::Pin(registry, registry.key_pins(slot), pinner);
  if (ReadView(Entry(registry, slot), key, &pin.view_)) {
    pin.pin_ = word;
    pin.pinner_ = pinner;
    return pin;
  }
  fabric::Unpin(word, pinner);
  return pin;
}

bool KeyPin::Peek(fabric::HostRegistry& registry, uint32_t key, KeyView* view) {
  const uint32_t slot = KeySlot(key);
  if (key == 0 || slot >= registry.keys().extent()) return false;
  return ReadView(Entry(registry, slot), key, view);
}

bool HeldKey::Learn(fabric::HostRegistry& registry, uint32_t key) {
  Forget();
  const uint32_t slot = KeySlot(key);
  if (key == 0 || slot >= registry.keys().extent()) return false;
  fabric::KeyEntry& e = Entry(registry, slot);
  if (!ReadView(e, key, &view_, &seq_)) return false;
  entry_ = &e;
  return true;
}

fabric::HazardLine* KeyHazards(fabric::HostRegistry& registry) { return SelfHazards(registry); }

bool KeyPin::Withdrawn(fabric::HostRegistry& registry) const {
  // One load of a read-mostly line: the owner changes `key` only when it withdraws it.
  return !*this || Entry(registry, KeySlot(view_.key)).key.load(kAcq) != view_.key;
}

void KeyPin::Release() {
  if (pin_ != nullptr) fabric::Unpin(pin_, pinner_);
  if (hazard_ != nullptr) fabric::Retract(hazard_);
  pin_ = nullptr;
  hazard_ = nullptr;
}

}  // namespace softverbs::transport
