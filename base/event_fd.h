// An eventfd used as a level-triggered "something is pending" signal: the pollable descriptor
// behind completion channels and async events. The state it signals (a queue, fired flags) is
// the truth; the fd only mirrors "non-empty". Whether waiting blocks follows the fd's own
// O_NONBLOCK flag, which applications set with fcntl() as ibv_get_cq_event(3) and
// ibv_get_async_event(3) describe.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

#include "base/status.h"
#include "base/unique_fd.h"

namespace softverbs {

class EventFd {
 public:
  static Result<EventFd> Create() {
    int fd = eventfd(0, EFD_CLOEXEC);
    if (fd < 0) return Status(errno, "eventfd failed");
    return EventFd(fd);
  }

  int fd() const { return fd_.get(); }

  // Makes the fd readable (any process holding a copy of it may do this).
  void Signal() { SignalFd(fd_.get()); }
  static void SignalFd(int fd) {
    uint64_t one = 1;
    ssize_t n;
    do n = write(fd, &one, sizeof(one));
    while (n < 0 && errno == EINTR);
  }

  // Makes the fd unreadable again; call with the signalled state's lock held, so a concurrent
  // Signal() for new state is never lost (it happens after, and re-arms the fd).
  void Clear() {
    pollfd p{fd_.get(), POLLIN, 0};
    if (poll(&p, 1, 0) == 1) {
      uint64_t v;
      ssize_t ignored = read(fd_.get(), &v, sizeof(v));
      (void)ignored;
    }
  }

  // Waits until the fd is readable: 0, or EAGAIN at once if the application made it O_NONBLOCK,
  // or EINTR when a signal interrupts it.
  int Wait() const {
    if (fcntl(fd_.get(), F_GETFL) & O_NONBLOCK) {
      pollfd p{fd_.get(), POLLIN, 0};
      return poll(&p, 1, 0) == 1 ? 0 : EAGAIN;
    }
    // A blocking read(2), as rdma-core's ibv_get_cq_event / ibv_get_async_event do, so that a
    // signal ends the wait exactly as it does there: EINTR unless the handler was installed
    // with SA_RESTART (programs such as qperf stop a blocked ibv_get_cq_event with SIGALRM).
    uint64_t value;
    if (read(fd_.get(), &value, sizeof(value)) < 0) return errno;
    // The fd only mirrors state kept elsewhere: give the count back, Clear() ends it.
    ssize_t ignored = write(fd_.get(), &value, sizeof(value));
    (void)ignored;
    return 0;
  }

 private:
  explicit EventFd(int fd) : fd_(fd) {}
  UniqueFd fd_;
};

}  // namespace softverbs
