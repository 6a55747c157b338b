// Whether a range of this process's address space is mapped, and writable: what pinning it for
// a device would check (ibv_reg_mr fails with EFAULT otherwise).
#pragma once

#include <cstdint>

namespace softverbs {

enum class MappedAs { kUnmapped, kReadOnly, kWritable };

// How [addr, addr + length) is mapped: kWritable only if every byte is in a writable mapping.
// Reads /proc/self/maps; for registration paths, not hot paths.
MappedAs InspectRange(uint64_t addr, uint64_t length);
// The same for process `pid` (its /proc/<pid>/maps; readable for processes whose memory
// process_vm_readv may reach). kUnmapped if the process is gone.
MappedAs InspectRangeOf(int pid, uint64_t addr, uint64_t length);

}  // namespace softverbs
