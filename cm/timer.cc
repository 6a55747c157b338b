#include "cm/timer.h"

#include <sys/timerfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace softverbs::cm {

Status Timer::Arm(Channel* channel, int milliseconds) {
  if (!fd_.valid()) {
    fd_.reset(timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
    if (!fd_.valid()) return Status(errno, std::string("timerfd_create: ") + strerror(errno));
  }
  itimerspec when{};
  when.it_value.tv_sec = milliseconds / 1000;
  when.it_value.tv_nsec = static_cast<long>(milliseconds % 1000) * 1000000L;
  if (timerfd_settime(fd_.get(), 0, &when, nullptr) != 0)
    return Status(errno, std::string("timerfd_settime: ") + strerror(errno));
  if (!armed_) SV_RETURN_IF_ERROR(channel->Watch(fd_.get(), this));
  channel_ = channel;
  armed_ = true;
  return Status::Ok();
}

void Timer::Disarm(Channel* channel) {
  if (!armed_) return;
  itimerspec never{};
  timerfd_settime(fd_.get(), 0, &never, nullptr);
  channel->Unwatch(fd_.get());
  armed_ = false;
}

void Timer::MoveTo(Channel* from, Channel* to) {
  if (!armed_) return;
  from->Unwatch(fd_.get());
  armed_ = to->Watch(fd_.get(), this).ok();
  channel_ = to;
}

void Timer::OnReadable() {
  uint64_t expirations;
  if (read(fd_.get(), &expirations, sizeof(expirations)) != sizeof(expirations)) return;
  Disarm(channel_);
  owner_->OnTimeout();
}

}  // namespace softverbs::cm
