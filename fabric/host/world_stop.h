// Stops every other thread of this process for a moment, so that the caller can change a range
// of the address space that they may be writing (fabric/host/private_share.h moves registered
// private memory into a shared file and back; a write landing between its copy and its remap
// would be lost).
//
// How: each other thread is sent a real-time signal (tgkill) whose handler records that the
// thread is parked and waits on a futex until the stop ends -- the "stop the world" of garbage
// collectors. A thread runs the handler only in user mode, so once it is parked it is in no
// system call either: nothing of this process writes memory but the caller. A thread in a
// blocking system call is interrupted and, when the stop ends, its call is restarted
// (SA_RESTART); the calls the kernel never restarts (poll, epoll_wait, nanosleep, ...; signal(7))
// return EINTR, as with any signal a program may receive (a profiler's SIGPROF).
//
// Signals: the parked threads block every signal while parked (the handler's mask), and the
// caller blocks them too while the world is stopped, so no signal handler writes memory then.
//
// Refusal is safe: a thread that does not park within the deadline (the signal blocked, a
// thread in uninterruptible sleep or stopped by a debugger), a handler another library installed
// on the signal, too many threads -- the stop fails, every parked thread is released, and the
// caller leaves the memory as it was. The caller must allocate nothing while the world is stopped
// (a parked thread may hold the allocator's lock): StopOthers itself does not.
#pragma once

#include <signal.h>

#include <cstddef>

namespace softverbs::fabric {

// The signal used to park threads: SIGRTMAX - 4 (glibc keeps the lowest real-time signals).
int ParkSignal();

class WorldStop {
 public:
  WorldStop() = default;
  ~WorldStop() { Resume(); }
  WorldStop(const WorldStop&) = delete;
  WorldStop& operator=(const WorldStop&) = delete;

  // Parks every other thread of the process; true once all are parked (or there are none).
  // False -- everything released, an SV_LOG line saying why -- if one did not park in time.
  // One stop at a time per process: the caller serialises (a second caller would be parked).
  bool StopOthers();
  // Releases the parked threads (done by the destructor too).
  void Resume();
  // How many threads the last successful stop parked (for tests).
  size_t parked() const { return parked_; }
  // True between a successful StopOthers and Resume.
  bool stopped() const { return stopped_; }

 private:
  bool stopped_ = false;
  size_t parked_ = 0;
  sigset_t saved_mask_;  // the caller's signal mask: every signal is blocked while stopped
};

// Stops that had to be refused since the process started (for tests and the log).
size_t RefusedStops();

}  // namespace softverbs::fabric
