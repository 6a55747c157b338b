#include "cm/channel.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>

#include <cstring>

#include "cm/id.h"

namespace softverbs::cm {

Result<std::unique_ptr<Channel>> Channel::Create() {
  UniqueFd epoll(epoll_create1(EPOLL_CLOEXEC));
  if (!epoll.valid()) return Status(errno, std::string("epoll_create1: ") + strerror(errno));
  Result<EventFd> wake = EventFd::Create();
  if (!wake.ok()) return wake.status();
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = nullptr;  // the wake-up fd: the queue itself is the truth
  if (epoll_ctl(epoll.get(), EPOLL_CTL_ADD, wake->fd(), &ev) != 0)
    return Status(errno, std::string("epoll_ctl: ") + strerror(errno));
  return std::unique_ptr<Channel>(new Channel(std::move(epoll), std::move(wake.value())));
}

Channel::~Channel() = default;

Result<Event> Channel::Get() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    if (!queue_.empty()) {
      Event event = std::move(queue_.front());
      queue_.pop_front();
      if (queue_.empty()) wake_.Clear();
      if (event.id != nullptr) event.id->AddUnacked(1);
      return event;
    }
    if (ProcessOneReady()) continue;
    if (fcntl(epoll_.get(), F_GETFL) & O_NONBLOCK)
      return Status(EAGAIN, "no event pending and the channel's fd is O_NONBLOCK");
    lock.unlock();
    pollfd p{epoll_.get(), POLLIN, 0};
    while (poll(&p, 1, -1) < 0 && errno == EINTR) {
    }
    lock.lock();
  }
}

bool Channel::ProcessOneReady() {
  epoll_event ev{};
  int n;
  do n = epoll_wait(epoll_.get(), &ev, 1, 0);
  while (n < 0 && errno == EINTR);
  if (n <= 0 || ev.data.ptr == nullptr) return false;
  static_cast<Source*>(ev.data.ptr)->OnReadable();
  return true;
}

void Channel::Acknowledge(Id* id) {
  std::lock_guard<std::mutex> lock(mutex_);
  id->AddUnacked(-1);
  acked_.notify_all();
}

void Channel::Post(Event event) {
  queue_.push_back(std::move(event));
  wake_.Signal();
}

Status Channel::Watch(int fd, Source* source) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = source;
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0)
    return Status(errno, std::string("epoll_ctl: ") + strerror(errno));
  return Status::Ok();
}

void Channel::Unwatch(int fd) { epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr); }

void Channel::Retarget(int fd, Source* source) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = source;
  epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, fd, &ev);
}

std::deque<Event> Channel::TakeEventsOf(Id* id) {
  std::deque<Event> taken, kept;
  for (Event& e : queue_) (e.id == id ? taken : kept).push_back(std::move(e));
  queue_ = std::move(kept);
  if (queue_.empty()) wake_.Clear();
  return taken;
}

std::deque<Event> Channel::TakeRequestsTo(Id* id) {
  std::deque<Event> taken, kept;
  for (Event& e : queue_) (e.listen_id == id ? taken : kept).push_back(std::move(e));
  queue_ = std::move(kept);
  if (queue_.empty()) wake_.Clear();
  return taken;
}

void Channel::WaitAcknowledged(Id* id, std::unique_lock<std::mutex>& lock) {
  acked_.wait(lock, [id] { return id->unacked() <= 0; });
}

}  // namespace softverbs::cm
