#include "core/object_space.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>

#include "fabric/host/host_registry.h"
#include "transport/key_table.h"

namespace softverbs::core {

namespace {

constexpr uint64_t kObjectSpaceMagic = 0x7376636d64666431ull;  // "svcmdfd1"
constexpr uint32_t kObjectSpaceVersion = 2;  // 2: device memory listed
constexpr uint32_t kSpaceMrEntries = fabric::HostRegistry::kKeySlots;

// A PD or DM entry's tag: handle << 2 | state. A handle is never reused in a space, so a reader
// that sees the same live tag before and after reading the entry read that object's.
enum : uint64_t { kSpacePdEmpty = 0, kSpacePdClaimed = 1, kSpacePdLive = 2, kSpacePdDeleted = 3 };
uint64_t SpacePdTag(uint32_t handle, uint64_t state) { return static_cast<uint64_t>(handle) << 2 | state; }

}  // namespace

// The memfd's layout. Sparse: only the pages of entries in use are ever touched.
struct ObjectSpace::Table {
  struct Header {
    uint64_t magic;
    uint32_t version;
    std::atomic<uint32_t> next_handle;
  };
  struct PdEntry {
    std::atomic<uint64_t> tag;
    uint64_t host_id;
  };
  struct DmEntry {
    std::atomic<uint64_t> tag;
    uint64_t owner;
    int64_t fd;
    uint64_t dev, ino, length;
  };
  Header header;
  PdEntry pds[kPdEntries];
  DmEntry dms[kDmEntries];
  std::atomic<uint32_t> mrs[kSpaceMrEntries];  // by key slot: the MR key listed there, or 0
};

static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free,
              "the table is shared between processes");

Result<std::shared_ptr<ObjectSpace>> ObjectSpace::Create() {
  UniqueFd fd(memfd_create("softverbs-cmd", MFD_CLOEXEC));
  if (!fd.valid()) return Status(errno, std::string("memfd_create: ") + strerror(errno));
  if (ftruncate(fd.get(), sizeof(Table)) != 0) return Status(errno, std::string("ftruncate: ") + strerror(errno));
  void* p = mmap(nullptr, sizeof(Table), PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) return NoMemory(std::string("mmap of the object space: ") + strerror(errno));
  auto* t = static_cast<Table*>(p);  // zero-filled: every entry empty
  t->header.version = kObjectSpaceVersion;
  t->header.next_handle.store(1, std::memory_order_relaxed);
  t->header.magic = kObjectSpaceMagic;
  return std::shared_ptr<ObjectSpace>(new ObjectSpace(std::move(fd), t));
}

