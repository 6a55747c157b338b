#include "transport/raw/paced_send_queue.h"

#include "transport/work_request.h"

namespace softverbs::transport::raw {

PacedSendQueue::PacedSendQueue(SendFn send, CompleteFn complete, bool own_thread)
    : send_(std::move(send)), complete_(std::move(complete)) {
  if (own_thread) thread_ = std::thread([this] { Run(); });
}

PacedSendQueue::~PacedSendQueue() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void PacedSendQueue::Configure(uint32_t rate_kbps, uint32_t burst_bytes) {
  {
    std::lock_guard lock(mu_);
    pacer_.Configure(rate_kbps, rate_kbps ? burst_bytes : 0);
  }
  wake_.notify_all();  // a new rate applies at once to what waits
}

bool PacedSendQueue::limited() const {
  std::lock_guard lock(mu_);
  return pacer_.limited();
}

bool PacedSendQueue::empty() const {
  std::lock_guard lock(mu_);
  return queue_.empty();
}

void PacedSendQueue::Push(Wr wr) {
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(wr));
  }
  wake_.notify_all();
}

void PacedSendQueue::Flush(uint32_t wc_status) {
  std::lock_guard pump(pump_mu_);
  std::deque<Wr> flushed;
  {
    std::lock_guard lock(mu_);
    flushed.swap(queue_);
    next_frame_ = 0;
  }
  for (const Wr& wr : flushed) complete_(wr, wc_status);
}

void PacedSendQueue::Drop() {
  std::lock_guard pump(pump_mu_);
  std::lock_guard lock(mu_);
  queue_.clear();
  next_frame_ = 0;
}

PacedSendQueue::Clock::time_point PacedSendQueue::Pump(Clock::time_point now) {
  std::lock_guard pump(pump_mu_);
  std::vector<std::vector<uint8_t>> leaving;
  std::vector<Wr> done;
  Clock::time_point next = Clock::time_point::max();
  {
    std::lock_guard lock(mu_);
    while (!queue_.empty()) {
      Wr& head = queue_.front();
      if (next_frame_ < head.frames.size()) {
        const uint64_t bytes = head.frames[next_frame_].size();
        if (!pacer_.MayGo(bytes, now)) {
          next = pacer_.ReadyAt(bytes);
          break;
        }
        pacer_.Take(bytes, now);
        leaving.push_back(std::move(head.frames[next_frame_++]));
        if (next_frame_ < head.frames.size()) continue;
      }
      done.push_back(std::move(head));
      queue_.pop_front();
      next_frame_ = 0;
    }
  }
  // The frames leave before their WRs complete (outside the lock: a send may loop back into
  // this process's QPs).
  if (!leaving.empty()) send_(leaving);
  for (const Wr& wr : done) complete_(wr, wc_status::kSuccess);
  return next;
}

void PacedSendQueue::Drain(Clock::time_point deadline) {
  for (;;) {
    const Clock::time_point next = Pump(Clock::now());
    if (next == Clock::time_point::max() || next > deadline) return;
    std::this_thread::sleep_until(next);
  }
}

void PacedSendQueue::Run() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    lock.unlock();
    const Clock::time_point next = Pump(Clock::now());
    lock.lock();
    if (stop_) break;
    // Woken early by Push or Configure; Pump looks again either way.
    if (next == Clock::time_point::max())
      wake_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    else
      wake_.wait_until(lock, next);
  }
}

}  // namespace softverbs::transport::raw
