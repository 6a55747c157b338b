#include "fabric/host/shared_backing.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/shm.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <unistd.h>

#include <charconv>
#include <cstring>
#include <map>
#include <mutex>

#include "base/log.h"

namespace softverbs::fabric {
namespace {

constexpr std::string_view kDeleted = " (deleted)";
constexpr std::string_view kSysvPrefix = "/SYSV";  // "/SYSV%08x (deleted)": the segment's key

// Parses a hex number at the front of `s` and drops it and the separator that follows.
bool TakeHex(std::string_view& s, uint64_t* out, char separator) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out, 16);
  if (ec != std::errc() || end == s.data()) return false;
  s.remove_prefix(static_cast<size_t>(end - s.data()));
  if (separator != 0) {
    if (s.empty() || s.front() != separator) return false;
    s.remove_prefix(1);
  }
  return true;
}

void SkipSpaces(std::string_view& s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
}

// The whole of /proc/self/maps (one read per registration; the kernel generates it).
std::string ReadMaps() {
  std::string text;
  UniqueFd fd(open("/proc/self/maps", O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return text;
  size_t used = 0;
  text.resize(16384);
  for (;;) {
    if (used == text.size()) text.resize(text.size() * 2);
    ssize_t n = read(fd.get(), text.data() + used, text.size() - used);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    used += static_cast<size_t>(n);
  }
  text.resize(used);
  return text;
}

bool SameFile(int fd, dev_t dev, uint64_t ino) {
  struct stat st;
  return fstat(fd, &st) == 0 && st.st_dev == dev && st.st_ino == ino && S_ISREG(st.st_mode);
}

// A descriptor of this process open O_RDWR on (dev, ino), not one of the application's (it may
// close or reuse those): a dup of one that is open read-write, a read-write reopen of one that
// is not, or the path from the maps line opened anew. Invalid if none.
UniqueFd OpenReadWrite(dev_t dev, uint64_t ino, std::string_view path) {
  if (DIR* dir = opendir("/proc/self/fd")) {
    UniqueFd found;
    while (dirent* e = readdir(dir)) {
      int fd = 0;
      auto [end, ec] = std::from_chars(e->d_name, e->d_name + strlen(e->d_name), fd);
      if (ec != std::errc() || *end != '\0' || fd == dirfd(dir) || !SameFile(fd, dev, ino)) continue;
      const int flags = fcntl(fd, F_GETFL);
      if (flags >= 0 && (flags & O_ACCMODE) == O_RDWR) {
        found = UniqueFd(fcntl(fd, F_DUPFD_CLOEXEC, 0));
      } else {
        // Opening /proc/self/fd/N checks the file's permissions anew, as open(2) of its path.
        const std::string again = "/proc/self/fd/" + std::to_string(fd);
        found = UniqueFd(open(again.c_str(), O_RDWR | O_CLOEXEC));
      }
      if (found.valid() && SameFile(found.get(), dev, ino)) break;
      found.reset();
    }
    closedir(dir);
    if (found.valid()) return found;
  }
  if (path.empty() || path.front() != '/' || path.ends_with(kDeleted)) return UniqueFd();
  UniqueFd opened(open(std::string(path).c_str(), O_RDWR | O_CLOEXEC));
  if (opened.valid() && SameFile(opened.get(), dev, ino)) return opened;
  return UniqueFd();
}

// Registrations of one file share its BackingFile; the file's descriptor closes with the last.
std::mutex g_files_mu;
std::map<std::pair<uint32_t, uint64_t>, std::weak_ptr<const BackingFile>> g_files;  // (dev, ino)
std::map<int32_t, std::weak_ptr<const BackingFile>> g_segments;                    // by shmid
std::atomic<uint64_t> g_next_tag{0};

template <typename Key>
std::shared_ptr<const BackingFile> Cached(std::map<Key, std::weak_ptr<const BackingFile>>& cache, const Key& key) {
  std::erase_if(cache, [](const auto& e) { return e.second.expired(); });
  auto it = cache.find(key);
  return it == cache.end() ? nullptr : it->second.lock();
}

std::optional<SharedBacking> NotShared(uint64_t addr, uint64_t length, const char* why) {
  SV_LOG(kDebug, "ibv_reg_mr([0x%llx, +%llu)): %s: peers reach it with process_vm_writev/readv",
         static_cast<unsigned long long>(addr), static_cast<unsigned long long>(length), why);
  return std::nullopt;
}

}  // namespace

// True when the page holding `addr` is present and anonymous and not shared (/proc/self/pagemap
// bit 63 "present" without bit 61 "file-page or shared-anon"): it cannot be in a shared mapping
// of a file, and the maps need not be read -- one pread instead of generating the whole maps
// text, for the common case of registered malloc'd memory. A page not present yet is read once
// (as registering it for a NIC faults it in; process_vm_readv, so an unreadable page is an error,
// not a signal): an untouched anonymous page then maps the zero page, a file page its page cache.

bool LooksPrivateAnonymous(uint64_t addr) {
  static std::mutex mu;
  static UniqueFd pagemap;
  static pid_t opened_by = 0;  // "/proc/self" is resolved at open: a child of fork() reopens
  std::lock_guard lock(mu);
  if (opened_by != getpid()) {
    pagemap = UniqueFd(open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC));
    opened_by = getpid();
  }
  if (!pagemap.valid()) return false;
  const auto page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const auto at = static_cast<off_t>(addr / page * sizeof(uint64_t));
  constexpr uint64_t kPresent = 1ull << 63, kFileOrSharedAnon = 1ull << 61;
  uint64_t entry = 0;
  if (pread(pagemap.get(), &entry, sizeof entry, at) != sizeof entry) return false;
  if (!(entry & kPresent)) {
    char byte;
    iovec mine{&byte, 1}, its{reinterpret_cast<void*>(addr), 1};
    if (process_vm_readv(getpid(), &mine, 1, &its, 1, 0) != 1 ||
        pread(pagemap.get(), &entry, sizeof entry, at) != sizeof entry)
      return false;
  }
  return (entry & kPresent) && !(entry & kFileOrSharedAnon);
}

