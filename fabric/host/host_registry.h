// The state one host shares: a memory region every softverbs process of the same user in the same
// network namespace maps (DESIGN.md section 3: a host). It allocates the numbers that must be
// unique host-wide -- QP numbers, SRQ numbers, memory keys -- and survives a process dying at
// any instruction: an entry belongs to a ProcessToken, and entries of dead processes are reclaimed.
// XRC domains opened through a file are found here by the file's identity (XrcdEntry).
//
// The region is /dev/shm/softverbs-<uid>-<netns inode>-v<layout>[-<SOFTVERBS_HOST>], mode 0600. All-zero is
// its valid empty state, so creating it needs no initialisation step that a crash could cut short.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>

#include "base/status.h"
#include "base/unique_fd.h"
#include "fabric/host/process_token.h"

namespace softverbs::fabric {

struct PinLine;     // fabric/host/pin_line.h
struct HazardLine;  // fabric/host/hazard_lines.h

// One entry of a host table. `payload` belongs to the table's user (e.g. the endpoint directory
// of a QP); the registry only manages ownership.
struct alignas(64) HostSlot {
  std::atomic<uint64_t> owner;       // ProcessToken::raw(), 0 when free
  std::atomic<uint32_t> generation;  // bumped at every allocation (memory keys use it)
  uint32_t reserved;
  uint8_t payload[48];
};
static_assert(sizeof(HostSlot) == 64);

// A fixed-capacity table of slots inside the shared region. Only its first `extent()` slots are
// in use: the extent grows (doubling) when they are all taken, so the pages of the region that
// are ever touched -- and so allocated, the file being sparse -- follow the host's use.
class SlotTable {
 public:
  // Reserves the backing store of slots [from, to) before they are used (false: no space).
  using Reserve = std::function<bool(uint32_t from, uint32_t to)>;
  static constexpr uint32_t kInitialExtent = 1024;

  SlotTable() = default;
  // A table using all `count` slots from the start (tests).
  SlotTable(std::atomic<uint64_t>* cursor, HostSlot* slots, uint32_t count)
      : cursor_(cursor), slots_(slots), count_(count) {}
  // A table whose extent lives at `extent` (0 = kInitialExtent, so the zeroed region is valid).
  SlotTable(std::atomic<uint64_t>* cursor, std::atomic<uint64_t>* extent, HostSlot* slots, uint32_t count,
            Reserve reserve)
      : cursor_(cursor), extent_(extent), slots_(slots), count_(count), reserve_(std::move(reserve)) {}

  // Claims a free slot for `owner` and returns its index. Indices rotate, so a number freed now is
  // reused as late as possible (a stale peer reference then rarely hits a new object). When the
  // extent is full, slots of dead owners are reclaimed, then the extent grows; ENOMEM when the
  // whole table is taken by live owners (or its store cannot be reserved).
  Result<uint32_t> Allocate(ProcessToken owner);
  // Releases a slot owned by `owner`; false if it is not theirs.
  bool Free(uint32_t index, ProcessToken owner);
  // Reclaims every slot whose owner died; returns how many. `alive` caches liveness by token
  // across tables (one /proc read per process, not per slot).
  uint32_t ReclaimDead();
  uint32_t ReclaimDead(std::unordered_map<uint64_t, bool>& alive);
  // Called for a slot of a dead owner before it is freed (withdrawing what it published).
  void set_on_reclaim(std::function<void(HostSlot&)> fn) { on_reclaim_ = std::move(fn); }
  // The word bumped after every slot freed or reclaimed (HostRegistry::route_epoch).
  void set_epoch(std::atomic<uint64_t>* epoch) { epoch_ = epoch; }

  HostSlot& slot(uint32_t index) { return slots_[index]; }
  uint32_t count() const { return count_; }
  // Slots [0, extent()) may be in use; the others are untouched.
  uint32_t extent() const {  // inline: every key and QP lookup asks it
    if (extent_ == nullptr) return count_;
    const uint64_t e = extent_->load(std::memory_order_acquire);
    return e == 0 ? (kInitialExtent < count_ ? kInitialExtent : count_)
                  : static_cast<uint32_t>(e < count_ ? e : count_);
  }
  // Reserves the store of the current extent (when a process opens the region).
  bool ReserveInitial() { return !reserve_ || reserve_(0, extent()); }

 private:
  bool Grow(uint32_t from);
  void BumpEpoch() {
    if (epoch_ != nullptr) epoch_->fetch_add(1, std::memory_order_seq_cst);
  }

  std::atomic<uint64_t>* cursor_ = nullptr;
  std::atomic<uint64_t>* epoch_ = nullptr;
  std::atomic<uint64_t>* extent_ = nullptr;
  HostSlot* slots_ = nullptr;
  uint32_t count_ = 0;
  Reserve reserve_;
  std::function<void(HostSlot&)> on_reclaim_;
};

class HostRegistry {
 public:
  // Table sizes: they bound the device's max_qp, max_mr (+ max_mw) and max_srq.
  static constexpr uint32_t kQpSlots = 65536;
  static constexpr uint32_t kKeySlots = 131072;
  static constexpr uint32_t kSrqSlots = 65536;
  static constexpr uint32_t kProcessSlots = 4096;  // processes using softverbs at once
  static constexpr uint32_t kAtomicStripes = 4096;
  static constexpr uint32_t kMcastSlots = 1024;    // multicast attachments (group, QP) host-wide
  static constexpr uint32_t kXrcdSlots = 4096;     // XRC domain handles open host-wide (XrcdEntry)
  static constexpr size_t kKeyBackingBytes = 40;   // per key slot: fabric/host/shared_backing.h
  static constexpr size_t kKeyPinBytes = 64;       // per key slot: its pin count, on a line of its own
  static constexpr uint32_t kHazardLinesPerProcess = 16;  // threads of a process announcing keys at once

