// The state one host shares: a memory region every softverbs process of the same user in the same
// network namespace maps (DESIGN.md section 3: a host). It allocates the numbers that must be
// unique host-wide -- QP numbers, SRQ numbers, memory keys -- and survives a process dying at
// any instruction: an entry belongs to a ProcessToken, and entries of dead processes are reclaimed.
//
// The region is /dev/shm/softverbs-<uid>-<netns inode>-v<layout>[-<SOFTVERBS_HOST>], mode 0600. All-zero is
// its valid empty state, so creating it needs no initialisation step that a crash could cut short.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "base/status.h"
#include "base/unique_fd.h"
#include "fabric/host/process_token.h"

namespace softverbs::fabric {

// One entry of a host table. `payload` belongs to the table's user (e.g. the endpoint directory
// of a QP); the registry only manages ownership.
struct alignas(64) HostSlot {
  std::atomic<uint64_t> owner;       // ProcessToken::raw(), 0 when free
  std::atomic<uint32_t> generation;  // bumped at every allocation (memory keys use it)
  uint32_t reserved;
  uint8_t payload[48];
};
static_assert(sizeof(HostSlot) == 64);

// A fixed-size table of slots inside the shared region.
class SlotTable {
 public:
  SlotTable() = default;
  SlotTable(std::atomic<uint64_t>* cursor, HostSlot* slots, uint32_t count)
      : cursor_(cursor), slots_(slots), count_(count) {}

  // Claims a free slot for `owner` and returns its index. Indices rotate, so a number freed now is
  // reused as late as possible (a stale peer reference then rarely hits a new object). When the
  // table is full, slots of dead owners are reclaimed; ENOMEM if none.
  Result<uint32_t> Allocate(ProcessToken owner);
  // Releases a slot owned by `owner`; false if it is not theirs.
  bool Free(uint32_t index, ProcessToken owner);
  // Reclaims every slot whose owner died; returns how many.
  uint32_t ReclaimDead();

  HostSlot& slot(uint32_t index) { return slots_[index]; }
  uint32_t count() const { return count_; }

 private:
  std::atomic<uint64_t>* cursor_ = nullptr;
  HostSlot* slots_ = nullptr;
  uint32_t count_ = 0;
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
  static constexpr size_t kKeyBackingBytes = 40;   // per key slot: fabric/host/shared_backing.h
  static constexpr size_t kKeyPinBytes = 64;       // per key slot: its pin count, on a line of its own

  // The registry of this process's host, opened on first use. Fails (with the reason) if the
  // region cannot be created or belongs to another user.
  static Result<HostRegistry*> Get();

  // Opens (creating if needed) the registry region at `shm_name` ("/softverbs-..."). For tests.
  static Result<HostRegistry*> OpenForTesting(const std::string& shm_name);

  SlotTable& qps() { return qps_; }
  SlotTable& keys() { return keys_; }
  SlotTable& srqs() { return srqs_; }
  SlotTable& processes() { return processes_; }
  SlotTable& mcasts() { return mcasts_; }
  // The lock word serialising atomic operations on target addresses that hash to `stripe`
  // (TokenLock: zero is unlocked, so the zeroed region needs no initialisation).
  std::atomic<uint64_t>& atomic_stripe(uint32_t stripe) { return stripes_[stripe % kAtomicStripes]; }
  // Key slot `slot`'s side record: how peers map the registration's memory when it is shared
  // (a BackingRecord, fabric/host/shared_backing.h).
  uint8_t* key_backing(uint32_t slot) { return backings_ + static_cast<size_t>(slot % kKeySlots) * kKeyBackingBytes; }
  // Key slot `slot`'s count of accesses in flight (transport/key_table.h). Apart from the key's
  // entry: pins are written on every access, the entry is read by everyone who checks the key.
  std::atomic<uint32_t>& key_pins(uint32_t slot) {
    return *reinterpret_cast<std::atomic<uint32_t>*>(pins_ + static_cast<size_t>(slot % kKeySlots) * kKeyPinBytes);
  }
  const std::string& name() const { return name_; }

  // The shm name of this host: "/softverbs-<uid>-<netns inode>-v<layout>" plus "-<SOFTVERBS_HOST>".
  static std::string HostName();

 private:
  HostRegistry() = default;
  Status Open(const std::string& shm_name);

  std::string name_;
  UniqueFd fd_;
  Mapping map_;
  SlotTable qps_, keys_, srqs_, processes_, mcasts_;
  std::atomic<uint64_t>* stripes_ = nullptr;
  uint8_t* backings_ = nullptr;
  uint8_t* pins_ = nullptr;
};

}  // namespace softverbs::fabric
