// The host-wide memory key table as the verbs see it: the owner publishes a registration under
// its key (ibv_reg_mr / ibv_rereg_mr) and withdraws it (ibv_dereg_mr); an initiator in any process
// pins a key to check and use it. Withdrawal waits for the accesses in flight, so once
// ibv_dereg_mr returns no access through the key touches the memory -- what hardware
// invalidation guarantees (IBA 10.6.7).
#pragma once

#include <cstdint>
#include <optional>
#include <utility>

#include "base/status.h"
#include "fabric/host/hazard_lines.h"
#include "fabric/host/host_directory.h"
#include "fabric/host/host_registry.h"
#include "transport/codes.h"

namespace softverbs::transport {

// Set in a KeyView's access bits for an indirect key (transport/indirect_key.h): its `addr` then
// holds the SharedRef of its layout in the owner's arena, its `length` the layout's total length,
// and its addresses are zero-based. No ibv_access_flags bit uses it.
inline constexpr uint32_t kIndirectKey = 1u << 31;
// Set in a direct key's access bits when its memory is a shared mapping of a file or SysV
// segment that peers may map too: a BackingRecord in the key slot's side record says how
// (fabric/host/shared_backing.h, transport/host/mapped_copy.h). No ibv_access_flags bit uses it.
inline constexpr uint32_t kSharedBacking = 1u << 29;
// Set in a key's access bits for a null MR's key (ibv_alloc_null_mr(3)): "A null MR discards all
// data written to it, and always returns 0 on read. It has the maximum length and only the lkey
// is valid". Its `addr` is the owner's null region (transport/null_key.h): kNullChunk bytes that
// read as zeros, then kNullChunk bytes that swallow writes. No ibv_access_flags bit it keeps uses
// it (bit 28 is in the optional range, which the key table never holds).
inline constexpr uint32_t kNullKey = 1u << 28;
inline constexpr uint64_t kNullChunk = 1ull << 20;
// Set in a KeyView's access bits for a memory window's key (transport/window_key.h): a range of
// an MR of the owner, for remote access only (IBA 10.6.7).
inline constexpr uint32_t kWindowKey = 1u << 30;
// Set in a window key's `pd` (bit 31 of the PD's local number, which real PDs never reach) when
// the window is a type 2 window bound to a QP: the low 24 bits then hold that QP's number in
// place of the PD. Remote accesses must arrive through that QP (IBA 10.6.7.2.2, type 2B); its
// PD equalled the window's when it bound it (C10-72) and a QP's PD never changes.
inline constexpr uint64_t kQpBound = 1ull << 31;

// A registration as an initiator checks it.
struct KeyView {
  uint32_t key = 0;
  uint32_t access = 0;  // ibv_access_flags
  uint64_t pd = 0;      // host-unique PD id; its high 32 bits are the slot of the PD's creator
  uint64_t addr = 0;    // owner's virtual address of the first byte
  uint64_t length = 0;
  uint64_t iova = 0;    // the address remote peers use for the first byte
  // The process slot whose memory (and arena) the key reaches. Apart from the PD's id: a PD
  // shared through an imported context (ibv_import_pd(3)) holds MRs of every process that
  // registers on it, each of its own memory, as the PD of a kernel uverbs file does.
  uint32_t owner = 0;
  uint32_t owner_process_slot() const { return owner; }
  bool indirect() const { return (access & kIndirectKey) != 0; }
  // IBV_ACCESS_ON_DEMAND: the pages are not pinned; each access finds them (OnDemandPresent).
  bool on_demand() const { return (access & access_bit::kOnDemand) != 0; }
  bool window() const { return (access & kWindowKey) != 0; }
  bool null_key() const { return (access & kNullKey) != 0; }
  bool qp_bound() const { return window() && (pd & kQpBound) != 0; }
  uint32_t bound_qpn() const { return static_cast<uint32_t>(pd) & 0xffffff; }
  fabric::SharedRef layout() const {
    return {static_cast<uint32_t>(addr >> 32), static_cast<uint32_t>(addr)};
  }
};

// [addr, +length) lies inside [base, +size), without overflow: the one range rule of every key,
// window, layout and landing check (IBA 10.6.3: an access outside the region is a protection
// error).
inline bool RangeWithin(uint64_t base, uint64_t size, uint64_t addr, uint64_t length) {
  return addr >= base && length <= size && addr - base <= size - length;
}

// [addr, +length) of key `k`'s address space (its iova) is inside the registration.
inline bool KeyCovers(const KeyView& k, uint64_t addr, uint64_t length) {
  return RangeWithin(k.iova, k.length, addr, length);
}

// The "page fault" of an on-demand key (IBV_ACCESS_ON_DEMAND): [host_addr, +length) of the
// owner's memory is mapped now -- writable if `writes`. The range rule (KeyCovers) is checked
// first; this one follows the owner's address space as it is now, so memory mapped after the
// registration is reachable and an unmapped page fails the access as a NIC's unresolvable page
// fault does (rxe_odp.c: the copy fails with -EFAULT, the responder NAKs with a remote access
// error and a local access completes IBV_WC_LOC_PROT_ERR). Reads the owner's /proc maps: ODP
// trades a system call per access for never pinning. Non-ODP keys: always true. Known limit: a
// page the application unmaps between this check and the copy (while its own operation on it
// is in flight) is not caught when the memory is this process's (memcpy, not process_vm_*).
bool OnDemandPresentSlow(fabric::HostRegistry& registry, const KeyView& k, uint64_t host_addr, uint64_t length,
                         bool writes);
inline bool OnDemandPresent(fabric::HostRegistry& registry, const KeyView& k, uint64_t host_addr, uint64_t length,
                            bool writes) {
  return !k.on_demand() || OnDemandPresentSlow(registry, k, host_addr, length, writes);  // (a call per ODP access only)
}

// Key index in the host table: keys are (slot + 1) << 8 | variant.
inline uint32_t KeySlot(uint32_t key) { return (key >> 8) - 1; }

// A slot of the key table taken by this process (for an MR, mkey or window) and its first key:
// the variant is the slot's allocation count, so a stale key of a freed slot does not match a
// new one (IBA 10.6.3.1: the key "variant" portion). Nothing is published yet.
struct NewKey {
  uint32_t slot = 0;
  uint32_t key = 0;
};
// ENOMEM (naming the table's rule) when the table is full.
Result<NewKey> AllocateKey(fabric::HostRegistry& registry);

// Owner side.
void PublishKey(fabric::HostRegistry& registry, uint32_t slot, const KeyView& view);
// Marks the key invalid and waits until no access is in flight. Pins of processes that died are
// dropped at once (fabric/host/pin_line.h), never waited for.
void WithdrawKey(fabric::HostRegistry& registry, uint32_t slot);
// The key `slot` holds now (0: none).
uint32_t KeyHeldBy(fabric::HostRegistry& registry, uint32_t slot);
// Any process: invalidates `key` if it is still what its slot holds (compare and swap, so of
// two invalidations racing one wins) and waits until no access is in flight. False if the
// slot held another key (or none).
bool InvalidateKey(fabric::HostRegistry& registry, uint32_t key);

// True when a key of this process -- published, or withdrawn while accesses still hold pins --
// covers a byte of [lo, hi) of its memory (indirect keys are skipped: their MRs are keys of
// their own). A key being rewritten counts. Reads the table only, allocates nothing:
// fabric/host/private_share.h calls it while the other threads of the process are parked.
bool OwnKeysTouch(fabric::HostRegistry& registry, uint64_t lo, uint64_t hi);

// Whether an access holds key slot `slot` now, in any process (pinned or announced; a dead
// process's not yet dropped counts too). For tests and OwnKeysTouch.
bool KeyAccessed(fabric::HostRegistry& registry, uint32_t slot);

// What this process's waits for key pins have done so far (for tests and `softverbs status`).
struct KeyWaitCounters {
  std::atomic<uint64_t> dead_pins_cleared{0};  // pins of dead initiators dropped without waiting
  std::atomic<uint64_t> live_waits{0};         // withdrawals that waited for live initiators
  std::atomic<uint64_t> gave_up{0};            // ... and stopped waiting after the limit
};
KeyWaitCounters& KeyWaits();

// An access in flight through a key: the registration cannot be withdrawn while it lives.
class KeyPin {
 public:
  KeyPin() = default;
  KeyPin(KeyPin&& o) noexcept
      : pin_(std::exchange(o.pin_, nullptr)), hazard_(std::exchange(o.hazard_, nullptr)), pinner_(o.pinner_),
        view_(o.view_) {}
  KeyPin& operator=(KeyPin&& o) noexcept;
  KeyPin(const KeyPin&) = delete;
  KeyPin& operator=(const KeyPin&) = delete;
  ~KeyPin() {
    // A retraction is one store to this thread's line: inline (two of them per work request).
    if (hazard_ != nullptr) {
      fabric::Retract(hazard_);
      hazard_ = nullptr;
    }
    if (pin_ != nullptr) Release();
  }

