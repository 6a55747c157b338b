// The one background thread softverbs runs (DESIGN.md section 5, principle 2): it retries send
// queues that wait for time to pass (RNR, transport retry) and sleeps when none does.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

namespace softverbs::transport {

class Requester;

class ProgressThread {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  // The process's thread, started on first use (and again in a child after fork()).
  static ProgressThread& Get();

  // Runs q->Progress() at `when` (or earlier if already scheduled earlier).
  void Schedule(Requester* q, TimePoint when);
  // After this returns, q is neither scheduled nor running.
  void Forget(Requester* q);

 private:
  ProgressThread();
  void Run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable idle_cv_;
  std::map<Requester*, TimePoint> due_;
  Requester* running_ = nullptr;
  // What the thread sleeps until (max: no deadline; min: awake): Schedule wakes it only for an
  // earlier deadline.
  TimePoint waiting_until_ = TimePoint::min();
};

}  // namespace softverbs::transport
