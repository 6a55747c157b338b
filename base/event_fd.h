// A counting eventfd: the pollable descriptor behind completion channels and async events.
// One Signal() makes the fd readable once more; each Consume() takes one count. Whether Consume()
// blocks follows the fd's own O_NONBLOCK flag, which applications set with fcntl() as the verbs
// man pages describe (ibv_get_cq_event(3), ibv_get_async_event(3)).
#pragma once

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
    int fd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
    if (fd < 0) return Status(errno, "eventfd failed");
    return EventFd(fd);
  }

  int fd() const { return fd_.get(); }

  void Signal() {
    uint64_t one = 1;
    ssize_t n;
    do n = write(fd_.get(), &one, sizeof(one));
    while (n < 0 && errno == EINTR);
  }

  // Takes one count: 0 on success, else the errno of read(2) (EAGAIN on a non-blocking fd).
  int Consume() {
    uint64_t v;
    ssize_t n;
    do n = read(fd_.get(), &v, sizeof(v));
    while (n < 0 && errno == EINTR);
    return n == sizeof(v) ? 0 : errno;
  }

 private:
  explicit EventFd(int fd) : fd_(fd) {}
  UniqueFd fd_;
};

}  // namespace softverbs
