// The data path through the core's objects, in one process: two RC QPs connected to each other,
// driven from several threads (the ThreadSanitizer build runs this).
#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "core/mr.h"
#include "core/qp.h"
#include "tests/unit/core/test_context.h"

namespace softverbs::core {
namespace {

using transport::Completion;
using transport::RecvSge;
using transport::SendWr;
using transport::WrOpcode;

class DataPathTest : public CoreTest {
 protected:
  DataPathTest() {
    for (auto* cq : {&cq_a_, &cq_b_}) *cq = std::move(Cq::Create(*context_, 4096, nullptr, 0).value());
    a_ = MakeQp(cq_a_.get());
    b_ = MakeQp(cq_b_.get());
    Connect(*a_, b_->qp_num());
    Connect(*b_, a_->qp_num());
    mr_ = std::move(Mr::Register(*pd_, {reinterpret_cast<uint64_t>(buf_), sizeof(buf_), reinterpret_cast<uint64_t>(buf_),
                                        access::kLocalWrite | access::kRemoteWrite | access::kRemoteRead | access::kRemoteAtomic})
                        .value());
  }
  std::unique_ptr<Qp> MakeQp(Cq* cq, uint32_t max_recv_wr = 1024) {
    QpInitAttributes a;
    a.type = QpType::kRc;
    a.pd = pd_.get();
    a.send_cq = a.recv_cq = cq;
    a.cap = {1024, max_recv_wr, 1, 1, 64};
    return std::move(Qp::Create(*context_, a).value());
  }
  void Connect(Qp& qp, uint32_t dest) {
    ToRtr(qp, dest, access::kRemoteWrite | access::kRemoteRead | access::kRemoteAtomic);
    QpAttributes a;
    a.qp_state = QpState::kRts;
    a.timeout = 4;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 1;
    ASSERT_TRUE(qp.Modify(a, attr::kState | attr::kSqPsn | attr::kTimeout | attr::kRetryCnt | attr::kRnrRetry |
                                 attr::kMaxQpRdAtomic).ok());
  }
  SendWr Wr(WrOpcode op, uint64_t id, uint64_t local_off, uint32_t len) {
    SendWr w;
    w.wr_id = id;
    w.opcode = op;
    w.flags = transport::send_flag::kSignaled;
    w.num_sge = 1;
    w.sge[0] = {reinterpret_cast<uint64_t>(buf_) + local_off, len, mr_->lkey()};
    return w;
  }
  // Polls `cq` until `n` completions arrived or 10 s passed.
  std::vector<Completion> Drain(Cq& cq, size_t n) {
    std::vector<Completion> got;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    Completion c[16];
    while (got.size() < n && std::chrono::steady_clock::now() < deadline) {
      int k = cq.Poll(c, 16);
      got.insert(got.end(), c, c + k);
      if (k == 0) std::this_thread::yield();
    }
    return got;
  }

