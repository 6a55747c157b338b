#include "transport/recv_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "fabric/host/host_directory.h"

namespace softverbs::transport {
namespace {

class RecvQueueTest : public ::testing::Test {
 protected:
  RecvQueueTest() {
    setenv("SOFTVERBS_HOST", "unit-tests", 0);
    local_ = fabric::LocalProcess::Get().value();
  }
  fabric::LocalProcess* local_;
};

TEST_F(RecvQueueTest, PostsAndTakesInOrderWithScatterLists) {
  auto q = std::move(RecvQueue::Create(*local_, 4, 3).value());
  RecvSge sges[3] = {{0x1000, 10, 7}, {0x2000, 20, 8}, {0x3000, 30, 9}};
  ASSERT_TRUE(q->Post(1, sges, 3).ok());
  ASSERT_TRUE(q->Post(2, sges, 1).ok());
  EXPECT_EQ(q->count(), 2u);
  TakenWqe a = q->Take();
  ASSERT_TRUE(a.found);
  EXPECT_EQ(a.wr_id, 1u);
  ASSERT_EQ(a.num_sge, 3u);
  EXPECT_EQ(a.sge[2].addr, 0x3000u);
  EXPECT_EQ(a.sge[2].lkey, 9u);
  TakenWqe b = q->Take();
  EXPECT_EQ(b.wr_id, 2u);
  EXPECT_FALSE(q->Take().found);
}

TEST_F(RecvQueueTest, RefusesBeyondItsSize) {
  auto q = std::move(RecvQueue::Create(*local_, 2, 1).value());
  RecvSge s{0, 0, 0};
  ASSERT_TRUE(q->Post(1, &s, 1).ok());
  ASSERT_TRUE(q->Post(2, &s, 1).ok());
  EXPECT_EQ(q->Post(3, &s, 1).code(), ENOMEM);  // ibv_post_recv(3): queue full
  RecvSge two[2] = {};
  EXPECT_EQ(q->Post(3, two, 2).code(), EINVAL);  // more SGEs than max_recv_sge
}

TEST_F(RecvQueueTest, ResizeKeepsOrderAndLimitFiresOnce) {
  auto q = std::move(RecvQueue::Create(*local_, 2, 1).value());
  RecvSge s{0, 0, 0};
  ASSERT_TRUE(q->Post(1, &s, 1).ok());
  ASSERT_TRUE(q->Post(2, &s, 1).ok());
  EXPECT_EQ(q->Resize(1).code(), EINVAL);
  ASSERT_TRUE(q->Resize(8).ok());
  for (uint64_t id = 3; id <= 5; ++id) ASSERT_TRUE(q->Post(id, &s, 1).ok());
  q->SetLimit(4);
  TakenWqe t = q->Take();  // 5 -> 4 left: not below the limit
  EXPECT_EQ(t.wr_id, 1u);
  EXPECT_FALSE(t.limit_crossed);
  t = q->Take();  // 3 left: below 4, fires and disarms
  EXPECT_EQ(t.wr_id, 2u);
  EXPECT_TRUE(t.limit_crossed);
  EXPECT_FALSE(q->Take().limit_crossed);
  q->Clear();
  EXPECT_EQ(q->count(), 0u);
}

TEST_F(RecvQueueTest, OwnerPostsWhileTakersTakeEachWqeOnce) {
  // The owner posts without the lock; takers in other threads (in other processes in real
  // use) serialise on it: every WQE is taken exactly once, in posting order per taker.
  constexpr uint64_t kWqes = 50000;
  constexpr int kTakers = 2;
  auto q = std::move(RecvQueue::Create(*local_, 16, 1).value());
  std::atomic<uint64_t> taken{0};
  std::vector<std::vector<uint64_t>> got(kTakers);
  std::vector<std::thread> takers;
  for (int t = 0; t < kTakers; ++t) {
    takers.emplace_back([&, t] {
      while (taken.load() < kWqes) {
        TakenWqe w = q->Take();
        if (!w.found) continue;
        EXPECT_EQ(w.sge[0].lkey, static_cast<uint32_t>(w.wr_id * 3));
        got[t].push_back(w.wr_id);
        taken.fetch_add(1);
      }
    });
  }
  for (uint64_t id = 0; id < kWqes;) {
    RecvSge s{id, 1, static_cast<uint32_t>(id * 3)};
    Status st = q->Post(id, &s, 1);
    if (st.ok()) {
      ++id;
    } else {
      ASSERT_EQ(st.code(), ENOMEM);  // full until a taker hands a slot back
    }
  }
  for (auto& t : takers) t.join();
  std::vector<bool> once(kWqes, false);
  for (const auto& ids : got) {
    for (size_t i = 0; i < ids.size(); ++i) {
      ASSERT_FALSE(once[ids[i]]);
      once[ids[i]] = true;
      if (i > 0) {
        EXPECT_LT(ids[i - 1], ids[i]);
      }
    }
  }
  EXPECT_EQ(q->count(), 0u);
}

TEST_F(RecvQueueTest, ClearDropsWhatIsPostedAndTheRingStaysUsable) {
  auto q = std::move(RecvQueue::Create(*local_, 2, 1).value());
  RecvSge s{0, 0, 0};
  ASSERT_TRUE(q->Post(1, &s, 1).ok());
  ASSERT_TRUE(q->Post(2, &s, 1).ok());
  q->Clear();  // the QP moved to RESET
  EXPECT_EQ(q->count(), 0u);
  EXPECT_FALSE(q->Take().found);
  ASSERT_TRUE(q->Post(3, &s, 1).ok());
  ASSERT_TRUE(q->Post(4, &s, 1).ok());
  EXPECT_EQ(q->Take().wr_id, 3u);
}

TEST_F(RecvQueueTest, StampsFindPostedWqesAcrossLapsResizesAndReusedMemory) {
  RecvSge s{0, 0, 0};
  {
    // Leaves stamped WQEs in memory the next queue may be given.
    auto old = std::move(RecvQueue::Create(*local_, 3, 1).value());
    for (uint64_t id = 1; id <= 3; ++id) ASSERT_TRUE(old->Post(id, &s, 1).ok());
  }
  auto q = std::move(RecvQueue::Create(*local_, 3, 1).value());
  EXPECT_FALSE(q->Take().found);  // a fresh ring's slots read as unposted whatever they held
  uint64_t next = 1, expect = 1;
  for (int lap = 0; lap < 20; ++lap) {
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(q->Post(next++, &s, 1).ok());
    EXPECT_EQ(q->Post(next, &s, 1).code(), ENOMEM);  // the owner's cached head, re-read: still full
    EXPECT_EQ(q->Take().wr_id, expect++);
    ASSERT_TRUE(q->Post(next++, &s, 1).ok());  // the slot handed back (head re-read)
    for (int i = 0; i < 3; ++i) EXPECT_EQ(q->Take().wr_id, expect++);
    EXPECT_FALSE(q->Take().found);  // last lap's stamps never pass for this lap's
  }
  // Resized with two posted at positions far from 0: they move to 0 and 1 and stay takeable once.
  ASSERT_TRUE(q->Post(next++, &s, 1).ok());
  ASSERT_TRUE(q->Post(next++, &s, 1).ok());
  ASSERT_TRUE(q->Resize(5).ok());
  EXPECT_EQ(q->Take().wr_id, expect++);
  ASSERT_TRUE(q->Post(next++, &s, 1).ok());
  EXPECT_EQ(q->Take().wr_id, expect++);
  EXPECT_EQ(q->Take().wr_id, expect++);
  EXPECT_FALSE(q->Take().found);
  EXPECT_EQ(q->count(), 0u);
}

// A queue kept full: the slot the owner writes next (position tail) and the slot the next take
// reads (tail - max_wr + 1, the same slot index as tail + 1) are never in one cache line, and
// each lap uses every slot once (RecvSlot).
TEST_F(RecvQueueTest, ConsecutivePositionsNeverShareACacheLine) {
  for (uint32_t max_wr : {4u, 6u, 8u, 64u, 512u, 1000u}) {
    std::vector<bool> used(max_wr, false);
    for (uint64_t p = 7 * max_wr; p < 8 * max_wr; ++p) {
      const uint32_t slot = RecvSlot(p, max_wr), next = RecvSlot(p + 1, max_wr);
      ASSERT_LT(slot, max_wr);
      EXPECT_FALSE(used[slot]) << max_wr << " " << p;
      used[slot] = true;
      EXPECT_EQ(slot, RecvSlot(p + max_wr, max_wr)) << "one slot per position a lap";
      EXPECT_NE(slot * RecvWqeSize(1) / 64, next * RecvWqeSize(1) / 64) << max_wr << " " << p;
    }
  }
  EXPECT_EQ(RecvSlot(5, 3), 2u);  // odd sizes (and below 4) keep the ring order
  EXPECT_EQ(RecvSlot(3, 2), 1u);
}

// The interleaved order through laps, stale stamps and a resize between two even sizes: WQEs
// come out in posting order, each once.
TEST_F(RecvQueueTest, AnEvenRingTakesInOrderAcrossLapsAndResizes) {
  RecvSge s{0, 0, 0};
  auto q = std::move(RecvQueue::Create(*local_, 8, 1).value());
  uint64_t next = 1, expect = 1;
  for (int lap = 0; lap < 20; ++lap) {
    while (q->count() < 8) ASSERT_TRUE(q->Post(next++, &s, 1).ok());
    EXPECT_EQ(q->Post(next, &s, 1).code(), ENOMEM);
    for (int i = 0; i < 5; ++i) EXPECT_EQ(q->Take().wr_id, expect++);
  }
  ASSERT_TRUE(q->Resize(6).ok());  // three posted, at positions far from 0
  ASSERT_TRUE(q->Post(next++, &s, 1).ok());
  while (q->count() > 0) EXPECT_EQ(q->Take().wr_id, expect++);
  EXPECT_FALSE(q->Take().found);
  EXPECT_EQ(next, expect);
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(q->Post(next++, &s, 1).ok());
  for (int i = 0; i < 6; ++i) EXPECT_EQ(q->Take().wr_id, expect++);
  EXPECT_FALSE(q->Take().found);
}

}  // namespace
}  // namespace softverbs::transport