namespace {

std::optional<SharedBacking> SysvBacking(const MapsLine& m, uint64_t addr, uint64_t length) {
  // The maps line of a SysV segment reads "/SYSV<key> (deleted)" and its inode is the shmid.
  std::string_view key_text = m.path.substr(kSysvPrefix.size(), m.path.size() - kSysvPrefix.size() - kDeleted.size());
  uint64_t key = 0;
  if (!TakeHex(key_text, &key, 0) || !key_text.empty() || m.ino > INT32_MAX)
    return NotShared(addr, length, "a SysV-like mapping whose name does not parse");
  const auto shmid = static_cast<int32_t>(m.ino);
  shmid_ds ds{};
  if (shmctl(shmid, IPC_STAT, &ds) != 0 || static_cast<uint32_t>(ds.shm_perm.__key) != key)
    return NotShared(addr, length, "a SysV segment this process cannot identify");
  const uint64_t offset = m.offset + (addr - m.lo);
  if (offset > ds.shm_segsz || length > ds.shm_segsz - offset)
    return NotShared(addr, length, "a range beyond its SysV segment");
  std::lock_guard lock(g_files_mu);
  auto file = Cached(g_segments, shmid);
  if (file == nullptr || file->tag() != static_cast<uint64_t>(ds.shm_cpid)) {
    file = std::make_shared<const BackingFile>(BackingKind::kSysvShm, UniqueFd(), shmid,
                                               static_cast<uint64_t>(ds.shm_cpid), 0, m.ino);
    g_segments[shmid] = file;
  }
  return SharedBacking{file, offset};
}

}  // namespace

uint64_t NextBackingTag() { return g_next_tag.fetch_add(1) + 1; }

uint32_t EncodeDev(dev_t dev) { return (major(dev) << 20) | (minor(dev) & 0xfffff); }

bool ParseMapsLine(std::string_view s, MapsLine* out) {
  // "lo-hi perms offset major:minor inode   path"
  uint64_t major_number = 0, minor_number = 0;
  if (!TakeHex(s, &out->lo, '-') || !TakeHex(s, &out->hi, ' ') || s.size() < 5 || s[4] != ' ') return false;
  out->readable = s[0] == 'r';
  out->writable = s[1] == 'w';
  out->shared = s[3] == 's';
  s.remove_prefix(5);
  if (!TakeHex(s, &out->offset, ' ') || !TakeHex(s, &major_number, ':') || !TakeHex(s, &minor_number, ' '))
    return false;
  out->dev_major = static_cast<uint32_t>(major_number);
  out->dev_minor = static_cast<uint32_t>(minor_number);
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out->ino, 10);
  if (ec != std::errc()) return false;
  s.remove_prefix(static_cast<size_t>(end - s.data()));
  SkipSpaces(s);
  out->path = s;
  return out->lo < out->hi;
}

