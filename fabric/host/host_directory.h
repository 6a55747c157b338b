// Who is where on this host: the typed entries of the host registry tables, this process's own
// membership (its process slot and shared arena), and the peers it has reached.
#pragma once

#include <time.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "base/status.h"
#include "fabric/host/host_registry.h"
#include "fabric/host/peer_process.h"
#include "fabric/host/shared_arena.h"

namespace softverbs::fabric {

// Payload of a process-table slot: where the process's arena segments are (fd numbers in the
// owner; peers borrow them). A segment fd is published before any SharedRef into it is.
struct ProcessEntry {
  std::array<std::atomic<int32_t>, SharedArena::kMaxSegments> segment_fds;
};
static_assert(sizeof(ProcessEntry) <= sizeof(HostSlot::payload));

// Payload of a QP-table slot: the endpoint a sender looks up by QP number. An XRC SRQ's slot of
// the SRQ table holds the same entry (qp_num being its SRQ number): XRC senders name the SRQ.
struct QpEntry {
  std::atomic<uint32_t> process_slot;  // the owner's process-table slot
  std::atomic<uint32_t> qp_num;        // written last: non-zero means the entry is complete
  SharedRef block;                     // the QP's shared endpoint in the owner's arena
};
static_assert(sizeof(QpEntry) <= sizeof(HostSlot::payload));

// Payload of an XRC-domain slot: one open handle (ibv_open_xrcd) of the domain named by
// (dev, ino) -- the file it was opened through (st_dev, st_ino), as the kernel keys its XRCDs by
// inode; a domain opened without a file has dev kAnonymousXrcd and a host-unique ino.
struct XrcdEntry {
  std::atomic<uint64_t> dev;
  std::atomic<uint64_t> ino;
  std::atomic<uint32_t> ready;  // written last: non-zero means the entry is complete
};
static_assert(sizeof(XrcdEntry) <= sizeof(HostSlot::payload));
inline constexpr uint64_t kAnonymousXrcd = ~0ull;

// Payload of a key-table slot: what an initiator checks before touching registered memory. A
// seqlock guards the fields (odd `seq` = being written); they are atomics written with release
// and read with acquire, which orders them against `seq` without fences (and costs nothing on
// x86). The accesses in flight, which deregistration waits for as hardware invalidation does,
// are counted on a line of their own (HostRegistry::key_pins): the entry stays read-mostly.
struct KeyEntry {
  std::atomic<uint32_t> seq;
  std::atomic<uint32_t> key;     // the full lkey/rkey; 0 = invalid
  std::atomic<uint32_t> access;  // ibv_access_flags
  std::atomic<uint32_t> owner;   // process slot whose memory (and arena) the key reaches
  std::atomic<uint64_t> pd;      // host-unique PD handle
  std::atomic<uint64_t> addr;    // owner's virtual address of the first byte
  std::atomic<uint64_t> length;
  std::atomic<uint64_t> iova;    // address remote peers use for the first byte
};
static_assert(sizeof(KeyEntry) <= sizeof(HostSlot::payload));

template <typename Entry>
Entry& EntryOf(HostSlot& slot) {
  return *reinterpret_cast<Entry*>(slot.payload);
}

// A peer process as this process sees it: its handle and the segments of its arena mapped here.
class Peer {
 public:
  // Watches the process's exit (fabric/host/death_watch.h) where it can.
  Peer(uint32_t process_slot, std::shared_ptr<PeerProcess> process);
  PeerProcess& process() { return *process_; }
  // False once the peer's process has exited (issue 17 items 2 and 3): seen when it happens
  // where its exit is watched (a flag the watch raises: one load per work request), otherwise
  // at most kLivenessPeriodMs late -- a load of a coarse clock (vDSO, no system call) and a
  // pidfd poll at most once a period. A NIC peer's QPs vanish with its process; a target that
  // died is not answered for (transport/host/host_target.h, Find).
  bool AliveRecently() {  // (inline: once per work request)
    if (dead_->load(std::memory_order_acquire)) return false;
    if (watched_) return true;
    // The coarse clock is read from the vDSO page (no system call); its tick (1-10 ms) bounds
    // how late a death is seen, as the kernel's teardown of a dead process's QPs bounds a NIC's.
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    const int64_t now = static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
    return now - checked_ns_.load(std::memory_order_relaxed) < kLivenessPeriodMs * 1000000 || CheckAlive(now);
  }
  static constexpr int64_t kLivenessPeriodMs = 2;
  // This process's address of `ref` in the peer's arena (mapping the segment on first use), or
  // an error if the segment cannot be reached.
  Result<void*> At(SharedRef ref, HostRegistry& registry);
  // At, for a segment mapped already (nearly every call): nullptr otherwise, and then At.
  void* AtMapped(SharedRef ref) const {
    if (ref.segment >= SharedArena::kMaxSegments || ref.offset == 0) return nullptr;
    const RemoteSegment* mapped = mapped_[ref.segment].load(std::memory_order_acquire);
    return mapped != nullptr ? mapped->At(ref.offset) : nullptr;
  }

