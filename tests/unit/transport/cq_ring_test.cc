// transport/cq_ring.h: entries found by their stamps (no `tail` read by the owner), a plain
// completion on the entry's first line, the producers' cached `head`, a producer dead between
// publishing its entry and advancing `tail`.
#include "transport/cq_ring.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

namespace softverbs::transport {
namespace {

// A ring in this process's memory, and the owner's poll as core/cq.cc does it.
struct CqRingHarness {
  explicit CqRingHarness(uint32_t capacity) : entries(capacity) {
    ring->lock.Init();
    ring->capacity = capacity;
    ring->channel_fd = -1;
    ring->timer_fd = -1;
    // A reused arena block holds old bytes: stamps that must not read as written.
    for (CqEntry& e : entries) e.seq = 1;
    CqEntriesMarkEmpty(entries.data(), capacity, 0, capacity);
  }
  PushOutcome Push(const Completion& c) {
    fabric::RobustLock lock(ring->lock);
    return CqRingPushLocked(*ring, entries.data(), c, [](CqEntry&) {});
  }
  int Poll(Completion* out, int max) {
    const uint64_t head = ring->head.load(std::memory_order_relaxed);
    int n = 0;
    for (const CqEntry* e; n < max && (e = CqEntryAt(entries.data(), ring->capacity, head + n)) != nullptr; ++n)
      out[n] = CqEntryRead(*e);
    ring->head.store(head + n, std::memory_order_release);
    return n;
  }
  std::unique_ptr<CqRing> ring = std::make_unique<CqRing>();
  std::vector<CqEntry> entries;
};

Completion CqRingCompletion(uint64_t id) {
  Completion c;
  c.wr_id = id;
  c.qp_num = 0x11;
  c.byte_len = 8;
  c.opcode = 128;  // IBV_WC_RECV
  return c;
}

TEST(CqRingTest, APlainCompletionLivesOnTheFirstLineAndReadsBackWhole) {
  CqRingHarness h(4);
  Completion c = CqRingCompletion(7);
  c.imm_data = 0x01020304;
  c.src_qp = 0x22;
  c.wc_flags = 3;
  c.status = 5;
  c.solicited = true;  // the producer's arming decision only: never returned by a poll
  ASSERT_TRUE(h.Push(c).stored);
  EXPECT_EQ(h.entries[0].flags & kCqEntryFull, 0);
  Completion out[2];
  ASSERT_EQ(h.Poll(out, 2), 1);
  EXPECT_EQ(out[0].wr_id, 7u);
  EXPECT_EQ(out[0].imm_data, 0x01020304u);
  EXPECT_EQ(out[0].src_qp, 0x22u);
  EXPECT_EQ(out[0].wc_flags, 3u);
  EXPECT_EQ(out[0].status, 5u);
  EXPECT_EQ(out[0].opcode, 128u);
  EXPECT_EQ(out[0].byte_len, 8u);
  EXPECT_EQ(out[0].qp_num, 0x11u);
}

TEST(CqRingTest, ACompletionWithMoreThanTheFirstLineHoldsIsReturnedFromTheFullCopy) {
  CqRingHarness h(4);
  Completion a = CqRingCompletion(1);
  a.vendor_err = 0x1234;
  a.status = 300;
  Completion b = CqRingCompletion(2);
  b.pkey_index = 3;
  b.slid = 9;
  b.sl = 2;
  b.has_cvlan = true;
  b.cvlan = 0x0123;
  b.has_flow_tag = true;
  b.flow_tag = 77;
  ASSERT_TRUE(h.Push(a).stored);
  ASSERT_TRUE(h.Push(b).stored);
  Completion out[2];
  ASSERT_EQ(h.Poll(out, 2), 2);
  EXPECT_EQ(out[0].vendor_err, 0x1234u);
  EXPECT_EQ(out[0].status, 300u);
  EXPECT_EQ(out[1].pkey_index, 3u);
  EXPECT_EQ(out[1].slid, 9u);
  EXPECT_EQ(out[1].sl, 2u);
  EXPECT_TRUE(out[1].has_cvlan);
  EXPECT_EQ(out[1].cvlan, 0x0123u);
  EXPECT_EQ(out[1].flow_tag, 77u);
  EXPECT_EQ(out[1].wr_id, 2u);
}

TEST(CqRingTest, EachFieldTheFirstLineLacksAloneSendsTheCompletionWhole) {
  const std::vector<void (*)(Completion&)> extras = {
      [](Completion& c) { c.vendor_err = 1; },    [](Completion& c) { c.pkey_index = 1; },
      [](Completion& c) { c.slid = 1; },          [](Completion& c) { c.sl = 1; },
      [](Completion& c) { c.dlid_path_bits = 1; }, [](Completion& c) { c.has_cvlan = true; },
      [](Completion& c) { c.has_flow_tag = true; }, [](Completion& c) { c.cvlan = 0x8000; },
      [](Completion& c) { c.flow_tag = 1u << 31; }, [](Completion& c) { c.timestamp_ns = 1ull << 63; },
      [](Completion& c) { c.wallclock_ns = 1; }};
  for (size_t i = 0; i < extras.size(); ++i) {
    Completion c = CqRingCompletion(i);
    c.solicited = true;
    EXPECT_TRUE(CqEntryFitsFirstLine(c)) << i;
    extras[i](c);
    EXPECT_FALSE(CqEntryFitsFirstLine(c)) << "extra field " << i;
    CqEntry e{};
    CqEntryWrite(e, c);
    EXPECT_EQ(e.flags & kCqEntryFull, kCqEntryFull) << i;
    const Completion back = CqEntryRead(e);
    EXPECT_EQ(memcmp(&back.vendor_err, &c.vendor_err, sizeof(c.vendor_err)), 0);
    EXPECT_EQ(back.timestamp_ns, c.timestamp_ns);
    EXPECT_EQ(back.flow_tag, c.flow_tag);
    EXPECT_EQ(back.cvlan, c.cvlan);
    EXPECT_EQ(back.pkey_index, c.pkey_index);
  }
}

TEST(CqRingTest, StampedCqReturnsTheProducersClocks) {
  CqRingHarness h(2);
  h.ring->stamp = kCqStampDevice | kCqStampWallclock;
  ASSERT_TRUE(h.Push(CqRingCompletion(3)).stored);
  Completion out[1];
  ASSERT_EQ(h.Poll(out, 1), 1);
  EXPECT_NE(out[0].timestamp_ns, 0u);
  EXPECT_NE(out[0].wallclock_ns, 0u);
  EXPECT_EQ(out[0].wr_id, 3u);
}

TEST(CqRingTest, EmptyFullAndWrapOnAnOddSizedRing) {
  CqRingHarness h(3);
  Completion out[4];
  EXPECT_EQ(h.Poll(out, 4), 0);  // stale bytes in a fresh array read as nothing
  uint64_t next = 0, expect = 0;
  for (int round = 0; round < 40; ++round) {
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(h.Push(CqRingCompletion(next++)).stored);
    // Full: the cached head is re-read, still full: an overrun the owner is told of.
    EXPECT_FALSE(h.Push(CqRingCompletion(999)).stored);
    EXPECT_EQ(h.ring->overrun, 1u);
    EXPECT_EQ(h.ring->attention.exchange(0), 1u);
    h.ring->overrun = 0;
    // Polling part of it leaves the rest in order; the slot handed back is reused.
    ASSERT_EQ(h.Poll(out, 1), 1);
    EXPECT_EQ(out[0].wr_id, expect++);
    ASSERT_TRUE(h.Push(CqRingCompletion(next++)).stored);
    ASSERT_EQ(h.Poll(out, 4), 3);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(out[i].wr_id, expect++);
    EXPECT_EQ(h.Poll(out, 4), 0);  // last lap's stamps never read as this lap's
  }
}

TEST(CqRingTest, AProducerRereadsTheOwnersHeadOnlyWhenTheRingLooksFull) {
  CqRingHarness h(2);
  ASSERT_TRUE(h.Push(CqRingCompletion(0)).stored);
  ASSERT_TRUE(h.Push(CqRingCompletion(1)).stored);
  Completion out[2];
  ASSERT_EQ(h.Poll(out, 2), 2);
  // The producers' copy of head is stale (0) until the ring looks full; then it is refreshed.
  EXPECT_EQ(h.ring->head_seen, 0u);
  ASSERT_TRUE(h.Push(CqRingCompletion(2)).stored);
  EXPECT_EQ(h.ring->head_seen, 2u);
  ASSERT_TRUE(h.Push(CqRingCompletion(3)).stored);
  EXPECT_EQ(h.ring->overrun, 0u);
  ASSERT_EQ(h.Poll(out, 2), 2);
  EXPECT_EQ(out[0].wr_id, 2u);
  EXPECT_EQ(out[1].wr_id, 3u);
}

TEST(CqRingTest, AProducerDeadAfterPublishingKeepsItsEntryAndTheNextGoesAfterIt) {
  CqRingHarness h(4);
  ASSERT_TRUE(h.Push(CqRingCompletion(0)).stored);
  // A producer writes and publishes position 1, then dies before advancing `tail`.
  CqEntryWrite(h.entries[1], CqRingCompletion(1));
  CqEntryPublish(h.entries[1], 1);
  EXPECT_EQ(h.ring->tail.load(), 1u);
  Completion out[4];
  ASSERT_EQ(h.Poll(out, 4), 2);  // the owner sees it already
  EXPECT_EQ(out[1].wr_id, 1u);
  ASSERT_TRUE(h.Push(CqRingCompletion(2)).stored);  // the next producer repairs `tail` first
  EXPECT_EQ(h.ring->tail.load(), 3u);
  ASSERT_EQ(h.Poll(out, 4), 1);
  EXPECT_EQ(out[0].wr_id, 2u);
  // One dead before publishing leaves nothing: its slot is written again by the next.
  CqEntryWrite(h.entries[3], CqRingCompletion(99));
  ASSERT_TRUE(h.Push(CqRingCompletion(3)).stored);
  ASSERT_EQ(h.Poll(out, 4), 1);
  EXPECT_EQ(out[0].wr_id, 3u);
}

TEST(CqRingTest, RestampedEntriesAfterARemovalReadAtTheirNewPlaces) {
  CqRingHarness h(4);
  for (uint64_t i = 0; i < 4; ++i) ASSERT_TRUE(h.Push(CqRingCompletion(i)).stored);
  // The owner compacts positions 0..3 to the two it keeps (core/cq.cc RemoveEntriesOf).
  h.entries[0] = h.entries[1];
  h.entries[1] = h.entries[3];
  CqEntriesMarkWritten(h.entries.data(), 4, 0, 2);
  CqEntriesMarkEmpty(h.entries.data(), 4, 2, 4);
  h.ring->tail.store(2);
  Completion out[4];
  ASSERT_EQ(h.Poll(out, 4), 2);  // not the freed slots' old entries
  EXPECT_EQ(out[0].wr_id, 1u);
  EXPECT_EQ(out[1].wr_id, 3u);
  ASSERT_TRUE(h.Push(CqRingCompletion(4)).stored);
  ASSERT_EQ(h.Poll(out, 4), 1);
  EXPECT_EQ(out[0].wr_id, 4u);
}

TEST(CqRingTest, APollRacingProducersSeesEveryEntryOnceAndWhole) {
  // Producers push under the lock while the owner polls by stamps (TSan checks the ordering).
  constexpr int kProducers = 2, kEach = 20000;
  CqRingHarness h(8);
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&h, p] {
      for (int i = 0; i < kEach;) {
        Completion c = CqRingCompletion(static_cast<uint64_t>(p) << 32 | static_cast<uint64_t>(i));
        c.byte_len = static_cast<uint32_t>(i) * 3;
        if (h.Push(c).stored) ++i;
      }
    });
  }
  std::vector<int> seen(kProducers, 0);
  Completion out[8];
  for (int total = 0; total < kProducers * kEach;) {
    const int n = h.Poll(out, 8);
    for (int i = 0; i < n; ++i) {
      const int p = static_cast<int>(out[i].wr_id >> 32);
      ASSERT_LT(p, kProducers);
      ASSERT_EQ(static_cast<int>(out[i].wr_id & 0xffffffff), seen[p]);
      ASSERT_EQ(out[i].byte_len, static_cast<uint32_t>(seen[p]) * 3);
      ++seen[p];
    }
    total += n;
  }
  for (auto& t : producers) t.join();
  EXPECT_EQ(h.Poll(out, 8), 0);
}

}  // namespace
}  // namespace softverbs::transport