  // The registry of this process's host, opened on first use. Fails (with the reason) if the
  // region cannot be created or belongs to another user. The process stays a user of the region
  // (a shared flock on it) until it exits; the last user to exit removes it (docs/data-path.md,
  // "The registry's life").
  static Result<HostRegistry*> Get();

  // Opens (creating if needed) the registry region at `shm_name` ("/softverbs-..."). For tests.
  static Result<HostRegistry*> OpenForTesting(const std::string& shm_name);

  SlotTable& qps() { return qps_; }
  SlotTable& keys() { return keys_; }
  SlotTable& srqs() { return srqs_; }
  SlotTable& processes() { return processes_; }
  SlotTable& mcasts() { return mcasts_; }
  // One slot per open XRC domain handle (ibv_open_xrcd), naming its domain (XrcdEntry); and the
  // lock that makes "find the file's domain, else create it" one step across processes.
  SlotTable& xrcds() { return xrcds_; }
  std::atomic<uint64_t>& xrcd_lock() { return *xrcd_lock_; }
  // Changes whenever something a kept route checks may have changed: a key written (registered,
  // withdrawn, invalidated, bound), a QP's state or attributes published, a QP destroyed, a slot
  // freed or reclaimed (transport/host/direct_route.h: a route whose checks passed under a value
  // trusts them while it reads that value). Bump after the change and before waiting for the
  // accesses in flight: a sequentially consistent read-modify-write, so an initiator that
  // announced itself and then read the old value is one the wait sees (the order of
  // fabric/host/hazard_lines.h).
  const std::atomic<uint64_t>& route_epoch() const { return *route_epoch_; }
  void BumpRouteEpoch() { route_epoch_->fetch_add(1, std::memory_order_seq_cst); }
  // The lock word serialising atomic operations on target addresses that hash to `stripe`
  // (TokenLock: zero is unlocked, so the zeroed region needs no initialisation).
  std::atomic<uint64_t>& atomic_stripe(uint32_t stripe) { return stripes_[stripe % kAtomicStripes]; }
  // Key slot `slot`'s side record: how peers map the registration's memory when it is shared
  // (a BackingRecord, fabric/host/shared_backing.h).
  uint8_t* key_backing(uint32_t slot) { return backings_ + static_cast<size_t>(slot % kKeySlots) * kKeyBackingBytes; }
  // Key slot `slot`'s accesses in flight, counted per pinning process (fabric/host/pin_line.h,
  // transport/key_table.h). Apart from the key's entry: pins are written on every access, the
  // entry is read by everyone who checks the key.
  PinLine& key_pins(uint32_t slot) {
    return *reinterpret_cast<PinLine*>(pins_ + static_cast<size_t>(slot % kKeySlots) * kKeyPinBytes);
  }
  // Process slot `slot`'s kHazardLinesPerProcess lines, one per thread that accesses memory
  // keys (fabric/host/hazard_lines.h); reserved with the slot.
  HazardLine* hazards(uint32_t slot) {
    return reinterpret_cast<HazardLine*>(hazards_ + static_cast<size_t>(slot % kProcessSlots) * kHazardBlockBytes);
  }
  const std::string& name() const { return name_; }

  // Reclaims the entries of every dead process in every table (process slots, QP numbers, keys
  // -- withdrawn first --, SRQs, multicast attachments); returns how many. Run when a process
  // joins the host and by `softverbs status`.
  uint32_t ReclaimDead();
  // Stops being a user of the region; removes its name when no other process uses it. Run at
  // exit (registered by Get); the mapping stays valid for the rest of the process.
  void Leave();
  // Whether the region's name still names the file this process mapped.
  bool NameIsOurs() const;

  // The shm name of this host: "/softverbs-<uid>-<netns inode>-v<layout>" plus "-<SOFTVERBS_HOST>".
  static std::string HostName();

 private:
  HostRegistry() = default;
  Status Open(const std::string& shm_name);
  Status OpenOnce(const std::string& shm_name);
  Status MakeTables(void* header);
  // Allocates the file's store for [offset, offset + length) (posix_fallocate); false if full.
  bool Reserve(size_t offset, size_t length);
  // In a child of fork(): a lock of its own (the parent's is shared with it until then).
  Status Rejoin();

  std::string name_;
  UniqueFd fd_;
  UniqueFd lock_fd_;   // a descriptor of its own holding this process's shared flock
  pid_t lock_pid_ = 0; // the process holding it
  Mapping map_;
  SlotTable qps_, keys_, srqs_, processes_, mcasts_, xrcds_;
  std::atomic<uint64_t>* xrcd_lock_ = nullptr;
  std::atomic<uint64_t>* route_epoch_ = nullptr;
  std::atomic<uint64_t>* stripes_ = nullptr;
  uint8_t* backings_ = nullptr;
  uint8_t* pins_ = nullptr;
  uint8_t* hazards_ = nullptr;
  static constexpr size_t kHazardBlockBytes = kHazardLinesPerProcess * 64;
};

}  // namespace softverbs::fabric
