// An event channel (rdma_create_event_channel(3)): the events of its identifiers, in order.
// Its pollable fd is an epoll set over the identifiers' sockets plus an eventfd for events made
// locally (ADDR_RESOLVED, REJECTED of a refused connect...), so it is readable exactly when
// Get() has something to do; Get() reads the sockets, runs the protocol, and returns events. No
// thread: the application's own rdma_get_cm_event (or poll) does the work (DESIGN.md 5.2).
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>

#include "base/event_fd.h"
#include "base/status.h"
#include "base/unique_fd.h"
#include "cm/event.h"

namespace softverbs::cm {

// Something in the epoll set.
class Source {
 public:
  virtual ~Source() = default;
  // Called with the channel lock held when the fd is readable.
  virtual void OnReadable() = 0;
};

class Channel {
 public:
  static Result<std::unique_ptr<Channel>> Create();
  ~Channel();

  int fd() const { return epoll_.get(); }
  std::mutex& mutex() { return mutex_; }

  // Blocks until an event is there, unless the application made fd() O_NONBLOCK (EAGAIN), as
  // rdma_get_cm_event(3) says. The event stays "unacknowledged" for its id until Acknowledge().
  Result<Event> Get();
  void Acknowledge(Id* id);

  // With mutex() held:
  void Post(Event event);                       // queue a locally made event
  Status Watch(int fd, Source* source);         // add to the epoll set
  void Unwatch(int fd);
  void Retarget(int fd, Source* source);        // same fd, another owner
  // Removes `id`'s queued events (an identifier being destroyed or migrated) and returns them.
  std::deque<Event> TakeEventsOf(Id* id);
  // Removes the queued CONNECT_REQUESTs of listener `id` (a listener being destroyed).
  std::deque<Event> TakeRequestsTo(Id* id);
  // Waits (releasing `lock`) until every event returned for `id` was acknowledged
  // (rdma_destroy_id(3) / rdma_get_cm_event(3): "Destruction of an rdma_cm_id will block until
  // related events have been acknowledged").
  void WaitAcknowledged(Id* id, std::unique_lock<std::mutex>& lock);
  size_t ids() const { return ids_; }
  void AddId() { ++ids_; }
  void RemoveId() { --ids_; }

 private:
  Channel(UniqueFd epoll, EventFd wake) : epoll_(std::move(epoll)), wake_(std::move(wake)) {}
  bool ProcessOneReady();  // with mutex_ held; false when nothing was ready

  UniqueFd epoll_;
  EventFd wake_;
  std::mutex mutex_;
  std::condition_variable acked_;
  std::deque<Event> queue_;
  size_t ids_ = 0;
};

}  // namespace softverbs::cm
