// Registered private anonymous memory made reachable by other processes' initiators with memcpy
// (issue 16; docs/data-path.md "Private memory moved into a shared file").
//
// At ibv_reg_mr, the pages holding the registration -- private anonymous memory: malloc,
// memalign, anonymous mmap, the heap -- are moved into a memfd mapped MAP_SHARED at the same
// addresses, with their contents: the application sees the same bytes at the same addresses
// with the same protections, and peers map the memfd like any shared-backed registration
// (fabric/host/shared_backing.h, backing_maps.h). At deregistration of the last registration
// on those pages they are moved back into private anonymous memory, so after ibv_dereg_mr the
// memory behaves exactly as before (MADV_DONTNEED zeroes it, mremap may grow it, fork copies it).
//
// A move is made only while no write can be lost:
// - the other threads of the process are parked (world_stop.h) from the check of the mappings
//   to the remap, so none writes between the copy and the remap, in user mode or in a system call;
// - no other live registration of this process touches the pages (`busy`: a key still
//   published or still pinned could have a peer's process_vm_writev in flight into them);
// - the mappings are private, anonymous, readable and movable (maps_scan.h).
// Otherwise the registration keeps the process_vm_writev/readv path, as before.
//
// fork(): the moved pages are marked MADV_DONTFORK, and a pthread_atfork handler gives the child
// a private copy of them, taken in the parent just before the fork -- what the kernel does for
// pinned pages of an RDMA registration (copy on fork, so ibv_is_fork_initialized() reports
// IBV_FORK_UNNEEDED), with or without ibv_fork_init / RDMAV_FORK_SAFE. A child made without
// glibc's fork (a raw clone system call) finds no memory there, as with rdma-core's
// ibv_fork_init on older kernels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "fabric/host/shared_backing.h"

namespace softverbs::fabric {

// True when a live key of this process (published, or withdrawn with pins still held) touches
// [lo, hi) of this process's memory. Called while the other threads are parked: no allocation.
using RangeBusyFn = bool (*)(void* ctx, uint64_t lo, uint64_t hi);

// The name of the memfds moves make ("/memfd:softverbs-mr (deleted)" in the maps): only
// SharePrivate describes them (FindSharedBacking leaves them alone), so that every registration
// on moved pages holds the move.
inline constexpr char kMemfdName[] = "softverbs-mr";

// False when SOFTVERBS_PRIVATE_SHARE=0 (read once).
bool PrivateShareEnabled();

// The shared backing of [addr, +length) of private anonymous memory: the pages holding it are
// moved into a memfd (or already were, by a registration of the same pages that is still alive,
// which then shares the memfd). Nothing -- the memory unchanged, an SV_LOG debug line saying why
// -- when it cannot be done safely. The pages move back when the last SharedBacking of the move
// is destroyed (after the key was withdrawn), unless a live key of `busy` still touches them:
// then they stay shared and the move back is tried again at the next release of any move.
std::optional<SharedBacking> SharePrivate(uint64_t addr, uint64_t length, RangeBusyFn busy, void* ctx);

// Moves back the moves whose registrations are all gone but which a live key of `busy` kept
// shared (lingering): call when a registration that was not a move's own goes away.
void RetryMovesBack();

struct PrivateShareCounters {
  size_t moved = 0;       // ranges moved into a memfd
  size_t reused = 0;      // registrations that found their pages already moved
  size_t moved_back = 0;  // ranges moved back into private memory
  size_t refused = 0;     // registrations left on the process_vm path
  size_t lingering = 0;   // moves whose registrations are gone but whose pages are still shared
};
PrivateShareCounters PrivateShareStats();

}  // namespace softverbs::fabric
