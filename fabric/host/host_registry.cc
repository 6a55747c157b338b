#include "fabric/host/host_registry.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <mutex>


namespace softverbs::fabric {
namespace {

constexpr uint64_t kMagic = 0x47455256'534f5353ull;  // "SSOSVREG"
constexpr int kLayoutVersion = 6;
constexpr unsigned long long kInitialPidNamespace = 0xEFFFFFFCull;  // PROC_PID_INIT_INO

struct RegionHeader {
  std::atomic<uint64_t> magic;
  std::atomic<uint64_t> qp_cursor;
  std::atomic<uint64_t> key_cursor;
  std::atomic<uint64_t> srq_cursor;
  std::atomic<uint64_t> process_cursor;
  std::atomic<uint64_t> mcast_cursor;
  uint8_t reserved[4096 - 6 * sizeof(uint64_t)];
};
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
constexpr size_t kRegionSize = kPinOffset + HostRegistry::kKeySlots * HostRegistry::kKeyPinBytes;

Status Errno(const char* what, const std::string& name) {
  int e = errno;
  return Status(e, std::string(what) + " " + name + ": " + strerror(e));
}

}  // namespace

Result<uint32_t> SlotTable::Allocate(ProcessToken owner) {
  for (int pass = 0; pass < 2; ++pass) {
    for (uint32_t tries = 0; tries < count_; ++tries) {
      uint32_t i = static_cast<uint32_t>(cursor_->fetch_add(1, std::memory_order_relaxed) % count_);
      HostSlot& s = slots_[i];
      uint64_t expected = 0;
      if (s.owner.load(std::memory_order_relaxed) == 0 &&
          s.owner.compare_exchange_strong(expected, owner.raw(), std::memory_order_acq_rel)) {
        s.generation.fetch_add(1, std::memory_order_relaxed);
        return i;
      }
    }
    if (ReclaimDead() == 0) break;
  }
  return NoMemory("the host table is full (" + std::to_string(count_) + " entries)");
}

bool SlotTable::Free(uint32_t index, ProcessToken owner) {
  if (index >= count_) return false;
  uint64_t expected = owner.raw();
  return slots_[index].owner.compare_exchange_strong(expected, 0, std::memory_order_acq_rel);
}

uint32_t SlotTable::ReclaimDead() {
  uint32_t reclaimed = 0;
  for (uint32_t i = 0; i < count_; ++i) {
    uint64_t owner = slots_[i].owner.load(std::memory_order_acquire);
    if (owner == 0 || ProcessToken(owner).IsAlive()) continue;
    if (slots_[i].owner.compare_exchange_strong(owner, 0, std::memory_order_acq_rel)) ++reclaimed;
  }
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

Status HostRegistry::Open(const std::string& shm_name) {
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
  // Every process extends the region to the full size; extending twice is harmless and the new
  // bytes are zero, which is the empty state. The space is reserved now, so a full /dev/shm is a
  // clean refusal here rather than a SIGBUS inside a verb later.
  if (static_cast<size_t>(st.st_size) < kRegionSize) {
    if (int e = posix_fallocate(fd_.get(), 0, kRegionSize); e != 0) {
      errno = e;
      return Errno("cannot reserve space for host registry (is /dev/shm full?)", shm_name);
    }
  }
  void* p = mmap(nullptr, kRegionSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd_.get(), 0);
  if (p == MAP_FAILED) return Errno("cannot map host registry", shm_name);
  map_ = Mapping(p, kRegionSize);

  auto* header = static_cast<RegionHeader*>(p);
  uint64_t magic = 0;
  if (!header->magic.compare_exchange_strong(magic, kMagic) && magic != kMagic)
    return Invalid("host registry " + shm_name + " is not a softverbs registry (corrupt?)");

  auto* base = static_cast<uint8_t*>(p);
  qps_ = SlotTable(&header->qp_cursor, reinterpret_cast<HostSlot*>(base + kQpOffset), HostRegistry::kQpSlots);
  keys_ = SlotTable(&header->key_cursor, reinterpret_cast<HostSlot*>(base + kKeyOffset), HostRegistry::kKeySlots);
  srqs_ = SlotTable(&header->srq_cursor, reinterpret_cast<HostSlot*>(base + kSrqOffset), HostRegistry::kSrqSlots);
  processes_ = SlotTable(&header->process_cursor, reinterpret_cast<HostSlot*>(base + kProcessOffset),
                         HostRegistry::kProcessSlots);
  stripes_ = reinterpret_cast<std::atomic<uint64_t>*>(base + kStripeOffset);
  mcasts_ = SlotTable(&header->mcast_cursor, reinterpret_cast<HostSlot*>(base + kMcastOffset), HostRegistry::kMcastSlots);
  backings_ = base + kBackingOffset;
  pins_ = base + kPinOffset;
  return Status::Ok();
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

Result<HostRegistry*> HostRegistry::Get() {
  // Opened once per process and kept: objects of every context reference it until exit.
  static std::once_flag once;
  static HostRegistry* registry = nullptr;
  static Status failure;
  std::call_once(once, [] {
    auto r = OpenForTesting(HostName());
    if (r.ok())
      registry = r.value();
    else
      failure = r.status();
  });
  if (registry == nullptr) return failure;
  return registry;
}

}  // namespace softverbs::fabric