  std::unique_ptr<Cq> cq_a_, cq_b_;
  std::unique_ptr<Qp> a_, b_;
  std::unique_ptr<Mr> mr_;
  alignas(64) uint8_t buf_[1 << 16] = {};
};

TEST_F(DataPathTest, WriteReadAndAtomicsMoveTheBytes) {
  memcpy(buf_, "hello, softverbs", 16);
  SendWr w = Wr(WrOpcode::kRdmaWrite, 1, 0, 16);
  w.rkey = mr_->rkey();
  w.remote_addr = reinterpret_cast<uint64_t>(buf_) + 1000;
  ASSERT_TRUE(a_->PostSend(w).ok());
  SendWr r = Wr(WrOpcode::kRdmaRead, 2, 2000, 16);
  r.rkey = mr_->rkey();
  r.remote_addr = reinterpret_cast<uint64_t>(buf_) + 1000;
  ASSERT_TRUE(a_->PostSend(r).ok());
  uint64_t counter = 40;
  memcpy(buf_ + 4096, &counter, 8);
  SendWr f = Wr(WrOpcode::kAtomicFetchAdd, 3, 4104, 8);
  f.rkey = mr_->rkey();
  f.remote_addr = reinterpret_cast<uint64_t>(buf_) + 4096;
  f.compare_add = 2;
  ASSERT_TRUE(a_->PostSend(f).ok());
  auto got = Drain(*cq_a_, 3);
  ASSERT_EQ(got.size(), 3u);
  for (const Completion& c : got) EXPECT_EQ(c.status, 0u) << c.wr_id;
  EXPECT_EQ(memcmp(buf_ + 1000, "hello, softverbs", 16), 0);
  EXPECT_EQ(memcmp(buf_ + 2000, "hello, softverbs", 16), 0);
  memcpy(&counter, buf_ + 4096, 8);
  EXPECT_EQ(counter, 42u);
  uint64_t original;
  memcpy(&original, buf_ + 4104, 8);
  EXPECT_EQ(original, 40u);
}

TEST_F(DataPathTest, SendsFromOneThreadReceivesFromAnotherArriveInOrder) {
  constexpr int kMessages = 2000;
  std::atomic<bool> failed{false};
  std::thread receiver([&] {
    int received = 0, posted = 0;
    Completion c[16];
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (received < kMessages && std::chrono::steady_clock::now() < deadline) {
      while (posted < kMessages && posted - received < 64) {
        RecvSge s{reinterpret_cast<uint64_t>(buf_) + 32768 + (posted % 64) * 8, 8, mr_->lkey()};
        if (!b_->PostRecv(posted, &s, 1).ok()) failed = true;
        ++posted;
      }
      for (int k = cq_b_->Poll(c, 16), i = 0; i < k; ++i, ++received)
        if (c[i].status != 0 || c[i].wr_id != static_cast<uint64_t>(received)) failed = true;
    }
    if (received != kMessages) failed = true;
  });
  for (int i = 0; i < kMessages; ++i) {
    SendWr s = Wr(WrOpcode::kSend, i, 8 * (i % 16), 8);
    s.flags = (i % 64 == 63) ? transport::send_flag::kSignaled : 0;
    ASSERT_TRUE(a_->PostSend(s).ok());
    if (i % 64 == 63) {
      ASSERT_EQ(Drain(*cq_a_, 1).size(), 1u);
    }
  }
  receiver.join();
  EXPECT_FALSE(failed.load());
}

// A receive completion polled tells the QP's own receive queue that its WQE's slot is free
// (RecvQueue::NotePolled), so a program reposting after each poll with its queue full --
// perftest's way -- finds room without reading the takers' head; the count never passes the head
// and the limit of max_recv_wr outstanding WQEs stands (ENOMEM, ibv_post_recv(3)).
TEST_F(DataPathTest, APolledReceiveTellsItsQueueTheSlotIsFree) {
  auto cq = std::move(Cq::Create(*context_, 64, nullptr, 0).value());
  auto x = MakeQp(cq.get());
  auto y = MakeQp(cq.get(), /*max_recv_wr=*/1);
  Connect(*x, y->qp_num());
  Connect(*y, x->qp_num());
  RecvSge s{reinterpret_cast<uint64_t>(buf_) + 32768, 8, mr_->lkey()};
  transport::RecvQueue& rq = y->recv_queue();
  for (uint64_t i = 0; i < 200; ++i) {
    ASSERT_TRUE(y->PostRecv(i, &s, 1).ok()) << i;
    SendWr w = Wr(WrOpcode::kSend, 1000 + i, 8, 8);
    w.flags = 0;
    ASSERT_TRUE(x->PostSend(w).ok());
    const auto got = Drain(*cq, 1);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].wr_id, i);
    EXPECT_EQ(got[0].status, 0u);
    EXPECT_EQ(rq.polled(), i + 1);
    EXPECT_LE(rq.polled(), rq.ring().head.load());
  }
  ASSERT_TRUE(y->PostRecv(7, &s, 1).ok());
  EXPECT_EQ(y->PostRecv(8, &s, 1).code(), ENOMEM) << "one WQE outstanding: the queue is full";
  EXPECT_EQ(x->recv_queue().polled(), 0u) << "x received nothing";
  // A CQ many QPs complete on looks none up: its queues read the takers' head as before.
  std::vector<std::unique_ptr<Qp>> many;
  for (int i = 0; i < 32; ++i) many.push_back(MakeQp(cq.get()));
  SendWr w = Wr(WrOpcode::kSend, 2000, 8, 8);
  w.flags = 0;
  ASSERT_TRUE(x->PostSend(w).ok());
  ASSERT_EQ(Drain(*cq, 1).size(), 1u);
  EXPECT_EQ(rq.polled(), 200u) << "not counted with 34 QPs attached";
  EXPECT_TRUE(y->PostRecv(9, &s, 1).ok()) << "the slot is found through the head";
}

