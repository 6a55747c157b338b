#include "fabric/host/host_registry.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "fabric/host/host_directory.h"


namespace softverbs::fabric {
namespace {

constexpr uint64_t kMagic = 0x47455256'534f5353ull;  // "SSOSVREG"
// 8: XRC domains, XRC SRQ entries; 9: hazard lines; 10: key owners, wire TM state; 11: one-word
// robust mutexes in the arenas' rings (fabric/host/robust_mutex.h); 12: stamped CQ entries and
// receive WQEs (transport/cq_ring.h, transport/recv_queue.h)
constexpr int kLayoutVersion = 13;
constexpr unsigned long long kInitialPidNamespace = 0xEFFFFFFCull;  // PROC_PID_INIT_INO

struct RegionHeader {
  std::atomic<uint64_t> magic;
  std::atomic<uint64_t> qp_cursor;
  std::atomic<uint64_t> key_cursor;
  std::atomic<uint64_t> srq_cursor;
  std::atomic<uint64_t> process_cursor;
  std::atomic<uint64_t> mcast_cursor;
  // Each table's extent (SlotTable::extent; 0 = the initial one).
  std::atomic<uint64_t> qp_extent, key_extent, srq_extent, process_extent, mcast_extent;
  std::atomic<uint64_t> xrcd_cursor, xrcd_extent;
  std::atomic<uint64_t> xrcd_lock;  // TokenLock: an XRCD's look-up and creation are one step
  uint8_t pad[2 * sizeof(uint64_t)];
  // HostRegistry::route_epoch, on a line of its own (read on every kept RDMA WRITE, READ or
  // atomic; written only when something a route checks changes).
  alignas(64) std::atomic<uint64_t> route_epoch;
  uint8_t reserved[4096 - 17 * sizeof(uint64_t)];
};
static_assert(offsetof(RegionHeader, route_epoch) == 128);
static_assert(sizeof(RegionHeader) == 4096);

constexpr size_t kQpOffset = sizeof(RegionHeader);
constexpr size_t kKeyOffset = kQpOffset + HostRegistry::kQpSlots * sizeof(HostSlot);
constexpr size_t kSrqOffset = kKeyOffset + HostRegistry::kKeySlots * sizeof(HostSlot);
constexpr size_t kProcessOffset = kSrqOffset + HostRegistry::kSrqSlots * sizeof(HostSlot);
constexpr size_t kStripeOffset = kProcessOffset + HostRegistry::kProcessSlots * sizeof(HostSlot);
constexpr size_t kMcastOffset = kStripeOffset + HostRegistry::kAtomicStripes * sizeof(uint64_t);
constexpr size_t kBackingOffset = kMcastOffset + HostRegistry::kMcastSlots * sizeof(HostSlot);
constexpr size_t kPinOffset = kBackingOffset + HostRegistry::kKeySlots * HostRegistry::kKeyBackingBytes;
static_assert(kPinOffset % 64 == 0);
constexpr size_t kXrcdOffset = kPinOffset + HostRegistry::kKeySlots * HostRegistry::kKeyPinBytes;
constexpr size_t kHazardOffset = kXrcdOffset + HostRegistry::kXrcdSlots * sizeof(HostSlot);
constexpr size_t kHazardBytes = HostRegistry::kHazardLinesPerProcess * 64;  // per process slot
static_assert(kHazardOffset % 64 == 0);
constexpr size_t kRegionSize = kHazardOffset + HostRegistry::kProcessSlots * kHazardBytes;

Status Errno(const char* what, const std::string& name) {
  int e = errno;
  return Status(e, std::string(what) + " " + name + ": " + strerror(e));
}

}  // namespace

bool SlotTable::Grow(uint32_t from) {
  const uint32_t to = std::min<uint64_t>(static_cast<uint64_t>(from) * 2, count_);
  // Reserve the store first, so a full /dev/shm is a refusal here, not a SIGBUS in a verb later.
  if (reserve_ && !reserve_(from, to)) return false;
  uint64_t expected = extent_->load(std::memory_order_acquire);
  while ((expected == 0 ? std::min(kInitialExtent, count_) : expected) < to &&
         !extent_->compare_exchange_weak(expected, to, std::memory_order_acq_rel)) {
  }
  return true;
}

Result<uint32_t> SlotTable::Allocate(ProcessToken owner) {
  for (int pass = 0; pass < 64; ++pass) {
    const uint32_t extent = this->extent();
    for (uint32_t tries = 0; tries < extent; ++tries) {
      uint32_t i = static_cast<uint32_t>(cursor_->fetch_add(1, std::memory_order_relaxed) % extent);
      HostSlot& s = slots_[i];
      uint64_t expected = 0;
      if (s.owner.load(std::memory_order_relaxed) == 0 &&
          s.owner.compare_exchange_strong(expected, owner.raw(), std::memory_order_acq_rel)) {
        s.generation.fetch_add(1, std::memory_order_relaxed);
        return i;
      }
    }
    if (ReclaimDead() != 0) continue;
    if (extent >= count_ || !Grow(extent)) break;
  }
  return NoMemory("the host table is full (" + std::to_string(count_) + " entries)");
}

bool SlotTable::Free(uint32_t index, ProcessToken owner) {
  if (index >= count_) return false;
  uint64_t expected = owner.raw();
  if (!slots_[index].owner.compare_exchange_strong(expected, 0, std::memory_order_acq_rel)) return false;
  BumpEpoch();  // (a kept route through this entry checks it again)
  return true;
}

uint32_t SlotTable::ReclaimDead() {
  std::unordered_map<uint64_t, bool> alive;
  return ReclaimDead(alive);
}

uint32_t SlotTable::ReclaimDead(std::unordered_map<uint64_t, bool>& alive) {
  uint32_t reclaimed = 0;
  const uint32_t extent = this->extent();
  for (uint32_t i = 0; i < extent; ++i) {
    uint64_t owner = slots_[i].owner.load(std::memory_order_acquire);
    if (owner == 0) continue;
    auto [it, fresh] = alive.try_emplace(owner, false);
    if (fresh) it->second = ProcessToken(owner).IsAlive();
    if (it->second) continue;
    // The owner is dead and never writes again. Mark the slot as being reclaimed by us (another
    // dead token: one bit of the start time flipped), withdraw what it published, then free it
    // -- only if nobody re-marked it meanwhile, so no reclaimer withdraws from a slot that
    // was freed and taken by a new owner.
    const uint64_t marked = owner ^ 0x80000000ull;
    if (!slots_[i].owner.compare_exchange_strong(owner, marked, std::memory_order_acq_rel)) continue;
    if (on_reclaim_) on_reclaim_(slots_[i]);
    uint64_t expected = marked;
    if (slots_[i].owner.compare_exchange_strong(expected, 0, std::memory_order_acq_rel)) ++reclaimed;
  }
  if (reclaimed != 0) BumpEpoch();
  return reclaimed;
}

std::string HostRegistry::HostName() {
  // A host is one user in one network namespace. Peers reach each other by pid, so processes in
  // another pid namespace (a container sharing the network) are another host: the pid namespace
  // is part of the name when it is not the initial one's.
  struct stat ns {};
  unsigned long long netns = stat("/proc/self/ns/net", &ns) == 0 ? ns.st_ino : 0;
  unsigned long long pidns = stat("/proc/self/ns/pid", &ns) == 0 ? ns.st_ino : 0;
  // The layout version is part of the name: two softverbs versions never share a region.
  std::string name = "/softverbs-" + std::to_string(getuid()) + "-" + std::to_string(netns) + "-v" +
                     std::to_string(kLayoutVersion);
  if (pidns != kInitialPidNamespace) name += "-p" + std::to_string(pidns);
  if (const char* host = getenv("SOFTVERBS_HOST"); host != nullptr && *host != '\0') {
    name += "-";
    for (const char* p = host; *p; ++p) name += (*p == '/') ? '_' : *p;
  }
  return name;
}

bool HostRegistry::NameIsOurs() const {
  struct stat mine {}, named {};
  return fstat(fd_.get(), &mine) == 0 && stat(("/dev/shm" + name_).c_str(), &named) == 0 &&
         mine.st_dev == named.st_dev && mine.st_ino == named.st_ino;
}

namespace {

int FlockRetry(int fd, int op) {
  int r;
  do r = flock(fd, op);
  while (r != 0 && errno == EINTR);
  return r;
}

}  // namespace

Status HostRegistry::Open(const std::string& shm_name) {
  // The last user may remove the name between our shm_open and our lock: then open again.
  for (int attempt = 0; attempt < 64; ++attempt) {
    Status s = OpenOnce(shm_name);
    if (s.code() != ESTALE) return s;
  }
  return Status(EAGAIN, "host registry " + shm_name + " keeps being removed under us");
}

Status HostRegistry::OpenOnce(const std::string& shm_name) {
  name_ = shm_name;
  // 0600: the host's state is the user's own (DESIGN.md section 5.4).
  fd_.reset(shm_open(shm_name.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!fd_.valid()) return Errno("cannot open host registry", shm_name);
  struct stat st {};
  if (fstat(fd_.get(), &st) != 0) return Errno("cannot stat host registry", shm_name);
  if (st.st_uid != getuid())
    return Status(EACCES, "host registry " + shm_name + " belongs to another user");
  // The umask may have widened the mode at creation: the state is the user's own.
  if ((st.st_mode & 077) != 0 && fchmod(fd_.get(), 0600) != 0) return Errno("cannot make private", shm_name);
  // A user holds a shared lock for its whole life; the last one to leave takes the exclusive lock
  // to remove the name. Once we hold ours and the name is still this file, nobody removes it.
  if (FlockRetry(fd_.get(), LOCK_SH) != 0) return Errno("cannot lock host registry", shm_name);
  if (!NameIsOurs()) return Status(ESTALE, "host registry " + shm_name + " was removed meanwhile");
  lock_pid_ = getpid();
  // Sparse: the size is the capacity; only the pages tables reach are allocated (all-zero is
  // the empty state). Extending twice is harmless.
  if (static_cast<size_t>(st.st_size) < kRegionSize && ftruncate(fd_.get(), kRegionSize) != 0)
    return Errno("cannot size host registry", shm_name);
  void* p = mmap(nullptr, kRegionSize, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd_.get(), 0);
  if (p == MAP_FAILED) return Errno("cannot map host registry", shm_name);
  map_ = Mapping(p, kRegionSize);
  // What every process touches is reserved now, so a full /dev/shm is a clean refusal here
  // rather than a SIGBUS inside a verb later; tables reserve as their extent grows.
  if (!Reserve(0, kQpOffset) || !Reserve(kStripeOffset, HostRegistry::kAtomicStripes * sizeof(uint64_t)))
    return Errno("cannot reserve space for host registry (is /dev/shm full?)", shm_name);

  auto* header = static_cast<RegionHeader*>(p);
  uint64_t magic = 0;
  if (!header->magic.compare_exchange_strong(magic, kMagic) && magic != kMagic)
    return Invalid("host registry " + shm_name + " is not a softverbs registry (corrupt?)");
  return MakeTables(header);
}

bool HostRegistry::Reserve(size_t offset, size_t length) {
  int e = posix_fallocate(fd_.get(), static_cast<off_t>(offset), static_cast<off_t>(length));
  if (e != 0) errno = e;
  return e == 0;
}

Status HostRegistry::MakeTables(void* header_ptr) {
  auto* header = static_cast<RegionHeader*>(header_ptr);
  auto* base = reinterpret_cast<uint8_t*>(header);
  auto table = [&](std::atomic<uint64_t>* cursor, std::atomic<uint64_t>* extent, size_t offset, uint32_t count) {
    return SlotTable(cursor, extent, reinterpret_cast<HostSlot*>(base + offset), count,
                     [this, offset](uint32_t from, uint32_t to) {
                       return Reserve(offset + from * sizeof(HostSlot), size_t{to - from} * sizeof(HostSlot));
                     });
  };
  qps_ = table(&header->qp_cursor, &header->qp_extent, kQpOffset, kQpSlots);
  srqs_ = table(&header->srq_cursor, &header->srq_extent, kSrqOffset, kSrqSlots);
  // A process slot's hazard lines are reserved with it: a withdrawer reads every live one.
  processes_ = SlotTable(&header->process_cursor, &header->process_extent,
                         reinterpret_cast<HostSlot*>(base + kProcessOffset), kProcessSlots,
                         [this](uint32_t from, uint32_t to) {
                           const size_t n = to - from;
                           return Reserve(kProcessOffset + from * sizeof(HostSlot), n * sizeof(HostSlot)) &&
                                  Reserve(kHazardOffset + from * kHazardBytes, n * kHazardBytes);
                         });
  mcasts_ = table(&header->mcast_cursor, &header->mcast_extent, kMcastOffset, kMcastSlots);
  xrcds_ = table(&header->xrcd_cursor, &header->xrcd_extent, kXrcdOffset, kXrcdSlots);
  xrcd_lock_ = &header->xrcd_lock;
  // A key slot has two side records (its backing, its pins): reserved with it.
  keys_ = SlotTable(&header->key_cursor, &header->key_extent, reinterpret_cast<HostSlot*>(base + kKeyOffset),
                    kKeySlots, [this](uint32_t from, uint32_t to) {
                      const size_t n = to - from;
                      return Reserve(kKeyOffset + from * sizeof(HostSlot), n * sizeof(HostSlot)) &&
                             Reserve(kBackingOffset + from * kKeyBackingBytes, n * kKeyBackingBytes) &&
                             Reserve(kPinOffset + from * kKeyPinBytes, n * kKeyPinBytes);
                    });
  // A dead owner's key is withdrawn before its slot is freed, so no initiator passes its check
  // any more; a dead owner's QP number stops naming an endpoint.
  keys_.set_on_reclaim([](HostSlot& slot) {
    auto& e = EntryOf<KeyEntry>(slot);
    e.seq.fetch_add(1, std::memory_order_seq_cst);
    e.key.store(0, std::memory_order_release);
    e.seq.fetch_add(1, std::memory_order_release);
  });
  qps_.set_on_reclaim([](HostSlot& slot) { EntryOf<QpEntry>(slot).qp_num.store(0, std::memory_order_release); });
  // An XRC SRQ is found by its number like a QP (QpEntry): a dead owner's stops naming it.
  srqs_.set_on_reclaim([](HostSlot& slot) { EntryOf<QpEntry>(slot).qp_num.store(0, std::memory_order_release); });
  route_epoch_ = &header->route_epoch;
  for (SlotTable* t : {&qps_, &keys_, &srqs_, &processes_, &mcasts_, &xrcds_}) t->set_epoch(route_epoch_);
  stripes_ = reinterpret_cast<std::atomic<uint64_t>*>(base + kStripeOffset);
  backings_ = base + kBackingOffset;
  pins_ = base + kPinOffset;
  hazards_ = base + kHazardOffset;
  for (SlotTable* t : {&qps_, &keys_, &srqs_, &processes_, &mcasts_, &xrcds_})
    if (!t->ReserveInitial())
      return Errno("cannot reserve space for host registry (is /dev/shm full?)", name_);
  return Status::Ok();
}

uint32_t HostRegistry::ReclaimDead() {
  std::unordered_map<uint64_t, bool> alive;  // one liveness check per process, not per slot
  uint32_t n = 0;
  // Process slots last: the entries of the other tables name them.
  for (SlotTable* t : {&qps_, &keys_, &srqs_, &mcasts_, &xrcds_, &processes_}) n += t->ReclaimDead(alive);
  return n;
}

Status HostRegistry::Rejoin() {
  // A descriptor of our own on the same file: a lock on the parent's would be the parent's.
  UniqueFd fd(open(("/proc/self/fd/" + std::to_string(fd_.get())).c_str(), O_RDWR | O_CLOEXEC));
  if (!fd.valid()) return Errno("cannot reopen host registry", name_);
  if (FlockRetry(fd.get(), LOCK_SH) != 0) return Errno("cannot lock host registry", name_);
  lock_fd_ = std::move(fd);
  lock_pid_ = getpid();
  if (!NameIsOurs()) return Status(ESTALE, "host registry " + name_ + " was removed since fork");
  return Status::Ok();
}

void HostRegistry::Leave() {
  // A child of fork() that never joined shares its parent's lock: not its to drop.
  if (lock_pid_ != getpid()) return;
  const int fd = lock_fd_.valid() ? lock_fd_.get() : fd_.get();
  FlockRetry(fd, LOCK_UN);
  lock_pid_ = 0;
  // Any other user holds a shared lock, and one that is joining takes its lock before it checks
  // the name: either it holds it now (we fail here) or it will find the name gone and open anew.
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) return;
  if (NameIsOurs()) shm_unlink(name_.c_str());
  FlockRetry(fd, LOCK_UN);
}

Result<HostRegistry*> HostRegistry::OpenForTesting(const std::string& shm_name) {
  auto* r = new HostRegistry();
  Status s = r->Open(shm_name);
  if (!s.ok()) {
    delete r;
    return s;
  }
  return r;
}

namespace {

std::mutex g_mu;
HostRegistry* g_registry = nullptr;

void LeaveAtExit() {
  std::lock_guard lock(g_mu);
  if (g_registry != nullptr) g_registry->Leave();
}

}  // namespace

Result<HostRegistry*> HostRegistry::Get() {
  // Opened once per process and kept: objects of every context reference it until exit.
  std::lock_guard lock(g_mu);
  static Status failure;
  if (g_registry != nullptr && g_registry->lock_pid_ != getpid()) {
    // A child of fork() joining: its own lock. If the last user removed the name meanwhile, the
    // host lives on in a new file: open that (the old mapping stays for the parent's objects).
    if (Status s = g_registry->Rejoin(); !s.ok()) {
      if (s.code() != ESTALE) return s;
      g_registry = nullptr;
    }
  }
  if (g_registry != nullptr) return g_registry;
  if (!failure.ok()) return failure;
  auto r = OpenForTesting(HostName());
  if (!r.ok()) {
    failure = r.status();
    return failure;
  }
  g_registry = r.value();
  static const int registered = atexit(LeaveAtExit);
  (void)registered;
  return g_registry;
}

}  // namespace softverbs::fabric
