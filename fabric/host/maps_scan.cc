#include "fabric/host/maps_scan.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstring>
#include <string_view>
#include <utility>

#include "fabric/host/shared_backing.h"

namespace softverbs::fabric {
namespace {

// Holds the longest line (a maps path is at most PATH_MAX) several times over. Callers are
// serialised by private_share.cc's lock.
char g_text[64 * 1024];

// Calls fn(line) for each line of `path` until it returns false; false if the file could not be
// read. No allocation.
template <typename Fn>
bool ForEachLine(const char* path, Fn&& fn) {
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  size_t used = 0;
  bool go = true;
  while (go) {
    const ssize_t n = read(fd, g_text + used, sizeof g_text - used);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    used += static_cast<size_t>(n);
    size_t start = 0;
    for (size_t i = 0; i < used && go; ++i) {
      if (g_text[i] != '\n') continue;
      go = fn(std::string_view(g_text + start, i - start));
      start = i + 1;
    }
    memmove(g_text, g_text + start, used - start);
    used -= start;
    if (used == sizeof g_text) break;  // a line longer than the buffer: not a maps file
  }
  close(fd);
  return true;
}

int ProtOf(const MapsLine& m, std::string_view line) {
  // ParseMapsLine keeps r and w; x is the third letter of the permissions.
  const size_t dash = line.find(' ');
  const bool exec = dash != std::string_view::npos && dash + 3 < line.size() && line[dash + 3] == 'x';
  return (m.readable ? PROT_READ : 0) | (m.writable ? PROT_WRITE : 0) | (exec ? PROT_EXEC : 0);
}

bool Anonymous(const MapsLine& m) { return m.ino == 0 && (m.path.empty() || m.path == "[heap]"); }

// True if smaps' VmFlags text `flags` has the two-letter flag `want` (proc(5)).
bool HasVmFlag(std::string_view flags, std::string_view want) {
  while (!flags.empty()) {
    while (!flags.empty() && flags.front() == ' ') flags.remove_prefix(1);
    const size_t end = std::min(flags.find(' '), flags.size());
    if (flags.substr(0, end) == want) return true;
    flags.remove_prefix(end);
  }
  return false;
}

// Flags of smaps' VmFlags line that make a mapping immovable (proc(5)).
bool ImmovableFlag(std::string_view flags) {
  static constexpr std::string_view kRefused[] = {"lo", "wf", "dc", "gd", "um", "uw", "pf", "io", "ss"};
  for (std::string_view r : kRefused)
    if (HasVmFlag(flags, r)) return true;
  return false;
}

}  // namespace

size_t ScanMovablePrivate(uint64_t lo, uint64_t hi, MapsPiece* pieces, const char** why) {
  size_t n = 0;
  uint64_t covered = lo;
  bool in_range = false;  // the VmFlags line that follows belongs to a mapping of the range
  const char* refusal = nullptr;
  // The caller's own stack would be written between the copy and the remap (its frames).
  const auto sp = reinterpret_cast<uint64_t>(__builtin_frame_address(0));
  MapsLine previous;
  const bool read = ForEachLine("/proc/self/smaps", [&](std::string_view line) {
    MapsLine m;
    if (ParseMapsLine(line, &m)) {
      const MapsLine before = std::exchange(previous, m);
      if (m.lo >= hi) return false;  // sorted: past the range
      in_range = m.hi > lo;
      if (!in_range) return true;
      // A thread's stack (glibc puts a small PROT_NONE guard right below it): a thread forking
      // writes its stack between the fork handler's copy and the fork itself. (A large
      // PROT_NONE reservation below is no guard: sanitizer allocators map their regions so.)
      const bool after_guard = before.hi == m.lo && !before.readable && !before.writable && Anonymous(before) &&
                               before.hi - before.lo <= (1u << 20);
      if (m.lo > covered) refusal = "a hole in the range";
      else if (m.shared || !Anonymous(m)) refusal = "not private anonymous memory";
      else if ((m.lo <= sp && sp < m.hi) || after_guard) refusal = "a thread's stack";
      else if (!m.readable || (ProtOf(m, line) & PROT_EXEC)) refusal = "not readable, or executable";
      else if (n == kMaxMapsPieces) refusal = "over too many mappings";
      if (refusal != nullptr) return false;
      pieces[n++] = {std::max(m.lo, lo), std::min(m.hi, hi), ProtOf(m, line)};
      covered = std::min(m.hi, hi);
      return true;
    }
    if (in_range && line.starts_with("VmFlags:") && ImmovableFlag(line.substr(8))) {
      refusal = "mlocked, wipe-on-fork, dont-fork, grows-down, userfaultfd or I/O memory (smaps VmFlags)";
      return false;
    }
    return true;
  });
  if (!read) refusal = "/proc/self/smaps unreadable";
  else if (refusal == nullptr && covered != hi) refusal = "not entirely mapped";
  if (refusal != nullptr) {
    *why = refusal;
    return 0;
  }
  return n;
}

size_t ScanFileBacked(uint64_t lo, uint64_t hi, uint32_t dev, uint64_t ino, uint64_t file_lo, MapsPiece* pieces) {
  size_t n = 0;
  bool overflow = false;
  const bool read = ForEachLine("/proc/self/maps", [&](std::string_view line) {
    MapsLine m;
    if (!ParseMapsLine(line, &m) || m.hi <= lo) return true;
    if (m.lo >= hi) return false;
    const uint64_t a = std::max(m.lo, lo), b = std::min(m.hi, hi);
    // Ours only if the file is the same and this address still maps the same file offset.
    if (!m.shared || m.ino != ino || EncodeDev(makedev(m.dev_major, m.dev_minor)) != dev ||
        m.offset + (a - m.lo) != file_lo + (a - lo))
      return true;
    if (n == kMaxMapsPieces) {
      overflow = true;
      return false;
    }
    pieces[n++] = {a, b, ProtOf(m, line)};
    return true;
  });
  return (!read || overflow) ? SIZE_MAX : n;
}

size_t ScanFileMappings(uint32_t dev, uint64_t ino, MapsPiece* pieces, bool with_flags) {
  size_t n = 0;
  bool overflow = false;
  bool last_ours = false;  // the VmFlags line that follows belongs to a piece
  const bool read = ForEachLine(with_flags ? "/proc/self/smaps" : "/proc/self/maps", [&](std::string_view line) {
    MapsLine m;
    if (!ParseMapsLine(line, &m)) {
      if (last_ours && line.starts_with("VmFlags:") && HasVmFlag(line.substr(8), "lo")) pieces[n - 1].locked = true;
      return true;
    }
    last_ours = m.shared && m.ino == ino && EncodeDev(makedev(m.dev_major, m.dev_minor)) == dev;
    if (!last_ours) return true;
    if (n == kMaxMapsPieces) {
      overflow = true;
      return false;
    }
    pieces[n++] = {m.lo, m.hi, ProtOf(m, line), m.offset, false};
    return true;
  });
  return (!read || overflow) ? SIZE_MAX : n;
}

bool AnyLockedMemory() {
  bool locked = true;
  ForEachLine("/proc/self/status", [&](std::string_view line) {
    if (!line.starts_with("VmLck:")) return true;
    line.remove_prefix(6);
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    locked = !line.starts_with("0 ");
    return false;
  });
  return locked;
}

bool FileMapped(uint32_t dev, uint64_t ino) {
  bool found = false;
  const bool read = ForEachLine("/proc/self/maps", [&](std::string_view line) {
    MapsLine m;
    found = ParseMapsLine(line, &m) && m.ino == ino && EncodeDev(makedev(m.dev_major, m.dev_minor)) == dev;
    return !found;
  });
  return found || !read;
}

}  // namespace softverbs::fabric
