// Automatic path migration in the requester (IBA 17.2.8): when the local ACK timeout's retries
// are exhausted on the primary path with an alternate armed, the completer migrates instead of
// failing, and what was in flight is carried again, with its PSNs, on the alternate path.
#include <gtest/gtest.h>

#include <mutex>
#include <vector>

#include "tests/unit/transport/requester_fixture.h"
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

using MigratingQp = requester_testing::FakeQp;

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

class RequesterMigrationTest : public requester_testing::RequesterFixture<PathLink, PathLink, 64> {
 protected:
  // The primary path's timeout is 8 us (its retries run out at once); the alternate's is
  // about 4 s, so the test answers long before anything expires there.
  transport::RequesterConfig Config(bool armed) {
    transport::RequesterConfig c = BaseConfig(transport::qp_type::kRc, /*timeout=*/1, /*retry_cnt=*/1);
    c.completer.alt.armed = armed;
    c.completer.alt.av.dgid[15] = kAlternateGid;
    c.completer.alt.timeout = 20;
    c.av.dgid[15] = kPrimaryGid;
    c.path_mtu = 1024;
    c.max_rd_atomic = 4;
    c.max_send_wr = 16;
    c.max_send_sge = 1;
    return c;
  }
  SendWr Wr(uint64_t id) { return MakeWr(id, WrOpcode::kRdmaWrite, 8); }
  // The requests carried on the alternate path so far.
  std::vector<PathLink::Seen> OnAlternate() {
    std::vector<PathLink::Seen> out;
    for (const auto& s : wire_.Snapshot())
      if (s.path == kAlternateGid) out.push_back(s);
    return out;
  }
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
