// The CM's timeouts (a REQ or REP never answered) as a timerfd in the channel's epoll set:
// the channel becomes readable when one expires and rdma_get_cm_event runs the expiry, so no
// thread waits for them (DESIGN.md 5.2).
#pragma once

#include "base/status.h"
#include "base/unique_fd.h"
#include "cm/channel.h"

namespace softverbs::cm {

class Timer : public Source {
 public:
  class Owner {
   public:
    virtual ~Owner() = default;
    virtual void OnTimeout() = 0;  // with the channel lock held
  };
  explicit Timer(Owner* owner) : owner_(owner) {}

  // With the channel's lock held. Arming again restarts the countdown.
  Status Arm(Channel* channel, int milliseconds);
  void Disarm(Channel* channel);
  void MoveTo(Channel* from, Channel* to);
  bool armed() const { return armed_; }

  void OnReadable() override;

 private:
  Owner* owner_;
  Channel* channel_ = nullptr;
  UniqueFd fd_;
  bool armed_ = false;
};

}  // namespace softverbs::cm