std::optional<MapsLine> FindMapping(std::string_view maps, uint64_t addr, uint64_t length) {
  if (length == 0 || addr + length < addr) return std::nullopt;
  while (!maps.empty()) {
    const size_t eol = maps.find('\n');
    std::string_view line = maps.substr(0, eol);
    maps.remove_prefix(eol == std::string_view::npos ? maps.size() : eol + 1);
    MapsLine m;
    if (!ParseMapsLine(line, &m) || m.hi <= addr) continue;
    if (m.lo > addr) return std::nullopt;  // lines are sorted: addr is in a hole
    if (addr + length > m.hi) return std::nullopt;  // the range goes on into another mapping
    return m;
  }
  return std::nullopt;
}

std::optional<SharedBacking> FindSharedBacking(uint64_t addr, uint64_t length) {
  if (LooksPrivateAnonymous(addr)) return NotShared(addr, length, "private memory");
  const std::string maps = ReadMaps();
  std::optional<MapsLine> found = FindMapping(maps, addr, length);
  if (!found) return NotShared(addr, length, "not inside one mapping");
  const MapsLine& m = *found;
  if (!m.shared) return NotShared(addr, length, "private memory");
  if (m.ino == 0 || m.path.empty()) return NotShared(addr, length, "a shared mapping of no file");
  // Pages private_share.h moved for a registration: a registration that could not share that
  // move must not outlive it through a descriptor of its own.
  if (m.path.starts_with("/memfd:softverbs-mr")) return NotShared(addr, length, "pages moved for another registration");
  if (m.path.starts_with(kSysvPrefix) && m.path.ends_with(kDeleted)) return SysvBacking(m, addr, length);
  const dev_t dev = makedev(m.dev_major, m.dev_minor);
  const uint64_t offset = m.offset + (addr - m.lo);
  std::lock_guard lock(g_files_mu);
  auto file = Cached(g_files, std::make_pair(EncodeDev(dev), m.ino));
  if (file == nullptr) {
    UniqueFd fd = OpenReadWrite(dev, m.ino, m.path);
    // e.g. MAP_SHARED|MAP_ANONYMOUS ("/dev/zero (deleted)"), a file opened read-only, or one
    // whose maps device is not its stat device (overlayfs): no certain way to reach it.
    if (!fd.valid()) return NotShared(addr, length, "a shared mapping of a file with no read-write descriptor");
    const int32_t handle = fd.get();
    file = std::make_shared<const BackingFile>(BackingKind::kFile, std::move(fd), handle, NextBackingTag(),
                                               EncodeDev(dev), m.ino);
    g_files[{EncodeDev(dev), m.ino}] = file;
  }
  SV_LOG(kDebug, "ibv_reg_mr([0x%llx, +%llu)): shared mapping of %.*s at offset %llu: peers map it",
         static_cast<unsigned long long>(addr), static_cast<unsigned long long>(length),
         static_cast<int>(m.path.size()), m.path.data(), static_cast<unsigned long long>(offset));
  return SharedBacking{file, offset};
}

void PublishBacking(HostRegistry& registry, uint32_t slot, uint32_t key, const SharedBacking& backing) {
  BackingRecord& r = BackingOf(registry, slot);
  r.kind = backing.file->kind();
  r.handle = backing.file->handle();
  r.dev = backing.file->dev();
  r.tag = backing.file->tag();
  r.ino = backing.file->ino();
  r.offset = backing.offset;
  // Before the key's own publication (a release store): a pin on the key sees all of this.
  r.key.store(key, std::memory_order_release);
}

void ClearBacking(HostRegistry& registry, uint32_t slot) {
  BackingOf(registry, slot).key.store(0, std::memory_order_release);
}

bool PublishBackingWithin(HostRegistry& registry, uint32_t from_slot, uint32_t from_key, uint32_t to_slot,
                          uint32_t to_key, uint64_t skip) {
  const BackingRecord& from = BackingOf(registry, from_slot);
  if (from.key.load(std::memory_order_acquire) != from_key) return false;
  BackingRecord& r = BackingOf(registry, to_slot);
  r.kind = from.kind;
  r.handle = from.handle;
  r.dev = from.dev;
  r.tag = from.tag;
  r.ino = from.ino;
  r.offset = from.offset + skip;
  r.key.store(to_key, std::memory_order_release);  // before the key's own publication
  return true;
}

}  // namespace softverbs::fabric
