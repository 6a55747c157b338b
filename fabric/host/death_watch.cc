#include "fabric/host/death_watch.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <cstring>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "base/log.h"

namespace softverbs::fabric {
namespace {

struct Watched {
  int fd;
  std::shared_ptr<std::atomic<bool>> dead;
  std::atomic<bool> done{false};  // the watch has let go of it (its last touch): free to free
};

// One per process incarnation: a child after fork() has the parent's descriptor but no thread.
struct DeathWatchState {
  pid_t pid = 0;
  int epoll = -1;
  bool failed = false;  // no epoll or no thread here: callers look themselves
  // Every entry, owned here (the watch thread takes no lock: a fork() can never catch it
  // holding one); those it is done with are freed by the next WatchDeath.
  std::vector<std::unique_ptr<Watched>> entries;
};

std::mutex g_death_watch_mu;
// Never destroyed: the watch thread runs until the process exits (no destructor at exit frees
// what it reads).
DeathWatchState& g_death_watch = *new DeathWatchState;
[[maybe_unused]] const pid_t g_loaded_by = getpid();  // (a process forked later is another)
// fork() never copies the lock held: taken around it (pthread_atfork(3)'s pattern).
[[maybe_unused]] const int g_death_watch_atfork = pthread_atfork(
    [] { g_death_watch_mu.lock(); }, [] { g_death_watch_mu.unlock(); }, [] { g_death_watch_mu.unlock(); });

void Run(int epoll) {
  epoll_event ev[16];
  for (;;) {
    const int n = epoll_wait(epoll, ev, 16, -1);
    for (int i = 0; i < n; ++i) {
      auto* w = static_cast<Watched*>(ev[i].data.ptr);
      w->dead->store(true, std::memory_order_release);
      epoll_ctl(epoll, EPOLL_CTL_DEL, w->fd, nullptr);
      close(w->fd);
      w->done.store(true, std::memory_order_release);
    }
  }
}

// (under g_death_watch_mu) The watch of this incarnation, started on first use.
bool Started() {
  const pid_t self = getpid();
  if (g_death_watch.pid == self) return !g_death_watch.failed;
  // A forked child: the parent's epoll descriptor watches the parent's peers with nobody
  // waiting on it; it is dropped, and its entries with it (they are the parent's).
  if (g_death_watch.epoll >= 0) close(g_death_watch.epoll);
#if defined(__SANITIZE_THREAD__)
  // ThreadSanitizer cannot start threads in the child of a multi-threaded fork() (it dies):
  // such a child checks its peers on the clock instead.
  if (self != g_loaded_by) {
    g_death_watch = DeathWatchState{self, -1, true, {}};
    return false;
  }
#endif
  g_death_watch = DeathWatchState{self, epoll_create1(EPOLL_CLOEXEC), false, {}};
  if (g_death_watch.epoll < 0) {
    g_death_watch.failed = true;
    SV_LOG(kInfo, "epoll_create1 failed (%s): peers' exits are checked on a coarse clock", strerror(errno));
    return false;
  }
  try {
    std::thread([e = g_death_watch.epoll] { Run(e); }).detach();
  } catch (const std::system_error& e) {
    g_death_watch.failed = true;
    SV_LOG(kInfo, "no thread to watch peers' exits (%s): they are checked on a coarse clock", e.what());
    return false;
  }
  return true;
}

}  // namespace

bool WatchDeath(int pidfd, std::shared_ptr<std::atomic<bool>> dead) {
  if (pidfd < 0) return false;
  std::lock_guard lock(g_death_watch_mu);
  if (!Started()) return false;
  std::erase_if(g_death_watch.entries, [](const auto& w) { return w->done.load(std::memory_order_acquire); });
  const int fd = fcntl(pidfd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return false;
  std::unique_ptr<Watched> w(new Watched{fd, std::move(dead)});
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = w.get();
  if (epoll_ctl(g_death_watch.epoll, EPOLL_CTL_ADD, fd, &ev) != 0) {
    close(fd);
    return false;
  }
  g_death_watch.entries.push_back(std::move(w));
  return true;
}

}  // namespace softverbs::fabric
