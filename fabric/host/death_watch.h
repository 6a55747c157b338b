// Process exits seen as they happen: one thread of this process sleeps in epoll on the pidfds
// of the peers it works with and raises each one's flag when its process exits (a pidfd becomes
// readable then, pidfd_open(2)). A work request then reads one flag instead of a clock (issue
// 16: Peer::AliveRecently runs once per RDMA WRITE). Where there is no pidfd (old kernels,
// seccomp, valgrind) or no thread can be started, nothing is watched and the caller keeps
// checking by itself.
#pragma once

#include <atomic>
#include <memory>

namespace softverbs::fabric {

// Raises `dead` (release) once the process `pidfd` refers to has exited; the descriptor is
// duplicated, the caller keeps its own. False: not watched -- the caller must look itself.
// After fork() the child starts its own watch on its first call (threads do not survive fork).
bool WatchDeath(int pidfd, std::shared_ptr<std::atomic<bool>> dead);

}  // namespace softverbs::fabric
