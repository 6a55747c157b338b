// Packet pacing of a raw QP's send queue (ibv_modify_qp_rate_limit(3) on RAW_PACKET, mlx5's
// main use of its rate limiter): with a rate, built frames wait here, in order, until the token
// bucket (transport/pacer.h) holds their bytes, each frame paced as the packet it is; a work
// request completes when its last frame has left. (Its bytes were copied at post time, so the
// buffer is the application's at once; the completion says when the WR was sent, as a NIC's.)
//
// Pump() is the whole decision, against a `now` it is given: a thread of the queue's own calls it
// and sleeps until the time it returns (or a Push / Configure wakes it); a unit test calls it with
// a fake clock and no thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "transport/pacer.h"

namespace softverbs::transport::raw {

class PacedSendQueue {
 public:
  using Clock = std::chrono::steady_clock;
  struct Wr {
    std::vector<std::vector<uint8_t>> frames;
    uint64_t wr_id = 0;
    bool signaled = false;
  };
  using SendFn = std::function<void(std::span<const std::vector<uint8_t>>)>;
  using CompleteFn = std::function<void(const Wr&, uint32_t wc_status)>;

  // `own_thread` false: nothing pumps but the caller (tests).
  PacedSendQueue(SendFn send, CompleteFn complete, bool own_thread = true);
  ~PacedSendQueue();  // what still waits is dropped: the QP is being destroyed

  // The rate (0: unlimited, what waits leaves at once) and the bucket's size in bytes.
  void Configure(uint32_t rate_kbps, uint32_t burst_bytes);
  bool limited() const;
  bool empty() const;
  void Push(Wr wr);
  // ERR (IBA 10.8.3.1): every waiting WR completes with `wc_status`; none of its frames leave.
  void Flush(uint32_t wc_status);
  // RESET: what waits is gone without a completion (IBA 10.3.1: a QP in RESET holds no work).
  void Drop();
  // Sends what the bucket allows at `now` and completes the WRs whose frames all left. Returns
  // when the next frame may go (time_point::max(): nothing waits).
  Clock::time_point Pump(Clock::time_point now);
  // Pumps until nothing waits or `deadline` passes (sleeping between frames as the rate says);
  // what still waits then stays (the destructor drops it).
  void Drain(Clock::time_point deadline);

 private:
  void Run();

  SendFn send_;
  CompleteFn complete_;
  std::mutex pump_mu_;  // one Pump or Flush at a time: completions stay in order
  mutable std::mutex mu_;
  std::condition_variable wake_;
  Pacer pacer_;
  std::deque<Wr> queue_;
  size_t next_frame_ = 0;  // of the head WR: the frames before it have left
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace softverbs::transport::raw
