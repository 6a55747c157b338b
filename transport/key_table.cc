#include "transport/key_table.h"

#include <sched.h>

#include <chrono>

#include "base/log.h"

namespace softverbs::transport {
namespace {

fabric::KeyEntry& Entry(fabric::HostRegistry& registry, uint32_t slot) {
  return fabric::EntryOf<fabric::KeyEntry>(registry.keys().slot(slot));
}

// Seqlock writer: odd while the fields change (their release stores stay after the odd mark).
template <typename Fn>
void WriteLocked(fabric::KeyEntry& e, Fn&& fn) {
  e.seq.fetch_add(1, std::memory_order_seq_cst);
  fn();
  e.seq.fetch_add(1, std::memory_order_release);
}

constexpr auto kRel = std::memory_order_release;
constexpr auto kAcq = std::memory_order_acquire;

}  // namespace

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
  WriteLocked(e, [&] {
    e.access.store(view.access, kRel);
    e.pd.store(view.pd, kRel);
    e.addr.store(view.addr, kRel);
    e.length.store(view.length, kRel);
    e.iova.store(view.iova, kRel);
    e.key.store(view.key, kRel);
  });
}

namespace {

void WaitForAccesses(fabric::HostRegistry& registry, uint32_t slot) {
  // Accesses that pinned the key before it was withdrawn finish first. An initiator that died
  // while holding a pin never releases it: after a second, give up waiting and say so.
  std::atomic<uint32_t>& pins = registry.key_pins(slot);
  auto start = std::chrono::steady_clock::now();
  while (pins.load(std::memory_order_seq_cst) != 0) {
    if (std::chrono::steady_clock::now() - start > std::chrono::seconds(1)) {
      SV_LOG(kWarn, "key invalidation: %u access(es) through key slot %u never finished (initiator died?)",
             pins.load(), slot);
      pins.store(0, std::memory_order_release);
      break;
    }
    sched_yield();
  }
}

}  // namespace

void WithdrawKey(fabric::HostRegistry& registry, uint32_t slot) {
  fabric::KeyEntry& e = Entry(registry, slot);
  WriteLocked(e, [&] { e.key.store(0, kRel); });
  WaitForAccesses(registry, slot);
}

uint32_t KeyHeldBy(fabric::HostRegistry& registry, uint32_t slot) {
  return Entry(registry, slot).key.load(kAcq);
}

bool InvalidateKey(fabric::HostRegistry& registry, uint32_t key) {
  const uint32_t slot = KeySlot(key);
  if (key == 0 || slot >= registry.keys().count()) return false;
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
    pins_ = std::exchange(o.pins_, nullptr);
    view_ = o.view_;
  }
  return *this;
}

namespace {

// A consistent copy of entry `e` (seqlock read); false if it does not hold `key` now.
bool ReadView(fabric::KeyEntry& e, uint32_t key, KeyView* out) {
  for (;;) {
    uint32_t seq = e.seq.load(std::memory_order_acquire);
    if (seq & 1) {
      sched_yield();
      continue;
    }
    // Acquire loads: none of them moves after the second read of seq.
    KeyView v{e.key.load(kAcq), e.access.load(kAcq), e.pd.load(kAcq), e.addr.load(kAcq), e.length.load(kAcq),
              e.iova.load(kAcq)};
    if (e.seq.load(kAcq) != seq) continue;
    if (v.key != key) return false;  // withdrawn, or a stale variant of a reused slot
    *out = v;
    return true;
  }
}

}  // namespace

KeyPin KeyPin::Acquire(fabric::HostRegistry& registry, uint32_t key) {
  KeyPin pin;
  const uint32_t slot = KeySlot(key);
  if (key == 0 || slot >= registry.keys().count()) return pin;
  std::atomic<uint32_t>& pins = registry.key_pins(slot);
  // Pin first, then read a consistent copy: a withdrawal after the pin waits for us, and one
  // before it is seen as key == 0 (both sides store, then load: sequentially consistent).
  pins.fetch_add(1, std::memory_order_seq_cst);
  if (ReadView(Entry(registry, slot), key, &pin.view_)) {
    pin.pins_ = &pins;
    return pin;
  }
  pins.fetch_sub(1, std::memory_order_acq_rel);
  return pin;
}

bool KeyPin::Peek(fabric::HostRegistry& registry, uint32_t key, KeyView* view) {
  const uint32_t slot = KeySlot(key);
  if (key == 0 || slot >= registry.keys().count()) return false;
  return ReadView(Entry(registry, slot), key, view);
}

void KeyPin::Release() {
  if (pins_ != nullptr) pins_->fetch_sub(1, std::memory_order_acq_rel);
  pins_ = nullptr;
}

}  // namespace softverbs::transport
