#include "core/cq.h"

#include <poll.h>

#include <thread>
#include <vector>

#include "core/device_limits.h"
#include "tests/unit/core/test_context.h"

namespace softverbs::core {
namespace {

class CqTest : public CoreTest {};

bool Readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, 0) == 1;
}

TEST_F(CqTest, SizeAndVectorAreChecked) {
  EXPECT_EQ(Cq::Create(*context_, 0, nullptr, 0).status().code(), EINVAL);
  EXPECT_EQ(Cq::Create(*context_, -1, nullptr, 0).status().code(), EINVAL);
  EXPECT_EQ(Cq::Create(*context_, DeviceLimits::kMaxCqe + 1, nullptr, 0).status().code(), EINVAL);
  EXPECT_EQ(Cq::Create(*context_, 4, nullptr, 1).status().code(), EINVAL);
  auto cq = Cq::Create(*context_, DeviceLimits::kMaxCqe, nullptr, 0);
  ASSERT_TRUE(cq.ok());
  EXPECT_GE((*cq)->capacity(), DeviceLimits::kMaxCqe);
}

// Issue 17 item 12: the kernel finds the channel among the objects of the CQ's own context
// (rdma_core.c lookup_get_fd_uobject) and refuses one of another context with EBADF.
TEST_F(CqTest, AChannelOfAnotherContextIsRefused) {
  auto other = std::move(Context::Open().value());
  auto foreign = std::move(CompChannel::Create(*other).value());
  auto r = Cq::Create(*context_, 4, foreign.get(), 0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), EBADF);
  EXPECT_NE(r.status().rule().find("another ibv_context"), std::string::npos) << r.status().rule();
  EXPECT_EQ(foreign->users().count(), 0);  // nothing was attached
  auto own = std::move(CompChannel::Create(*context_).value());
  auto cq = Cq::Create(*context_, 4, own.get(), 0);
  ASSERT_TRUE(cq.ok()) << cq.status().rule();
  EXPECT_EQ(own->users().count(), 1);
}

// ibv_poll_cq converts each completion straight from the ring (PollWith): every field as it was
// pushed, in order, at most `max`; the rest stay for the next poll; 0 takes nothing.
TEST_F(CqTest, PollWithHandsEachCompletionInOrderAtMostMax) {
  auto cq = std::move(Cq::Create(*context_, 4, nullptr, 0).value());
  for (uint32_t i = 0; i < 3; ++i) {
    Completion c;
    c.wr_id = 0x100 + i;
    c.status = i;
    c.opcode = transport::wc_opcode::kRecv;
    c.byte_len = 10 * i;
    c.imm_data = 0xabcd0000 + i;
    c.qp_num = 0x345;
    c.src_qp = 0x678;
    c.wc_flags = transport::wc_flag::kWithImm;
    c.pkey_index = 1;
    c.slid = 2;
    c.sl = 3;
    c.dlid_path_bits = 4;
    ASSERT_TRUE(cq->Push(c));
  }
  std::vector<Completion> got;
  auto take = [&](const Completion& c, const transport::CqEntry&) { got.push_back(c); };
  EXPECT_EQ(cq->PollWith(0, take), 0);
  EXPECT_TRUE(got.empty());
  ASSERT_EQ(cq->PollWith(2, take), 2);
  ASSERT_EQ(cq->PollWith(16, take), 1);
  EXPECT_EQ(cq->PollWith(16, take), 0);
  ASSERT_EQ(got.size(), 3u);
  for (uint32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(got[i].wr_id, 0x100u + i);
    EXPECT_EQ(got[i].status, i);
    EXPECT_EQ(got[i].opcode, transport::wc_opcode::kRecv);
    EXPECT_EQ(got[i].byte_len, 10 * i);
    EXPECT_EQ(got[i].imm_data, 0xabcd0000 + i);
    EXPECT_EQ(got[i].qp_num, 0x345u);
    EXPECT_EQ(got[i].src_qp, 0x678u);
    EXPECT_EQ(got[i].wc_flags, transport::wc_flag::kWithImm);
    EXPECT_EQ(got[i].pkey_index, 1);
    EXPECT_EQ(got[i].slid, 2);
    EXPECT_EQ(got[i].sl, 3);
    EXPECT_EQ(got[i].dlid_path_bits, 4);
  }
}

TEST_F(CqTest, HoldsCompletionsInOrderUpToItsCapacity) {
  auto cq = std::move(Cq::Create(*context_, 3, nullptr, 0).value());
  for (uint64_t i = 0; i < 3; ++i) {
    Completion c;
    c.wr_id = i;
    EXPECT_TRUE(cq->Push(c));
  }
  EXPECT_FALSE(cq->Push(Completion{}));  // overrun is reported to the producer
  Completion out[8];
  ASSERT_EQ(cq->Poll(out, 2), 2);
  EXPECT_EQ(out[0].wr_id, 0u);
  EXPECT_EQ(out[1].wr_id, 1u);
  ASSERT_EQ(cq->Poll(out, 8), 1);
  EXPECT_EQ(out[0].wr_id, 2u);
  EXPECT_EQ(cq->Poll(out, 8), 0);
}