  // Pins `key` if it names a live registration; otherwise an empty pin.
  static KeyPin Acquire(fabric::HostRegistry& registry, uint32_t key);
  // The pin of an access that announced `view.key` in this thread's line (`hazard`) and found it
  // current (HeldKey::Current): retracted when the pin goes.
  static KeyPin Announced(std::atomic<uint32_t>* hazard, const KeyView& view) {
    KeyPin pin;
    pin.hazard_ = hazard;
    pin.view_ = view;
    return pin;
  }
  // The registration `key` names now, without pinning it: for checks whose access happens
  // later under a pin of its own (a landed message is written by the owner's poll).
  static bool Peek(fabric::HostRegistry& registry, uint32_t key, KeyView* view);
  explicit operator bool() const { return pin_ != nullptr || hazard_ != nullptr; }
  const KeyView& view() const { return view_; }
  // True once the owner withdrew the key (it waits for this pin): an access in progress stops
  // at its next check (transport/host/mapped_copy.h, bounded copies).
  bool Withdrawn(fabric::HostRegistry& registry) const;

 private:
  void Release();
  // A pin is held one of two ways: announced in this thread's hazard line (the usual way: a
  // line only this thread writes, fabric/host/hazard_lines.h), or counted on the key slot's
  // PinLine (a thread without a line of its own, a registry that is not this process's).
  std::atomic<uint64_t>* pin_ = nullptr;  // the word of the key slot's PinLine counting this pin
  std::atomic<uint32_t>* hazard_ = nullptr;  // the entry of this thread's line announcing it
  uint32_t pinner_ = 0;
  KeyView view_;
};

// A key kept resolved across accesses by one user -- a route's R_Key, a requester's lkey (issue
// 16: resolving it per work request cost more than the access). The view is read once, with the
// entry's seqlock count; an access then announces the key in this thread's hazard line and
// re-reads only the count and the key. The owner changes the count whenever it publishes or
// withdraws (PublishKey, WithdrawKey) and an invalidation changes the key (InvalidateKey): an
// access that finds both as learned uses exactly the view a full read would give, and a
// withdrawal after that waits for its announcement (the order of fabric/host/hazard_lines.h).
// The rules are the caller's, applied to view() on every access (KeyAdmits, KeyCovers).
class HeldKey {
 public:
  // Reads `key`'s registration now; false (nothing kept) if it names none.
  bool Learn(fabric::HostRegistry& registry, uint32_t key);
  void Forget() { *this = HeldKey(); }
  uint32_t key() const { return view_.key; }  // 0: nothing kept
  const KeyView& view() const { return view_; }
  // What to announce in this thread's hazard line before Current (fabric::Announce).
  uint32_t hazard_value() const { return KeySlot(view_.key) + 1; }
  // After the announcement and its barrier: the registration is still the one learned.
  bool Current() const {
    return entry_->seq.load(std::memory_order_acquire) == seq_ &&
           entry_->key.load(std::memory_order_acquire) == view_.key;
  }
  // The seqlock count learned with the view (tests).
  uint32_t seq() const { return seq_; }

 private:
  fabric::KeyEntry* entry_ = nullptr;
  uint32_t seq_ = 0;
  KeyView view_;
};

// This thread's hazard line in `registry` (nullptr: a registry apart from this process's, or a
// process whose threads took every line): where HeldKey's users announce.
fabric::HazardLine* KeyHazards(fabric::HostRegistry& registry);
// The same for the caller's own process, without the registry's lookup (once per work request).
inline fabric::HazardLine* KeyHazards(fabric::LocalProcess& local) { return fabric::ThisThreadHazards(local); }
// Lets go of a key a caller holds by its announcement (HoldHeldKey, HoldAdmittedKey).
inline void ReleaseHeldKey(std::atomic<uint32_t>* hold) { fabric::Retract(hold); }

}  // namespace softverbs::transport
