#include "transport/raw/paced_send_queue.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "transport/work_request.h"

namespace softverbs::transport::raw {
namespace {

using std::chrono::microseconds;

// Records what the queue does, in order: "send <bytes>..." per batch, "done <wr_id> <status>".
struct PacedQueueLog {
  std::vector<std::string> events;
  PacedSendQueue Make() {
    return PacedSendQueue(
        [this](std::span<const std::vector<uint8_t>> frames) {
          std::string e = "send";
          for (const auto& f : frames) e += " " + std::to_string(f.size());
          events.push_back(e);
        },
        [this](const PacedSendQueue::Wr& wr, uint32_t status) {
          events.push_back("done " + std::to_string(wr.wr_id) + " " + std::to_string(status));
        },
        /*own_thread=*/false);
  }
};

PacedSendQueue::Wr PacedQueueWr(uint64_t wr_id, std::vector<size_t> sizes) {
  PacedSendQueue::Wr wr;
  wr.wr_id = wr_id;
  for (size_t n : sizes) wr.frames.emplace_back(n, 0xab);
  return wr;
}

TEST(PacedSendQueueTest, FramesLeaveAsTheBucketAllowsAndWrsCompleteWithTheirLastFrame) {
  PacedQueueLog log;
  PacedSendQueue q = log.Make();
  q.Configure(8000, 1000);  // 8000 kbps: a byte per microsecond; a 1000-byte bucket
  ASSERT_TRUE(q.limited());
  q.Push(PacedQueueWr(1, {1000, 1000}));
  q.Push(PacedQueueWr(2, {500}));
  const auto t0 = PacedSendQueue::Clock::time_point{} + std::chrono::hours(1);
  EXPECT_EQ(q.Pump(t0), t0 + microseconds(1000));  // the first frame empties the bucket
  EXPECT_EQ(log.events, (std::vector<std::string>{"send 1000"}));
  EXPECT_EQ(q.Pump(t0 + microseconds(999)), t0 + microseconds(1000));  // not yet
  EXPECT_EQ(log.events.size(), 1u);
  EXPECT_EQ(q.Pump(t0 + microseconds(1000)), t0 + microseconds(1500));
  EXPECT_EQ(q.Pump(t0 + microseconds(1500)), PacedSendQueue::Clock::time_point::max());
  EXPECT_EQ(log.events, (std::vector<std::string>{"send 1000", "send 1000", "done 1 0", "send 500", "done 2 0"}));
  EXPECT_TRUE(q.empty());
}

TEST(PacedSendQueueTest, FlushCompletesWhatWaitsWithoutSendingIt) {
  PacedQueueLog log;
  PacedSendQueue q = log.Make();
  q.Configure(8000, 1000);
  q.Push(PacedQueueWr(1, {1000}));
  q.Push(PacedQueueWr(2, {1000, 200}));
  const auto t0 = PacedSendQueue::Clock::time_point{} + std::chrono::hours(1);
  q.Pump(t0);
  q.Flush(wc_status::kWrFlushErr);
  EXPECT_EQ(log.events, (std::vector<std::string>{"send 1000", "done 1 0", "done 2 5"}));
  q.Push(PacedQueueWr(3, {100}));
  q.Drop();  // RESET: gone without a completion
  EXPECT_EQ(q.Pump(t0 + std::chrono::seconds(1)), PacedSendQueue::Clock::time_point::max());
  EXPECT_EQ(log.events.size(), 3u);
}

TEST(PacedSendQueueTest, UnlimitedSendsEverythingAtOnce) {
  PacedQueueLog log;
  PacedSendQueue q = log.Make();
  q.Configure(8000, 100);
  q.Push(PacedQueueWr(1, {100, 100}));
  q.Configure(0, 0);  // the rate is lifted: what waited leaves at the next look
  EXPECT_FALSE(q.limited());
  EXPECT_EQ(q.Pump(PacedSendQueue::Clock::time_point{}), PacedSendQueue::Clock::time_point::max());
  EXPECT_EQ(log.events, (std::vector<std::string>{"send 100 100", "done 1 0"}));
}

TEST(PacedSendQueueTest, DrainSendsWhatTheRateAllowsBeforeTheDeadlineAndLeavesTheRest) {
  PacedQueueLog log;
  PacedSendQueue q = log.Make();
  q.Configure(8000, 1000);  // a byte per microsecond
  q.Push(PacedQueueWr(1, {1000}));  // at once
  q.Push(PacedQueueWr(2, {1000}));  // 1 ms later
  q.Push(PacedQueueWr(3, {100000}));  // 1 ms later again, leaving the bucket 100 ms in debt
  q.Push(PacedQueueWr(4, {1000}));  // ~100 ms later: past the deadline
  const auto start = PacedSendQueue::Clock::now();
  q.Drain(start + std::chrono::milliseconds(50));
  EXPECT_EQ(log.events, (std::vector<std::string>{"send 1000", "done 1 0", "send 1000", "done 2 0", "send 100000",
                                                  "done 3 0"}));
  EXPECT_FALSE(q.empty());  // WR 4 still waits (the destructor drops it)
  EXPECT_LT(PacedSendQueue::Clock::now() - start, std::chrono::milliseconds(100));  // no sleep past the deadline
}

TEST(PacedSendQueueTest, ItsThreadSendsWithoutBeingAsked) {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<uint64_t> done;
  PacedSendQueue q([](std::span<const std::vector<uint8_t>>) {},
                   [&](const PacedSendQueue::Wr& wr, uint32_t) {
                     std::lock_guard lock(mu);
                     done.push_back(wr.wr_id);
                     cv.notify_all();
                   });
  q.Configure(100000000, 1 << 20);  // fast: the test waits for completions, never for a time
  for (uint64_t i = 1; i <= 5; ++i) q.Push(PacedQueueWr(i, {64, 64}));
  std::unique_lock lock(mu);
  cv.wait(lock, [&] { return done.size() == 5; });
  EXPECT_EQ(done, (std::vector<uint64_t>{1, 2, 3, 4, 5}));
}

}  // namespace
}  // namespace softverbs::transport::raw
