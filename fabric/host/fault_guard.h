// Copies through a mapping of another process's file that survive the file shrinking under them
// (issue 17 item 9). An initiator reaches a shared-backed registration with memcpy through its
// own mapping of the owner's file (fabric/host/backing_maps.h); if the owner truncates the file
// below the registered range, touching a page beyond the new end raises SIGBUS in the
// initiator. A NIC reports an error instead of crashing the process that posted, so must we.
//
// Why a signal guard and not a size check: an fstat per access costs what the mapping saves
// (the size is checked when the file is mapped, backing_maps.cc), and a check before the copy
// still races with a truncation during it. So the copy runs under a thread-local guard: a
// SIGBUS raised by the kernel (si_code > 0, a fault, not a kill()) in a thread whose guard is
// armed jumps back out of the copy (siglongjmp), and the caller reports an error. Any other
// SIGBUS goes on to the handler installed before ours, or to the default action (the fault is
// raised again with it). The handler is installed once, when this process first maps a peer's
// file. Known limit: a program that installs its own SIGBUS handler later (without chaining)
// replaces ours, and a truncation then crashes it as before.
#pragma once

#include <cstddef>

namespace softverbs::fabric {

// Installs the SIGBUS handler (once per process; later calls do nothing).
void InstallFaultGuard();

// Runs `fn(ctx)` with this thread's guard armed; false if a SIGBUS fault interrupted it (its
// effects up to the fault stay). `fn` must hold no lock and own nothing that needs a destructor
// while it touches the mapping: the jump skips them. Not reentrant (the copies do not nest).
bool RunGuarded(void (*fn)(void*), void* ctx);

// Faults this process's guards have caught (for tests and the log).
size_t GuardedFaults();

}  // namespace softverbs::fabric