// A responder-side error a peer flagged in the QP's endpoint (IBA 11.6.3.1) is applied by the
// QP's next post, however the post checks for it: ERR, and the work request is flushed.
TEST_F(DataPathTest, AnErrorFlaggedByAPeerIsAppliedByTheNextPost) {
  SendWr w = Wr(WrOpcode::kRdmaWrite, 1, 0, 8);
  w.rkey = mr_->rkey();
  w.remote_addr = reinterpret_cast<uint64_t>(buf_) + 64;
  ASSERT_TRUE(a_->PostSend(w).ok());
  EXPECT_EQ(a_->state(), QpState::kRts);
  a_->endpoint().remote_error.store(1, std::memory_order_release);
  w.wr_id = 2;
  ASSERT_TRUE(a_->PostSend(w).ok());
  auto got = Drain(*cq_a_, 2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].status, transport::wc_status::kSuccess);
  EXPECT_EQ(got[1].wr_id, 2u);
  EXPECT_EQ(got[1].status, transport::wc_status::kWrFlushErr);
  EXPECT_EQ(a_->state(), QpState::kErr);
}

TEST_F(DataPathTest, ErrorFlushesEverythingAfterIt) {
  SendWr bad = Wr(WrOpcode::kRdmaWrite, 1, 0, 8);
  bad.rkey = mr_->rkey() ^ 0xff;  // a key that does not exist
  bad.remote_addr = reinterpret_cast<uint64_t>(buf_);
  ASSERT_TRUE(a_->PostSend(bad).ok());
  ASSERT_TRUE(a_->PostSend(Wr(WrOpcode::kSend, 2, 0, 8)).ok());
  auto got = Drain(*cq_a_, 2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].status, transport::wc_status::kRemAccessErr);
  EXPECT_EQ(got[1].status, transport::wc_status::kWrFlushErr);
  EXPECT_EQ(a_->state(), QpState::kErr);
}


// ibv_destroy_qp takes the QP's unpolled completions out of its CQs, as libmlx5 does
// (mlx5_destroy_qp -> __mlx5_cq_clean): none may name a QP that no longer exists (libfabric's
// verbs provider polls its CQ after rdma_destroy_ep and would act on them). The other QPs'
// completions stay, in order.
TEST_F(DataPathTest, DestroyingAQpDropsItsUnpolledCompletionsOnly) {
  auto c = MakeQp(cq_b_.get());  // completes in b's CQ too
  Connect(*c, c->qp_num());      // to itself
  for (uint64_t i = 0; i < 3; ++i) {
    RecvSge s{reinterpret_cast<uint64_t>(buf_) + 32768 + i * 8, 8, mr_->lkey()};
    ASSERT_TRUE(b_->PostRecv(100 + i, &s, 1).ok());
  }
  SendWr w = Wr(WrOpcode::kRdmaWrite, 7, 0, 8);
  w.rkey = mr_->rkey();
  w.remote_addr = reinterpret_cast<uint64_t>(buf_) + 8192;
  ASSERT_TRUE(c->PostSend(w).ok());  // b's CQ: c's write ...
  for (uint64_t i = 0; i < 2; ++i) ASSERT_TRUE(a_->PostSend(Wr(WrOpcode::kSend, i, 0, 8)).ok());
  ASSERT_EQ(Drain(*cq_a_, 2).size(), 2u);  // ... then b's two receives (RC: acknowledged once placed)
  const uint32_t b_qpn = b_->qp_num();
  b_.reset();  // ibv_destroy_qp with two receive completions unpolled and one receive still posted
  Completion out[8];
  ASSERT_EQ(cq_b_->Poll(out, 8), 1);
  EXPECT_EQ(out[0].qp_num, c->qp_num());
  EXPECT_EQ(out[0].wr_id, 7u);
  EXPECT_EQ(out[0].status, 0u);
  EXPECT_NE(out[0].qp_num, b_qpn);
  EXPECT_EQ(cq_b_->Poll(out, 8), 0);  // no flush either: destroy completes nothing (mlx5, rxe)
}

}  // namespace
}  // namespace softverbs::core
