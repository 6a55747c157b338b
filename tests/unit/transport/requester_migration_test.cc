// Automatic path migration in the requester (IBA 17.2.8): when the local ACK timeout's retries
// are exhausted on the primary path with an alternate armed, the completer migrates instead of
// failing, and what was in flight is carried again, with its PSNs, on the alternate path.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "core/mr.h"
#include "tests/unit/core/test_context.h"
#include "transport/codes.h"
#include "transport/completer.h"
#include "transport/requester.h"

namespace softverbs::core {
namespace {

using transport::Completer;
using transport::Reply;
using transport::ReplyCode;
using transport::Request;
using transport::SendWr;
using transport::WrOpcode;

constexpr uint8_t kPrimaryGid = 1, kAlternateGid = 2;  // the last byte of each path's dgid

// A QP as the completer and requester see it; the progress thread reports too.
struct MigratingQp : transport::RequesterHost {
  void Complete(const transport::Completion& c) override {
    std::lock_guard lock(mu);
    completions.push_back(c);
  }
  void EnterError() override { ++errors; }
  void EnterSendQueueError() override {}
  void PathMigrated() override { ++migrations; }
  size_t count() {
    std::lock_guard lock(mu);
    return completions.size();
  }
  std::mutex mu;
  std::vector<transport::Completion> completions;
  std::atomic<int> errors{0};
  std::atomic<int> migrations{0};
};

TEST(CompleterMigration, ExhaustedRetriesMigrateOnceWhenArmed) {
  MigratingQp qp;
  Completer completer(qp);
  transport::CompleterConfig c;
  c.type = transport::qp_type::kRc;
  c.timeout = 14;
  c.retry_cnt = 1;
  c.alt.armed = true;
  c.alt.timeout = 9;
  completer.Configure(c);
  SendWr wr;
  wr.flags = transport::send_flag::kSignaled;
  transport::RetryState r = completer.Budget();
  EXPECT_FALSE(completer.OnTimeout(wr, r).migrated);  // the one retry retry_cnt allows
  const Completer::Verdict v = completer.OnTimeout(wr, r);
  EXPECT_EQ(v.kind, Completer::Verdict::kRetry);
  EXPECT_TRUE(v.migrated);
  EXPECT_EQ(r.timeouts, 0u);  // a fresh budget on the new path
  EXPECT_EQ(completer.config().timeout, 9);
  EXPECT_FALSE(completer.config().alt.armed);
  EXPECT_EQ(completer.migrations(), 1u);
  EXPECT_EQ(qp.migrations.load(), 1);
  EXPECT_EQ(qp.count(), 0u);  // nothing completed, nothing in error
  EXPECT_EQ(qp.errors.load(), 0);
  // The alternate is used once: exhausted again, the request fails as without APM.
  EXPECT_EQ(completer.OnTimeout(wr, r).kind, Completer::Verdict::kRetry);
  EXPECT_EQ(completer.OnTimeout(wr, r).kind, Completer::Verdict::kFailed);
  ASSERT_EQ(qp.count(), 1u);
  EXPECT_EQ(qp.completions[0].status, transport::wc_status::kRetryExcErr);
  EXPECT_EQ(qp.migrations.load(), 1);
}

// A link that answers later (the wire); it records which path each request took.
struct PathLink : transport::Link {
  struct Seen {
    uint8_t path;
    uint32_t psn;
    uint64_t ticket;
  };
  void Attach(transport::ReplySink* s) override { sink = s; }
  Reply Carry(const Request& r) override {
    std::lock_guard lock(mu);
    seen.push_back({r.addressing->dgid[15], r.psn, r.ticket});
    return Reply::Of(ReplyCode::kPending);
  }
  void CarryMulticast(const Request&, uint32_t) override {}
  std::vector<Seen> Snapshot() {
    std::lock_guard lock(mu);
    return seen;
  }
  std::mutex mu;
  std::vector<Seen> seen;
  transport::ReplySink* sink = nullptr;
};

class RequesterMigrationTest : public CoreTest {
 protected:
  RequesterMigrationTest() : requester_(context_->local(), qp_, {&host_, &wire_}) {
    mr_ = std::move(Mr::Register(*pd_, {reinterpret_cast<uint64_t>(buf_), sizeof(buf_),
                                        reinterpret_cast<uint64_t>(buf_), access::kLocalWrite})
                        .value());
  }
  // The primary path's timeout is 8 us (its retries run out at once); the alternate's is
  // about 4 s, so the test answers long before anything expires there.
  transport::RequesterConfig Config(bool armed) {
    transport::RequesterConfig c;
    c.completer.qp_num = 0x200;
    c.completer.type = transport::qp_type::kRc;
    c.completer.timeout = 1;
    c.completer.retry_cnt = 1;
    c.completer.rnr_retry = 7;
    c.completer.alt.armed = armed;
    c.completer.alt.av.dgid[15] = kAlternateGid;
    c.completer.alt.timeout = 20;
    c.av.dgid[15] = kPrimaryGid;
    c.pd = pd_->host_id();
    c.process_slot = context_->local().slot();
    c.dest_qp_num = 0x201;
    c.path_mtu = 1024;
    c.max_rd_atomic = 4;
    c.max_send_wr = 16;
    c.max_send_sge = 1;
    return c;
  }
  SendWr Wr(uint64_t id) {
    SendWr w;
    w.wr_id = id;
    w.opcode = WrOpcode::kRdmaWrite;
    w.flags = transport::send_flag::kSignaled;
    w.num_sge = 1;
    w.sge[0] = {reinterpret_cast<uint64_t>(buf_), 8, mr_->lkey()};
    return w;
  }
  bool WaitFor(const std::function<bool()>& done) {
    for (int i = 0; i < 5000 && !done(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return done();
  }
  // The requests carried on the alternate path so far.
  std::vector<PathLink::Seen> OnAlternate() {
    std::vector<PathLink::Seen> out;
    for (const auto& s : wire_.Snapshot())
      if (s.path == kAlternateGid) out.push_back(s);
    return out;
  }
  uint8_t buf_[64] = {};
  MigratingQp qp_;
  PathLink host_, wire_;
  std::unique_ptr<Mr> mr_;
  transport::Requester requester_;
};

TEST_F(RequesterMigrationTest, WhatThePrimaryPathLostIsCarriedAgainOnTheAlternate) {
  requester_.Configure(Config(/*armed=*/true));
  requester_.SetPsn(100);
  ASSERT_TRUE(requester_.Post(Wr(1), transport::qp_state::kRts).ok());
  ASSERT_TRUE(requester_.Post(Wr(2), transport::qp_state::kRts).ok());
  ASSERT_TRUE(WaitFor([&] { return OnAlternate().size() >= 2; }));
  EXPECT_EQ(qp_.migrations.load(), 1);
  const auto alt = OnAlternate();
  EXPECT_EQ(alt[0].psn, 100u);  // the same PSNs: the responder sees a retransmission
  EXPECT_EQ(alt[1].psn, 101u);
  for (const auto& s : alt) wire_.sink->OnReply(s.ticket, Reply::Of(ReplyCode::kAck));
  ASSERT_TRUE(WaitFor([&] { return qp_.count() == 2; }));
  for (const auto& c : qp_.completions) EXPECT_EQ(c.status, transport::wc_status::kSuccess);
  EXPECT_EQ(qp_.errors.load(), 0);
  // A configuration from before the migration (the QP has not taken it in) keeps the new path.
  requester_.Configure(Config(/*armed=*/true));
  ASSERT_TRUE(requester_.Post(Wr(3), transport::qp_state::kRts).ok());
  EXPECT_EQ(wire_.Snapshot().back().path, kAlternateGid);
}

TEST_F(RequesterMigrationTest, WithoutAnArmedPathTheRetriesEndInError) {
  requester_.Configure(Config(/*armed=*/false));
  ASSERT_TRUE(requester_.Post(Wr(1), transport::qp_state::kRts).ok());
  ASSERT_TRUE(WaitFor([&] { return qp_.count() == 1; }));
  EXPECT_EQ(qp_.completions[0].status, transport::wc_status::kRetryExcErr);
  EXPECT_EQ(qp_.migrations.load(), 0);
  EXPECT_TRUE(OnAlternate().empty());
}

}  // namespace
}  // namespace softverbs::core
