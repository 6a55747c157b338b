// The owner's half of CQ moderation (ibv_modify_cq(3), IBV_CQ_MODERATE): the period. A
// moderated CQ's event waits for cq_count completions or cq_period microseconds after the first
// of them (transport/cq_ring.h, ModerationHolds); the count is checked by each producer, but
// when completions stop before it is reached someone must end the wait when the period does.
// That is this process's moderation timer: one thread, started by the first ibv_modify_cq with
// a period, woken through its eventfd by the producer (of any process) that starts a wait, and
// sleeping until the earliest period of its CQs ends.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

#include "base/event_fd.h"
#include "base/status.h"
#include "fabric/host/host_directory.h"

namespace softverbs::core {

class Cq;

class CqModerationTimer {
 public:
  // This process's timer (its thread started on first use, again in a child after fork()).
  static Result<CqModerationTimer*> Get(fabric::LocalProcess& local);

  int fd() const { return fd_.fd(); }
  uint64_t tag() const { return tag_; }
  void Add(Cq* cq);
  // After this returns the timer no longer touches `cq`.
  void Remove(Cq* cq);

 private:
  CqModerationTimer(EventFd fd, uint64_t tag) : fd_(std::move(fd)), tag_(tag) {}
  void Run();

  EventFd fd_;
  uint64_t tag_;
  std::mutex mu_;
  std::vector<Cq*> cqs_;
};

}  // namespace softverbs::core
