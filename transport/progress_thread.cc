#include "transport/progress_thread.h"

#include <unistd.h>

#include "transport/requester.h"

namespace softverbs::transport {

ProgressThread& ProgressThread::Get() {
  static std::mutex mu;
  static ProgressThread* thread = nullptr;
  static pid_t owner = 0;
  std::lock_guard lock(mu);
  // A child of fork() has no thread of its parent: it gets its own.
  if (thread == nullptr || owner != getpid()) {
    thread = new ProgressThread();  // lives until exit, like the thread
    owner = getpid();
  }
  return *thread;
}

ProgressThread::ProgressThread() { std::thread([this] { Run(); }).detach(); }

void ProgressThread::Schedule(Requester* q, TimePoint when) {
  std::lock_guard lock(mu_);
  auto [it, inserted] = due_.emplace(q, when);
  if (!inserted && when < it->second) it->second = when;
  // Woken only if it sleeps past `when`: a post behind messages in flight schedules a timeout
  // later than the one already waited for, and must not cost two context switches.
  if (when < waiting_until_) cv_.notify_one();
}

void ProgressThread::Forget(Requester* q) {
  std::unique_lock lock(mu_);
  due_.erase(q);
  idle_cv_.wait(lock, [&] { return running_ != q; });
  // A run that was in progress may have scheduled q again (Run and Requester::RunQueue do, under
  // this lock, before running_ is cleared): remove that too.
  due_.erase(q);
}

void ProgressThread::Run() {
  std::unique_lock lock(mu_);
  for (;;) {
    if (due_.empty()) {
      waiting_until_ = TimePoint::max();
      cv_.wait(lock);  // nothing waits for time: sleep until something does
      waiting_until_ = TimePoint::min();  // awake: everything due is looked at before sleeping
      continue;
    }
    auto next = due_.begin();
    for (auto it = due_.begin(); it != due_.end(); ++it)
      if (it->second < next->second) next = it;
    if (const TimePoint when = next->second; std::chrono::steady_clock::now() < when) {
      // A copy: the entry may be erased (Forget) while this waits without the lock.
      waiting_until_ = when;
      cv_.wait_until(lock, when);
      waiting_until_ = TimePoint::min();
      continue;
    }
    Requester* q = next->first;
    due_.erase(next);
    running_ = q;
    lock.unlock();
    TimePoint again = q->Progress();
    lock.lock();
    running_ = nullptr;
    idle_cv_.notify_all();
    if (again != TimePoint::max()) {
      auto [it, inserted] = due_.emplace(q, again);
      if (!inserted && again < it->second) it->second = again;
    }
  }
}

}  // namespace softverbs::transport
