#include "base/memory_map.h"

#include <cinttypes>
#include <cstdio>

namespace softverbs {

MappedAs InspectRange(uint64_t addr, uint64_t length) { return InspectRangeOf(0, addr, length); }

MappedAs InspectRangeOf(int pid, uint64_t addr, uint64_t length) {
  char path[64];
  if (pid == 0)
    snprintf(path, sizeof(path), "/proc/self/maps");
  else
    snprintf(path, sizeof(path), "/proc/%d/maps", pid);
  FILE* maps = fopen(path, "re");
  if (maps == nullptr) return MappedAs::kUnmapped;
  const uint64_t end = addr + length;
  uint64_t covered = addr;  // everything below has been seen mapped
  bool writable = true;
  char line[512];
  while (covered < end && fgets(line, sizeof(line), maps) != nullptr) {
    uint64_t lo, hi;
    char perms[5] = {};
    if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %4s", &lo, &hi, perms) != 3) continue;
    if (hi <= covered) continue;
    if (lo > covered) break;  // a hole: the lines are sorted by address
    writable = writable && perms[1] == 'w';
    covered = hi;
  }
  fclose(maps);
  if (covered < end) return MappedAs::kUnmapped;
  return writable ? MappedAs::kWritable : MappedAs::kReadOnly;
}

}  // namespace softverbs