Result<std::shared_ptr<ObjectSpace>> ObjectSpace::Open(int fd) {
  struct stat st;
  if (fstat(fd, &st) != 0) return Invalid("fd " + std::to_string(fd) + " is not an open file descriptor");
  if (S_ISCHR(st.st_mode))
    return Status(ENODEV, "fd " + std::to_string(fd) + " is a character device, not the cmd_fd of a softverbs0 context");
  // Read before anything is mapped: an arbitrary file is never mapped, let alone written.
  Table::Header h{};
  if (!S_ISREG(st.st_mode) || st.st_size != static_cast<off_t>(sizeof(Table)) ||
      pread(fd, &h, sizeof h, 0) != static_cast<ssize_t>(sizeof h) || h.magic != kObjectSpaceMagic ||
      h.version != kObjectSpaceVersion)
    return Invalid("fd " + std::to_string(fd) + " is not the cmd_fd of a softverbs0 context (ibv_import_device(3): "
                   "the cmd_fd member of an ibv_context, dup'ed)");
  void* p = mmap(nullptr, sizeof(Table), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return NoMemory(std::string("mmap of the object space: ") + strerror(errno));
  return std::shared_ptr<ObjectSpace>(new ObjectSpace(UniqueFd(fd), static_cast<Table*>(p)));
}

ObjectSpace::~ObjectSpace() { munmap(table_, sizeof(Table)); }

uint32_t ObjectSpace::NewHandle() { return table_->header.next_handle.fetch_add(1, std::memory_order_relaxed); }

namespace {

// Open addressing from the handle's home entry over `entries` (PdEntry or DmEntry): deleted
// entries are reused, empty ones end a search. `fill` writes the entry while it is claimed.
template <typename Entry, size_t N, typename Fill>
bool SpaceClaim(Entry (&entries)[N], uint32_t handle, Fill&& fill) {
  for (uint32_t i = 0; i < N; ++i) {
    Entry& e = entries[(handle + i) % N];
    uint64_t tag = e.tag.load(std::memory_order_acquire);
    if ((tag & 3) != kSpacePdEmpty && (tag & 3) != kSpacePdDeleted) continue;
    if (!e.tag.compare_exchange_strong(tag, SpacePdTag(handle, kSpacePdClaimed), std::memory_order_acq_rel)) continue;
    fill(e);
    e.tag.store(SpacePdTag(handle, kSpacePdLive), std::memory_order_release);
    return true;
  }
  return false;
}

template <typename Entry, size_t N>
void SpaceRemove(Entry (&entries)[N], uint32_t handle) {
  for (uint32_t i = 0; i < N; ++i) {
    Entry& e = entries[(handle + i) % N];
    uint64_t tag = e.tag.load(std::memory_order_acquire);
    if (tag == kSpacePdEmpty) return;
    if (tag == SpacePdTag(handle, kSpacePdLive)) {
      e.tag.compare_exchange_strong(tag, SpacePdTag(handle, kSpacePdDeleted), std::memory_order_acq_rel);
      return;
    }
  }
}

// The live entry of `handle`, read by `read` (a copy), or false; read again if it changed.
template <typename Entry, size_t N, typename Read>
bool SpaceFind(const Entry (&entries)[N], uint32_t handle, Read&& read) {
  for (uint32_t i = 0; i < N; ++i) {
    const Entry& e = entries[(handle + i) % N];
    const uint64_t tag = e.tag.load(std::memory_order_acquire);
    if (tag == kSpacePdEmpty) return false;
    if (tag != SpacePdTag(handle, kSpacePdLive)) continue;
    read(e);
    return e.tag.load(std::memory_order_acquire) == tag;  // else removed meanwhile
  }
  return false;
}

}  // namespace

Status ObjectSpace::AddPd(const PdRecord& pd) {
  if (SpaceClaim(table_->pds, pd.handle, [&](Table::PdEntry& e) { e.host_id = pd.host_id; })) return Status::Ok();
  return NoMemory("the object space lists " + std::to_string(kPdEntries) + " PDs already");
}

void ObjectSpace::RemovePd(uint32_t handle) { SpaceRemove(table_->pds, handle); }

std::optional<PdRecord> ObjectSpace::FindPd(uint32_t handle) const {
  PdRecord r{handle, 0};
  if (!SpaceFind(table_->pds, handle, [&](const Table::PdEntry& e) { r.host_id = e.host_id; })) return std::nullopt;
  return r;
}

Status ObjectSpace::AddDm(const DmRecord& dm) {
  const bool added = SpaceClaim(table_->dms, dm.handle, [&](Table::DmEntry& e) {
    e.owner = dm.owner;
    e.fd = dm.fd;
    e.dev = dm.dev;
    e.ino = dm.ino;
    e.length = dm.length;
  });
  if (added) return Status::Ok();
  return NoMemory("the object space lists " + std::to_string(kDmEntries) + " device memories already");
}

void ObjectSpace::RemoveDm(uint32_t handle) { SpaceRemove(table_->dms, handle); }

std::optional<DmRecord> ObjectSpace::FindDm(uint32_t handle) const {
  DmRecord r;
  r.handle = handle;
  const bool found = SpaceFind(table_->dms, handle, [&](const Table::DmEntry& e) {
    r.owner = e.owner;
    r.fd = static_cast<int32_t>(e.fd);
    r.dev = e.dev;
    r.ino = e.ino;
    r.length = e.length;
  });
  if (!found) return std::nullopt;
  return r;
}

void ObjectSpace::AddMr(uint32_t handle) {
  table_->mrs[transport::KeySlot(handle) % kSpaceMrEntries].store(handle, std::memory_order_release);
}

void ObjectSpace::RemoveMr(uint32_t handle) {
  uint32_t expected = handle;
  table_->mrs[transport::KeySlot(handle) % kSpaceMrEntries].compare_exchange_strong(expected, 0,
                                                                               std::memory_order_acq_rel);
}

bool ObjectSpace::HasMr(uint32_t handle) const {
  return handle != 0 && table_->mrs[transport::KeySlot(handle) % kSpaceMrEntries].load(std::memory_order_acquire) == handle;
}

}  // namespace softverbs::core
