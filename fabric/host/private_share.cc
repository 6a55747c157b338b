#include "fabric/host/private_share.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "base/env.h"
#include "base/log.h"
#include "fabric/host/maps_scan.h"
#include "fabric/host/process_token.h"
#include "fabric/host/world_stop.h"

namespace softverbs::fabric {
namespace {

// One move: pages [lo, hi) of this process, now mapped from `memfd` at offset (address - lo).
struct Area {
  uint64_t lo = 0, hi = 0;
  UniqueFd memfd;
  uint32_t dev = 0;
  uint64_t ino = 0;
  pid_t pid = 0;  // a child of fork() has private copies: none of its moves
  RangeBusyFn busy = nullptr;
  void* ctx = nullptr;
  std::weak_ptr<const BackingFile> file;  // expired once every registration on it is gone
  // The child's copy, taken by the fork handler in the parent: every mapping of the memfd
  // (snapshot_pieces), one after the other in `snapshot`.
  uint8_t* snapshot = nullptr;
  uint64_t snapshot_size = 0;
  MapsPiece snapshot_pieces[kMaxMapsPieces];
  size_t snapshot_count = 0;
};

// The memfd is this much larger than the pages moved (sparse: it costs nothing until written).
// glibc's realloc of a large chunk is mremap(MREMAP_MAYMOVE): an application that grows a buffer
// while it is still registered maps file offsets beyond the moved pages, which must read as the
// zeros an anonymous mapping would give, not raise SIGBUS beyond the end of the file.
constexpr uint64_t kGrowthSlack = 1ull << 30;

std::mutex g_share_mu;  // the moves, and every scan (maps_scan.cc's buffer)
// This process's moves, live or lingering. Never destroyed: a registration released by an exit
// handler after static destructors still finds it.
std::vector<std::shared_ptr<Area>>& g_share_areas = *new std::vector<std::shared_ptr<Area>>;
PrivateShareCounters g_share_counters;
MapsPiece g_share_pieces[kMaxMapsPieces];  // scratch, under g_share_mu

uint64_t PageSize() { return static_cast<uint64_t>(sysconf(_SC_PAGESIZE)); }

// The kernel copies (raw system calls: no sanitizer interceptor reads the application's bytes,
// which may include other live data on the same pages, and an unmapped page is EFAULT, not a
// signal).
// With `to_eof`, a read stops at the end of the file (what lies beyond stays as it is: zeros).
bool CopyAll(long nr, int fd, void* buf, uint64_t n, uint64_t off, bool to_eof = false) {
  auto* p = static_cast<uint8_t*>(buf);
  while (n > 0) {
    const long done = syscall(nr, fd, p, std::min<uint64_t>(n, 1ull << 30), static_cast<off_t>(off));
    if (done < 0 && errno == EINTR) continue;
    if (done == 0 && to_eof) return true;
    if (done <= 0) return false;
    p += done;
    off += static_cast<uint64_t>(done);
    n -= static_cast<uint64_t>(done);
  }
  return true;
}

void* At(uint64_t addr) { return reinterpret_cast<void*>(addr); }

// The memory system calls themselves, not libc's symbols: UCX's memory hooks (ucm) and other
// interposers of mmap / munmap / mremap / madvise would take these remaps for the application
// unmapping its memory (and invalidate their registration caches), while the application sees
// no change at all. Raw system calls are also what may run while the other threads are parked.
void* Mmap(void* addr, uint64_t len, int prot, int flags, int fd, uint64_t off) {
  const long r = syscall(SYS_mmap, addr, len, prot, flags, fd, off);
  return (r < 0 && r > -4096) ? MAP_FAILED : reinterpret_cast<void*>(r);
}
int Munmap(void* addr, uint64_t len) { return static_cast<int>(syscall(SYS_munmap, addr, len)); }
void* Mremap(void* from, uint64_t len, void* to) {
  const long r = syscall(SYS_mremap, from, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, to);
  return (r < 0 && r > -4096) ? MAP_FAILED : reinterpret_cast<void*>(r);
}
int Mprotect(void* addr, uint64_t len, int prot) { return static_cast<int>(syscall(SYS_mprotect, addr, len, prot)); }
int Madvise(void* addr, uint64_t len, int advice) { return static_cast<int>(syscall(SYS_madvise, addr, len, advice)); }


// Moves the private copy at `from` (p.hi - p.lo bytes) onto p.lo with p's protection.
bool Place(uint8_t* from, const MapsPiece& p) {
  const uint64_t len = p.hi - p.lo;
  if (Mremap(from, len, At(p.lo)) == MAP_FAILED) return false;
  return p.prot == (PROT_READ | PROT_WRITE) || Mprotect(At(p.lo), len, p.prot) == 0;
}

// Replaces the mappings `pieces` (address order) of `memfd` by private anonymous memory holding
// the same bytes: one anonymous mapping laid out piece after piece, so that pieces adjacent in
// the address space stay one mapping (one anon_vma, consecutive offsets: a later mremap of the
// whole range works). False if one could not be replaced (those before it were).
bool MakePrivate(int memfd, const MapsPiece* pieces, size_t n) {
  uint64_t total = 0;
  for (size_t i = 0; i < n; ++i) total += pieces[i].hi - pieces[i].lo;
  if (total == 0) return true;
  auto* copy = static_cast<uint8_t*>(Mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (copy == MAP_FAILED) return false;
  uint64_t at = 0;
  bool done = true;
  for (size_t i = 0; done && i < n; ++i) {
    const MapsPiece& p = pieces[i];
    done = CopyAll(SYS_pread64, memfd, copy + at, p.hi - p.lo, p.offset, true) && Place(copy + at, p);
    if (done) at += p.hi - p.lo;
    // An mlock the application made while the pages were shared holds for its private pages.
    if (done && p.locked) syscall(SYS_mlock, At(p.lo), p.hi - p.lo);
  }
  if (at < total) Munmap(copy + at, total - at);
  return done;
}

// Copy + remap, with every other thread parked. Null (and `*why`) if not done: nothing changed.
std::shared_ptr<Area> MoveIn(uint64_t lo, uint64_t hi, RangeBusyFn busy, void* ctx, const char** why) {
  const uint64_t n = hi - lo;
  auto area = std::make_shared<Area>();
  area->memfd =
      UniqueFd(static_cast<int>(syscall(SYS_memfd_create, kMemfdName, MFD_CLOEXEC | MFD_ALLOW_SEALING)));
  struct stat st;
  if (!area->memfd.valid() || ftruncate(area->memfd.get(), static_cast<off_t>(n + kGrowthSlack)) != 0 ||
      fstat(area->memfd.get(), &st) != 0) {
    *why = "no memfd";
    return nullptr;
  }
  // Never shorter than this (MoveBack frees the pages with a hole instead): an initiator that
  // maps the file reads the seal and copies without the SIGBUS guard (backing_maps.h).
  if (fcntl(area->memfd.get(), F_ADD_SEALS, F_SEAL_SHRINK) != 0)
    SV_LOG(kDebug, "memfd of a moved registration not sealed (%s): its initiators copy under the SIGBUS guard",
           strerror(errno));
  void* shared = Mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, area->memfd.get(), 0);
  if (shared == MAP_FAILED) {
    *why = "no address space for the memfd";
    return nullptr;
  }
  WorldStop world;
  size_t pieces = 0;
  if (!world.StopOthers()) *why = "another thread did not stop";
  else if ((pieces = ScanMovablePrivate(lo, hi, g_share_pieces, why)) == 0) {}
  else if (busy(ctx, lo, hi)) *why = "another live registration of this process touches its pages";
  else if (!CopyAll(SYS_pwrite64, area->memfd.get(), At(lo), n, 0)) *why = "its pages could not be read";
  else if (Mremap(shared, n, At(lo)) == MAP_FAILED &&
           Mmap(At(lo), n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, area->memfd.get(), 0) == MAP_FAILED) {
    // mremap may have unmapped the target before failing (ENOMEM: too many mappings); the file
    // holds the contents, so mapping it there is the way back. Neither worked: say so loudly.
    const int err = errno;
    world.Resume();
    Munmap(shared, n);
    SV_LOG(kError, "ibv_reg_mr([0x%llx, 0x%llx)): the pages could not be remapped (%s): the range may be lost",
           static_cast<unsigned long long>(lo), static_cast<unsigned long long>(hi), strerror(err));
    *why = "the remap failed";
    return nullptr;
  } else {
    shared = nullptr;
    for (size_t i = 0; i < pieces; ++i)
      if (g_share_pieces[i].prot != (PROT_READ | PROT_WRITE))
        Mprotect(At(g_share_pieces[i].lo), g_share_pieces[i].hi - g_share_pieces[i].lo, g_share_pieces[i].prot);
    // fork(): the child gets its private copy from the atfork handler, never these pages.
    Madvise(At(lo), n, MADV_DONTFORK);
  }
  world.Resume();
  if (shared != nullptr) {
    Munmap(shared, n);
    return nullptr;
  }
  area->lo = lo;
  area->hi = hi;
  area->dev = EncodeDev(st.st_dev);
  area->ino = st.st_ino;
  area->pid = getpid();
  area->busy = busy;
  area->ctx = ctx;
  return area;
}

// Back into private anonymous memory, with every other thread parked; false if it must wait
// (a live key still touches the pages, or a thread did not stop). Call with no registration left.
// Every mapping of the memfd goes back, wherever the application put it meanwhile (mremap-ed
// away or grown): none may stay shared, or a child of fork() would find a hole there
// (MADV_DONTFORK moves with the mapping) and MADV_DONTNEED would not zero it.
bool MoveBack(Area& a) {
  if (a.pid != getpid()) return true;
  WorldStop world;
  bool done = false;
  if (world.StopOthers() && !a.busy(a.ctx, a.lo, a.hi)) {
    const size_t pieces = ScanFileMappings(a.dev, a.ino, g_share_pieces, AnyLockedMemory());
    done = pieces != SIZE_MAX;
    // Pages the application moved elsewhere may be under a key of their own (process_vm path).
    for (size_t i = 0; done && i < pieces; ++i) done = !a.busy(a.ctx, g_share_pieces[i].lo, g_share_pieces[i].hi);
    done = done && MakePrivate(a.memfd.get(), g_share_pieces, pieces);
  }
  world.Resume();
  // Peers may keep a mapping of the memfd in their caches: its pages are freed now, by a hole
  // (the file is sealed against shrinking; a peer's stale mapping reads zeros, never SIGBUS --
  // and no access reaches it: every key on it was withdrawn and waited for).
  const auto length = static_cast<off_t>(a.hi - a.lo + kGrowthSlack);
  if (done && !FileMapped(a.dev, a.ino) &&
      fallocate(a.memfd.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, length) != 0) {}
  return done;
}

// Moves back the moves whose registrations are all gone; under g_share_mu.
void RetryLingering() {
  std::erase_if(g_share_areas, [](const std::shared_ptr<Area>& a) {
    if (!a->file.expired()) return false;
    if (!MoveBack(*a)) return false;
    ++g_share_counters.moved_back;
    return true;
  });
}

// A move's last registration is gone: move it (and any other lingering one) back.
void Release() {
  std::lock_guard lock(g_share_mu);
  RetryLingering();
}

void ForkPrepare() {
  g_share_mu.lock();
  if (g_share_areas.empty()) return;
  // The copy is one instant of the pages: no other thread writes them meanwhile (if they do not
  // park, it is taken anyway, as a fork races with writers). No allocation below.
  WorldStop world;
  world.StopOthers();
  for (auto& a : g_share_areas) {
    a->snapshot = nullptr;
    if (a->pid != getpid()) continue;
    const size_t n = ScanFileMappings(a->dev, a->ino, a->snapshot_pieces);
    if (n == SIZE_MAX || n == 0) continue;
    uint64_t total = 0;
    for (size_t i = 0; i < n; ++i) total += a->snapshot_pieces[i].hi - a->snapshot_pieces[i].lo;
    void* copy = Mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (copy == MAP_FAILED) continue;
    a->snapshot = static_cast<uint8_t*>(copy);
    a->snapshot_size = total;
    a->snapshot_count = n;
    for (uint64_t i = 0, at = 0; i < n; ++i) {
      const MapsPiece& p = a->snapshot_pieces[i];
      CopyAll(SYS_pread64, a->memfd.get(), a->snapshot + at, p.hi - p.lo, p.offset, true);
      at += p.hi - p.lo;
    }
  }
}

void ForkParent() {
  for (auto& a : g_share_areas)
    if (a->snapshot != nullptr) Munmap(std::exchange(a->snapshot, nullptr), a->snapshot_size);
  g_share_mu.unlock();
}

void ForkChild() {
  // The only thread: the copies go where the parent's shared pages were (MADV_DONTFORK left
  // those ranges empty), with the protections they had.
  for (auto& a : g_share_areas) {
    if (a->snapshot == nullptr) continue;
    uint64_t at = 0;
    for (size_t i = 0; i < a->snapshot_count; ++i) {
      const MapsPiece& p = a->snapshot_pieces[i];
      if (!Place(a->snapshot + at, p)) break;
      at += p.hi - p.lo;
    }
    if (at < a->snapshot_size) Munmap(a->snapshot + at, a->snapshot_size - at);
    a->snapshot = nullptr;
  }
  g_share_areas.clear();  // the child's memory is private: nothing of it is moved
  g_share_mu.unlock();
}

// Registered when the library is loaded, not at the first move: prepare handlers run in the
// reverse order of their registration, so ours runs after those of the libraries loaded later
// and of the application, and what they write in preparing (a mutex they lock, on a heap page
// shared with a registration) is in the child's copy. With nothing moved it only takes the lock.
[[maybe_unused]] const int g_share_atfork = pthread_atfork(ForkPrepare, ForkParent, ForkChild);

}  // namespace

bool PrivateShareEnabled() {
  static const bool enabled = EnvOnUnlessZero("SOFTVERBS_PRIVATE_SHARE");
  return enabled;
}

std::optional<SharedBacking> SharePrivate(uint64_t addr, uint64_t length, RangeBusyFn busy, void* ctx) {
  if (!PrivateShareEnabled() || length == 0) return std::nullopt;
  const uint64_t page = PageSize();
  const uint64_t lo = addr & ~(page - 1), hi = (addr + length + page - 1) & ~(page - 1);
  ProcessToken::Self();  // cached now: `busy` may use it while the threads are parked
  std::shared_ptr<const BackingFile> found;  // released after the lock (its release takes it)
  const char* why = nullptr;
  std::lock_guard lock(g_share_mu);
  RetryLingering();
  for (const auto& a : g_share_areas) {
    if (a->hi <= lo || hi <= a->lo) continue;
    found = a->file.lock();
    // Inside a live move whose pages are still where it put them: share its memfd.
    if (found != nullptr && a->lo <= lo && hi <= a->hi &&
        ScanFileBacked(lo, hi, a->dev, a->ino, lo - a->lo, g_share_pieces) == 1 && g_share_pieces[0].lo == lo &&
        g_share_pieces[0].hi == hi) {
      ++g_share_counters.reused;
      return SharedBacking{found, addr - a->lo};
    }
    why = "it overlaps pages moved for another registration";
    break;
  }
  if (why == nullptr && !LooksPrivateAnonymous(addr)) return std::nullopt;  // a file's: not ours to move
  std::shared_ptr<Area> area = why == nullptr ? MoveIn(lo, hi, busy, ctx, &why) : nullptr;
  if (area == nullptr) {
    ++g_share_counters.refused;
    SV_LOG(kDebug, "ibv_reg_mr([0x%llx, +%llu)): private memory not moved into a shared file: %s",
           static_cast<unsigned long long>(addr), static_cast<unsigned long long>(length), why);
    return std::nullopt;
  }
  UniqueFd dup(fcntl(area->memfd.get(), F_DUPFD_CLOEXEC, 0));
  const int32_t handle = dup.get();
  auto* file = new BackingFile(BackingKind::kFile, std::move(dup), handle, NextBackingTag(), area->dev, area->ino);
  // The deleter holds no reference to the area (which holds a weak one to this control block:
  // a cycle would keep both, and the memfd, forever); g_share_areas keeps it until it moves back.
  std::shared_ptr<const BackingFile> shared(file, [](const BackingFile* f) {
    delete f;
    Release();
  });
  area->file = shared;
  g_share_areas.push_back(area);
  ++g_share_counters.moved;
  SV_LOG(kDebug, "ibv_reg_mr([0x%llx, +%llu)): pages [0x%llx, 0x%llx) moved into a memfd: peers map it",
         static_cast<unsigned long long>(addr), static_cast<unsigned long long>(length),
         static_cast<unsigned long long>(lo), static_cast<unsigned long long>(hi));
  return SharedBacking{std::move(shared), addr - lo};
}

void RetryMovesBack() {
  std::lock_guard lock(g_share_mu);
  RetryLingering();
}

PrivateShareCounters PrivateShareStats() {
  std::lock_guard lock(g_share_mu);
  PrivateShareCounters c = g_share_counters;
  for (const auto& a : g_share_areas) c.lingering += a->file.expired() ? 1 : 0;
  return c;
}

}  // namespace softverbs::fabric