TEST_F(CqTest, ResizeNeverDropsWhatTheCqHolds) {
  auto cq = std::move(Cq::Create(*context_, 8, nullptr, 0).value());
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(cq->Push(Completion{}));
  EXPECT_EQ(cq->Resize(4).code(), EINVAL);
  EXPECT_EQ(cq->capacity(), 8u);
  EXPECT_TRUE(cq->Resize(5).ok());
  EXPECT_EQ(cq->capacity(), 5u);
  EXPECT_EQ(cq->Resize(0).code(), EINVAL);
}

TEST_F(CqTest, WrapsAroundAndRemovesAQpsEntriesInPlace) {
  auto cq = std::move(Cq::Create(*context_, 3, nullptr, 0).value());
  Completion out[4];
  uint64_t next = 0, expect = 0;
  // Many times around a 3-entry ring: the producer's cached head must be refreshed when full.
  for (int round = 0; round < 50; ++round) {
    for (int i = 0; i < 3; ++i) {
      Completion c;
      c.wr_id = next++;
      ASSERT_TRUE(cq->Push(c));
    }
    EXPECT_FALSE(cq->Push(Completion{}));
    ASSERT_EQ(cq->Poll(out, 4), 3);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(out[i].wr_id, expect++);
  }
  // RESET of QP 7 drops its entries and keeps the others' order (IBA 10.3.1).
  for (uint32_t qpn : {7u, 8u, 7u}) {
    Completion c;
    c.qp_num = qpn;
    c.wr_id = qpn * 10 + next++;
    ASSERT_TRUE(cq->Push(c));
  }
  cq->RemoveEntriesOf(7);
  ASSERT_EQ(cq->Poll(out, 4), 1);
  EXPECT_EQ(out[0].qp_num, 8u);
  EXPECT_TRUE(cq->Resize(4).ok());
  EXPECT_EQ(cq->Poll(out, 4), 0);
}

TEST_F(CqTest, ConcurrentProducersLoseAndDuplicateNothing) {
  // Producers append under the ring's lock while the owner polls without it (transport/cq_ring.h).
  constexpr int kProducers = 3, kEach = 20000;
  auto cq = std::move(Cq::Create(*context_, 64, nullptr, 0).value());
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&cq, p] {
      for (int i = 0; i < kEach;) {
        Completion c;
        c.wr_id = static_cast<uint64_t>(p) << 32 | static_cast<uint64_t>(i);
        if (cq->Push(c)) ++i;  // full: the consumer has not caught up, try again
      }
    });
  }
  std::vector<int> seen(kProducers, 0);
  Completion out[16];
  for (int total = 0; total < kProducers * kEach;) {
    int n = cq->Poll(out, 16);
    for (int i = 0; i < n; ++i) {
      const int p = static_cast<int>(out[i].wr_id >> 32);
      ASSERT_LT(p, kProducers);
      // Each producer's completions arrive in its own order, each exactly once.
      ASSERT_EQ(static_cast<int>(out[i].wr_id & 0xffffffff), seen[p]);
      ++seen[p];
    }
    total += n;
  }
  for (auto& t : producers) t.join();
  EXPECT_EQ(cq->Poll(out, 16), 0);
}

TEST_F(CqTest, ArmingRaisesOneEventOnTheChannel) {
  auto channel = std::move(CompChannel::Create(*context_).value());
  auto cq = std::move(Cq::Create(*context_, 8, channel.get(), 0).value());
  EXPECT_EQ(channel->users().count(), 1);
  EXPECT_FALSE(Readable(channel->fd()));
  ASSERT_TRUE(cq->Push(Completion{}));
  EXPECT_FALSE(Readable(channel->fd()));  // not armed: no event
  ASSERT_TRUE(cq->RequestNotify(false).ok());
  ASSERT_TRUE(cq->Push(Completion{}));
  EXPECT_TRUE(Readable(channel->fd()));
  ASSERT_TRUE(cq->Push(Completion{}));  // one event per arming
  auto got = channel->Wait();
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got.value(), cq.get());
  EXPECT_FALSE(Readable(channel->fd()));
}

TEST_F(CqTest, SolicitedOnlyWakesForSolicitedOrErrorCompletions) {
  auto channel = std::move(CompChannel::Create(*context_).value());
  auto cq = std::move(Cq::Create(*context_, 8, channel.get(), 0).value());
  ASSERT_TRUE(cq->RequestNotify(true).ok());
  ASSERT_TRUE(cq->Push(Completion{}));
  EXPECT_FALSE(Readable(channel->fd()));
  Completion solicited;
  solicited.solicited = true;
  ASSERT_TRUE(cq->Push(solicited));
  EXPECT_TRUE(Readable(channel->fd()));
  ASSERT_TRUE(channel->Wait().ok());
  ASSERT_TRUE(cq->RequestNotify(true).ok());
  Completion error;
  error.status = 5;  // IBV_WC_WR_FLUSH_ERR
  ASSERT_TRUE(cq->Push(error));
  EXPECT_TRUE(Readable(channel->fd()));
}

TEST_F(CqTest, EventsMustBeAcknowledgedBeforeDestroy) {
  auto channel = std::move(CompChannel::Create(*context_).value());
  auto cq = std::move(Cq::Create(*context_, 8, channel.get(), 0).value());
  cq->CountEvent();
  cq->CountEvent();
  cq->AckEvents(2);
  cq->WaitForAcks();  // returns at once: everything is acknowledged
  cq.reset();
  EXPECT_EQ(channel->users().count(), 0);
}

}  // namespace
}  // namespace softverbs::core
