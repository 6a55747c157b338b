#include "fabric/host/backing_maps.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/stat.h>

#include <cstring>

#include "base/log.h"
#include "fabric/host/fault_guard.h"
#include "fabric/host/process_token.h"

namespace softverbs::fabric {

BackingId IdOf(uint64_t owner, const BackingRecord& r) {
  return BackingId{owner, r.kind, r.handle, r.dev, r.tag, r.ino};
}

BackingWindow::~BackingWindow() {
  if (sysv_)
    shmdt(base_);
  else
    munmap(base_, size_);
}

size_t BackingMaps::IdHash::operator()(const BackingId& id) const {
  uint64_t h = id.owner * 0x9E3779B97F4A7C15ull;
  for (uint64_t v : {static_cast<uint64_t>(id.kind), static_cast<uint64_t>(static_cast<uint32_t>(id.handle)),
                     static_cast<uint64_t>(id.dev), id.tag, id.ino})
    h = (h ^ v) * 0x100000001B3ull;
  return static_cast<size_t>(h ^ (h >> 32));
}

constinit thread_local internal::ThreadHit internal::t_backing_hit;

namespace {
thread_local std::shared_ptr<const BackingWindow> t_hit_window;  // keeps t_backing_hit.window mapped
}  // namespace

Result<std::shared_ptr<const BackingWindow>> BackingMaps::Get(PeerProcess& owner, const BackingId& id,
                                                              uint64_t offset, uint64_t length) {
  if (offset + length < offset) return Invalid("the range wraps around");
  internal::ThreadHit& hit = internal::t_backing_hit;
  const uint64_t generation = generation_.load(std::memory_order_acquire);
  if (hit.maps == instance_ && hit.generation == generation && hit.id == id && hit.window->Holds(offset, length))
    return t_hit_window;
  {
    std::lock_guard lock(mu_);
    if (auto it = index_.find(id); it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      const auto& window = it->second->second;
      if (window == nullptr) return Status(ENXIO, "this backing could not be mapped before");
      if (window->Holds(offset, length)) {
        // A borrowed window is kept mapped by the entry: it stays while a borrow lives.
        if (hit.borrows == 0) {
          hit = {instance_, generation, id, window.get(), 0};
          t_hit_window = window;
        }
        return window;
      }
      // The file grew since it was mapped, or the range is beyond its end: try again below.
    }
  }
  ForgetDead();
  auto window = Map(owner, id, offset + length);
  std::lock_guard lock(mu_);
  if (!window.ok()) {
    SV_LOG(kDebug, "shared backing (fd/shmid %d of process %d): %s; using process_vm_writev/readv", id.handle,
           owner.token().pid(), window.status().rule().c_str());
    // Remembered, so that every access does not try again (a window that maps the file keeps it).
    if (!index_.contains(id)) Insert(id, nullptr);
    return window.status();
  }
  Insert(id, window.value());
  return window;
}

Result<std::shared_ptr<const BackingWindow>> BackingMaps::Map(PeerProcess& owner, const BackingId& id, uint64_t end) {
  if (id.kind == BackingKind::kSysvShm) {
    shmid_ds ds{};
    if (shmctl(id.handle, IPC_STAT, &ds) != 0) return Status(errno, std::string("shmctl(IPC_STAT): ") + strerror(errno));
    if (static_cast<uint64_t>(ds.shm_cpid) != id.tag) return Status(ESTALE, "the shmid names another segment now");
    if (end > ds.shm_segsz) return Status(ERANGE, "the range is beyond the segment");
    void* p = shmat(id.handle, nullptr, 0);
    if (p == reinterpret_cast<void*>(-1)) return Status(errno, std::string("shmat: ") + strerror(errno));
    return std::shared_ptr<const BackingWindow>(
        std::make_shared<BackingWindow>(static_cast<uint8_t*>(p), ds.shm_segsz, true, /*can_shrink=*/false));
  }
  if (id.kind != BackingKind::kFile) return Invalid("no shared backing");
  auto fd = owner.CopyFd(id.handle);
  if (!fd.ok()) return fd.status();
  // The number may have been reused by the owner for another file; only the published one will do.
  struct stat st;
  if (fstat(fd.value().get(), &st) != 0) return Status(errno, std::string("fstat: ") + strerror(errno));
  if (EncodeDev(st.st_dev) != id.dev || st.st_ino != id.ino || !S_ISREG(st.st_mode))
    return Status(ESTALE, "the owner's descriptor names another file now");
  const int flags = fcntl(fd.value().get(), F_GETFL);
  if (flags < 0 || (flags & O_ACCMODE) != O_RDWR) return Status(EACCES, "the owner's descriptor is not read-write");
  // The owner may shrink the file later, under the copies: they run guarded (fault_guard.h),
  // unless the file is sealed against it (memfd_create(2), F_SEAL_SHRINK; seals are never
  // removed). Seals first, then the size: once sealed, no later size is below the one read.
  // A memcpy beyond the end of the file raises SIGBUS: the range must be inside it now.
  const int seals = fcntl(fd.value().get(), F_GET_SEALS);
  const bool can_shrink = seals < 0 || !(seals & F_SEAL_SHRINK);
  if (fstat(fd.value().get(), &st) != 0) return Status(errno, std::string("fstat: ") + strerror(errno));
  if (end > static_cast<uint64_t>(st.st_size)) return Status(ERANGE, "the range is beyond the end of the file");
  const auto size = static_cast<uint64_t>(st.st_size);
  if (can_shrink) InstallFaultGuard();
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd.value().get(), 0);
  if (p == MAP_FAILED) return Status(errno, std::string("mmap: ") + strerror(errno));
  return std::shared_ptr<const BackingWindow>(
      std::make_shared<BackingWindow>(static_cast<uint8_t*>(p), size, false, can_shrink));
}

uint64_t BackingMaps::NextInstance() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

void BackingMaps::Insert(const BackingId& id, std::shared_ptr<const BackingWindow> window) {
  if (auto it = index_.find(id); it != index_.end()) {
    lru_.erase(it->second);
    index_.erase(it);
  }
  generation_.fetch_add(1, std::memory_order_acq_rel);
  lru_.emplace_front(id, std::move(window));
  index_[id] = lru_.begin();
  while (lru_.size() > capacity_) {  // least recently used out; unmapped when its last user is done
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
}

size_t BackingMaps::ForgetDead() {
  std::lock_guard lock(mu_);
  size_t dropped = 0;
  for (auto it = lru_.begin(); it != lru_.end();) {
    if (ProcessToken(it->first.owner).IsAlive()) {
      ++it;
      continue;
    }
    index_.erase(it->first);
    it = lru_.erase(it);
    generation_.fetch_add(1, std::memory_order_acq_rel);
    ++dropped;
  }
  return dropped;
}

void BackingMaps::Forget(const BackingWindow* window) {
  std::lock_guard lock(mu_);
  for (auto it = lru_.begin(); it != lru_.end(); ++it) {
    if (it->second.get() != window) continue;
    index_.erase(it->first);
    lru_.erase(it);
    generation_.fetch_add(1, std::memory_order_acq_rel);
    return;
  }
}

size_t BackingMaps::size() const {
  std::lock_guard lock(mu_);
  return lru_.size();
}

BackingMaps& BackingMaps::ForThisProcess() {
  static BackingMaps* maps = new BackingMaps();  // used until exit, like the process's peers
  return *maps;
}

}  // namespace softverbs::fabric
