#include "core/cq_moderation.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <thread>

#include "base/clock.h"
#include "core/cq.h"

namespace softverbs::core {

Result<CqModerationTimer*> CqModerationTimer::Get(fabric::LocalProcess& local) {
  static std::mutex mu;
  static CqModerationTimer* timer = nullptr;
  static pid_t owner = 0;
  std::lock_guard lock(mu);
  // After fork() the child has the memory but not the thread: it starts its own (the parent's
  // object is left alone, its CQs are the parent's).
  if (timer != nullptr && owner == getpid()) return timer;
  auto fd = EventFd::Create();
  if (!fd.ok()) return fd.status();
  // Never destroyed: CQs may outlive static destructors, and the thread runs until exit.
  timer = new CqModerationTimer(std::move(fd.value()), local.NewFdTag());
  owner = getpid();
  std::thread([t = timer] { t->Run(); }).detach();
  return timer;
}

void CqModerationTimer::Add(Cq* cq) {
  std::lock_guard lock(mu_);
  if (std::find(cqs_.begin(), cqs_.end(), cq) == cqs_.end()) cqs_.push_back(cq);
  fd_.Signal();  // a wait may already have started
}

void CqModerationTimer::Remove(Cq* cq) {
  std::lock_guard lock(mu_);
  std::erase(cqs_, cq);
}

void CqModerationTimer::Run() {
  for (;;) {
    fd_.Clear();  // before the scan: a wake-up after it stays pending for the next ppoll
    uint64_t next = 0;
    {
      std::lock_guard lock(mu_);
      const uint64_t now = DeviceClockNow();
      for (Cq* cq : cqs_) {
        const uint64_t due = cq->FireIfDue(now);
        if (due != 0 && (next == 0 || due < next)) next = due;
      }
    }
    pollfd p{fd_.fd(), POLLIN, 0};
    if (next == 0) {
      ppoll(&p, 1, nullptr, nullptr);
      continue;
    }
    const uint64_t now = DeviceClockNow();
    const uint64_t wait = next > now ? next - now : 0;
    const timespec ts{static_cast<time_t>(wait / 1000000000), static_cast<long>(wait % 1000000000)};
    ppoll(&p, 1, &ts, nullptr);
  }
}

}  // namespace softverbs::core