 private:
  // AliveRecently once the period has passed: one thread looks (`now`), the others go on with
  // the last verdict meanwhile.
  bool CheckAlive(int64_t now);

  uint32_t process_slot_;
  std::shared_ptr<PeerProcess> process_;
  std::atomic<int64_t> checked_ns_{0};  // when liveness was last checked (CLOCK_MONOTONIC_COARSE)
  // Raised by CheckAlive or by the watch, which may outlive this peer (shared).
  std::shared_ptr<std::atomic<bool>> dead_ = std::make_shared<std::atomic<bool>>(false);
  bool watched_ = false;  // the watch raises dead_: no clock to read
  std::mutex mu_;  // mapping a segment
  std::array<std::shared_ptr<RemoteSegment>, SharedArena::kMaxSegments> segments_;
  // The mapped segments, published for lock-free lookups (owned by segments_).
  std::array<std::atomic<const RemoteSegment*>, SharedArena::kMaxSegments> mapped_{};
};

namespace internal {
// Incremented in every child of fork() (pthread_atfork, host_directory.cc).
extern std::atomic<uint32_t> g_fork_generation;
}  // namespace internal

// This process's membership of the host: its process slot, its arena, and its cache of peers.
// One per process (a child after fork() gets its own on first use).
class LocalProcess {
 public:
  static Result<LocalProcess*> Get();

  HostRegistry& registry() { return *registry_; }
  // False in a child of fork(): the parent's objects are not the child's (ibv_fork_init(3)).
  bool is_current() const { return fork_generation_ == ForkGeneration(); }
  // Incremented in every child of fork(), so a check is a load, not a system call.
  static uint32_t ForkGeneration() { return internal::g_fork_generation.load(std::memory_order_relaxed); }
  uint32_t slot() const { return slot_; }
  ProcessToken token() const { return token_; }
  // How this process's pins are recorded (fabric/host/pin_line.h): its slot and that slot's
  // allocation count, so a withdrawer tells them from a dead predecessor's.
  uint32_t pinner_id() const { return pinner_id_; }

  // Shared blocks peers can reach; their segments are published in the process entry.
  Result<SharedRef> Allocate(size_t size);
  void Free(SharedRef ref, size_t size) { arena_.Free(ref, size); }
  void* At(SharedRef ref) const { return arena_.At(ref); }

  // A host-unique number for an fd this process publishes (see PeerProcess::BorrowFd).
  uint64_t NewFdTag() { return static_cast<uint64_t>(slot_) << 32 | (next_tag_.fetch_add(1) + 1); }

  // The peer owning process-table slot `slot` (this process included), cached.
  Result<std::shared_ptr<Peer>> PeerAt(uint32_t slot);

  // Writes this process is making into its own registered memory on a peer's behalf (a landed
  // message scattered by ibv_poll_cq, checked without a key pin): ibv_dereg_mr waits for them
  // as it waits for peers' pins. Process-local, so counting them moves no shared cache line.
  std::atomic<uint32_t>& own_writes() { return own_writes_; }

 private:
  LocalProcess(HostRegistry* registry, uint32_t slot, ProcessToken token, uint32_t pinner_id)
      : registry_(registry), slot_(slot), token_(token), pinner_id_(pinner_id) {}

  HostRegistry* registry_;
  uint32_t slot_;
  ProcessToken token_;
  uint32_t pinner_id_;
  SharedArena arena_;
  std::mutex mu_;
  std::unordered_map<uint64_t, std::shared_ptr<Peer>> peers_;  // by the peer's token
  std::atomic<uint32_t> next_tag_{0};
  std::atomic<uint32_t> own_writes_{0};
  uint32_t fork_generation_ = ForkGeneration();
};

}  // namespace softverbs::fabric
