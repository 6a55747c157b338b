// Reads of /proc/self/maps and /proc/self/smaps that allocate nothing, for code that runs while
// the other threads of the process are parked (fabric/host/world_stop.h: one of them may hold
// the allocator's lock). The text is read in chunks into a static buffer and parsed line by line
// (ParseMapsLine); reading stops as soon as the lines pass the range asked about, so the kernel
// does not generate the rest.
#pragma once

#include <cstddef>
#include <cstdint>

namespace softverbs::fabric {

// A part of a range as one mapping holds it.
struct MapsPiece {
  uint64_t lo = 0, hi = 0;  // [lo, hi), clipped to the range asked about
  int prot = 0;             // PROT_READ / PROT_WRITE / PROT_EXEC of the mapping
  uint64_t offset = 0;      // ScanFileMappings: the file offset mapped at lo
  bool locked = false;      // ScanFileMappings with_flags: mlock-ed (smaps VmFlags lo)
};

inline constexpr size_t kMaxMapsPieces = 64;

// Private anonymous memory that may be moved into a shared file (fabric/host/private_share.h):
// [lo, hi) (page aligned) is entirely mapped, by private ("p") mappings of no file (anonymous or
// [heap]) that are readable and not executable, none of them mlocked, wipe-on-fork, dont-fork,
// grows-down, registered with userfaultfd, or a PFN/IO mapping (smaps VmFlags lo, wf, dc, gd,
// um, uw, pf, io, ss). Fills `pieces` (at most kMaxMapsPieces) and returns their count, or 0
// with `*why` set.
size_t ScanMovablePrivate(uint64_t lo, uint64_t hi, MapsPiece* pieces, const char** why);

// The parts of [lo, hi) still mapped MAP_SHARED from the file (dev, ino) with file offset
// `file_lo` at address `lo` (what a move into the file made; the application may have unmapped,
// remapped or mprotect-ed parts since). Returns their count (at most kMaxMapsPieces), or SIZE_MAX
// if /proc/self/maps could not be read or there are more.
size_t ScanFileBacked(uint64_t lo, uint64_t hi, uint32_t dev, uint64_t ino, uint64_t file_lo, MapsPiece* pieces);

// Every mapping of the file (dev, ino) in this process, wherever it is now (the application
// may have mremap-ed moved pages away, or grown them), with the file offset each maps. Returns
// their count (at most kMaxMapsPieces), or SIZE_MAX if /proc/self/maps could not be read or
// there are more. With `with_flags`, reads smaps (slower) to tell which are mlock-ed.
size_t ScanFileMappings(uint32_t dev, uint64_t ino, MapsPiece* pieces, bool with_flags = false);

// True if this process has locked memory (/proc/self/status VmLck, or the file unreadable).
bool AnyLockedMemory();

// True if some mapping of this process maps the file (dev, ino) (or /proc/self/maps could not
// be read).
bool FileMapped(uint32_t dev, uint64_t ino);

}  // namespace softverbs::fabric
