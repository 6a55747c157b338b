// The completer role against a fake QP (RequesterHost): replies become completions or retries,
// with the retry budgets of IBA 9.7.5.2.8 (RNR) and 9.7.6.1.3 (local ACK timeout).
#include "transport/completer.h"

#include <gtest/gtest.h>

#include <vector>

#include "transport/codes.h"

namespace softverbs::transport {
namespace {

using transport::qp_type::kRc, transport::qp_type::kUc;

struct FakeQp : RequesterHost {
  void Complete(const Completion& c) override { completions.push_back(c); }
  void EnterError() override { ++errors; }
  void EnterSendQueueError() override { ++sq_errors; }
  std::vector<Completion> completions;
  int errors = 0;
  int sq_errors = 0;
};

class CompleterTest : public ::testing::Test {
 protected:
  void Configure(uint32_t type, uint8_t retry_cnt, uint8_t rnr_retry, uint8_t timeout = 14) {
    CompleterConfig c;
    c.qp_num = 0x123;
    c.type = type;
    c.retry_cnt = retry_cnt;
    c.rnr_retry = rnr_retry;
    c.timeout = timeout;
    completer_.Configure(c);
  }
  SendWr Wr(uint64_t id, WrOpcode op = WrOpcode::kSend, bool signaled = true) {
    SendWr w;
    w.wr_id = id;
    w.opcode = op;
    w.flags = signaled ? send_flag::kSignaled : 0;
    return w;
  }
  FakeQp qp_;
  Completer completer_{qp_};
};

TEST_F(CompleterTest, AckCompletesSignaledWorkRequestsOnly) {
  Configure(kRc, 7, 7);
  RetryState r = completer_.Budget();
  EXPECT_EQ(completer_.OnReply(Wr(1), r, Reply::Of(ReplyCode::kAck), 64).kind, Completer::Verdict::kCompleted);
  EXPECT_EQ(completer_.OnReply(Wr(2, WrOpcode::kSend, false), r, Reply::Of(ReplyCode::kAck), 64).kind,
            Completer::Verdict::kCompleted);
  ASSERT_EQ(qp_.completions.size(), 1u);
  EXPECT_EQ(qp_.completions[0].wr_id, 1u);
  EXPECT_EQ(qp_.completions[0].status, wc_status::kSuccess);
  EXPECT_EQ(qp_.completions[0].byte_len, 64u);
  EXPECT_EQ(qp_.completions[0].qp_num, 0x123u);
  EXPECT_EQ(qp_.errors, 0);
}

TEST_F(CompleterTest, AnUnsignaledWorkRequestCompletesOnlyInErrorOrWithSqSigAll) {
  // ibv_post_send(3): an unsignaled success produces no completion; its error does, and with
  // sq_sig_all every work request completes.
  Configure(kRc, 0, 0);
  RetryState r = completer_.Budget();
  EXPECT_EQ(completer_.OnReply(Wr(1, WrOpcode::kRdmaWrite, false), r, Reply::Of(ReplyCode::kAck), 8).kind,
            Completer::Verdict::kCompleted);
  EXPECT_TRUE(qp_.completions.empty());
  EXPECT_EQ(completer_.OnReply(Wr(2, WrOpcode::kRdmaWrite, false), r, Reply::Of(ReplyCode::kRemoteAccess), 8).kind,
            Completer::Verdict::kFailed);
  ASSERT_EQ(qp_.completions.size(), 1u);
  EXPECT_EQ(qp_.completions[0].wr_id, 2u);
  EXPECT_EQ(qp_.completions[0].status, wc_status::kRemAccessErr);
  EXPECT_EQ(qp_.completions[0].opcode, wc_opcode::kRdmaWrite);
  EXPECT_EQ(qp_.completions[0].byte_len, 0u);
  CompleterConfig all;
  all.qp_num = 0x124;
  all.type = kRc;
  all.sq_sig_all = true;
  completer_.Configure(all);
  completer_.OnReply(Wr(3, WrOpcode::kAtomicFetchAdd, false), r, Reply::Of(ReplyCode::kAck), 8);
  ASSERT_EQ(qp_.completions.size(), 2u);
  EXPECT_EQ(qp_.completions[1].wr_id, 3u);
  EXPECT_EQ(qp_.completions[1].status, wc_status::kSuccess);
  EXPECT_EQ(qp_.completions[1].opcode, wc_opcode::kFetchAdd);
  EXPECT_EQ(qp_.completions[1].byte_len, 8u);
  EXPECT_EQ(qp_.completions[1].qp_num, 0x124u);
}

TEST_F(CompleterTest, UnreliableTransportsOnlyKnowTheyHaveSent) {
  // IBA 9.8.3: UC has no acknowledgements; a NAK or silence is never seen by the requester.
  Configure(kUc, 0, 0);
  for (ReplyCode code : {ReplyCode::kDropped, ReplyCode::kNoAnswer, ReplyCode::kRemoteAccess, ReplyCode::kRnr}) {
    RetryState r = completer_.Budget();
    EXPECT_EQ(completer_.OnReply(Wr(1, WrOpcode::kRdmaWrite), r, Reply::Of(code), 8).kind,
              Completer::Verdict::kCompleted);
  }
  ASSERT_EQ(qp_.completions.size(), 4u);
  for (const Completion& c : qp_.completions) EXPECT_EQ(c.status, wc_status::kSuccess);
}

TEST_F(CompleterTest, RnrRetriesRnrRetryTimesThenFails) {
  Configure(kRc, 7, 2);
  RetryState r = completer_.Budget();
  const auto before = Completer::Clock::now();
  auto v = completer_.OnReply(Wr(1), r, Reply::Rnr(14), 0);
  ASSERT_EQ(v.kind, Completer::Verdict::kRetry);
  EXPECT_GE(v.retry_at - before, RnrDelay(14));  // the responder's timer, table 45
  EXPECT_EQ(completer_.OnReply(Wr(1), r, Reply::Rnr(14), 0).kind, Completer::Verdict::kRetry);
  EXPECT_EQ(completer_.OnReply(Wr(1), r, Reply::Rnr(14), 0).kind, Completer::Verdict::kFailed);
  ASSERT_EQ(qp_.completions.size(), 1u);
  EXPECT_EQ(qp_.completions[0].status, wc_status::kRnrRetryExcErr);
  EXPECT_EQ(qp_.errors, 1);
}

TEST_F(CompleterTest, RnrRetrySevenRetriesForever) {
  Configure(kRc, 7, 7);
  RetryState r = completer_.Budget();
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(completer_.OnReply(Wr(1), r, Reply::Rnr(1), 0).kind, Completer::Verdict::kRetry);
  EXPECT_TRUE(qp_.completions.empty());
}

TEST_F(CompleterTest, NoAnswerWaitsOneTimeoutBeforeDeciding) {
  // Issue 17 item 4: with retry_cnt 0 the error comes after one timeout, not at once.
  Configure(kRc, 0, 7, 10);
  RetryState r = completer_.Budget();
  const auto before = Completer::Clock::now();
  auto v = completer_.OnReply(Wr(1), r, Reply::Of(ReplyCode::kNoAnswer), 0);
  ASSERT_EQ(v.kind, Completer::Verdict::kRetry);
  EXPECT_GE(v.retry_at - before, AckTimeout(10));
  EXPECT_TRUE(r.awaiting_timeout);
  EXPECT_TRUE(qp_.completions.empty());
  EXPECT_EQ(completer_.OnTimeout(Wr(1), r).kind, Completer::Verdict::kFailed);
  ASSERT_EQ(qp_.completions.size(), 1u);
  EXPECT_EQ(qp_.completions[0].status, wc_status::kRetryExcErr);
}

TEST_F(CompleterTest, RetryExceededAfterRetryCntPlusOneTimeouts) {
  // IBA 9.7.6.1.3: sent once, retried retry_cnt times; each attempt waits one timeout.
  Configure(kRc, 3, 7);
  RetryState r = completer_.Budget();
  int timeouts = 0;
  for (;;) {
    ASSERT_EQ(completer_.OnReply(Wr(1), r, Reply::Of(ReplyCode::kNoAnswer), 0).kind, Completer::Verdict::kRetry);
    ++timeouts;
    if (completer_.OnTimeout(Wr(1), r).kind == Completer::Verdict::kFailed) break;
    ASSERT_LT(timeouts, 100);
  }
  EXPECT_EQ(timeouts, 4);
  EXPECT_EQ(qp_.completions.back().status, wc_status::kRetryExcErr);
}

TEST_F(CompleterTest, SequenceNaksWithProgressNeverExhaustTheRetryCount) {
  // retry_cnt bounds attempts that get nowhere: a sequence NAK further into the message than
  // the last (the responder took packets since) starts the count again, as rxe resets its
  // counters on every response that advances. A lossy path then slows a long message down but
  // does not fail it; the same NAK without progress still does after retry_cnt retries.
  Configure(kRc, 2, 0);
  RetryState r = completer_.Budget();
  Reply progress = Reply::Of(ReplyCode::kSequenceError);
  progress.progress = true;
  for (int i = 0; i < 10; ++i)
    ASSERT_EQ(completer_.OnReply(Wr(1), r, progress, 0).kind, Completer::Verdict::kRetry) << i;
  EXPECT_EQ(completer_.OnReply(Wr(1), r, Reply::Of(ReplyCode::kSequenceError), 0).kind, Completer::Verdict::kRetry);
  EXPECT_EQ(completer_.OnReply(Wr(1), r, Reply::Of(ReplyCode::kSequenceError), 0).kind, Completer::Verdict::kFailed);
  ASSERT_EQ(qp_.completions.size(), 1u);
  EXPECT_EQ(qp_.completions[0].status, wc_status::kRetryExcErr);
}

TEST_F(CompleterTest, TimeoutZeroNeverGivesUp) {
  Configure(kRc, 0, 7, 0);  // IBA: 0 is an infinite local ACK timeout
  RetryState r = completer_.Budget();
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(completer_.OnReply(Wr(1), r, Reply::Of(ReplyCode::kNoAnswer), 0).kind, Completer::Verdict::kRetry);
    ASSERT_EQ(completer_.OnTimeout(Wr(1), r).kind, Completer::Verdict::kRetry);
  }
  EXPECT_TRUE(qp_.completions.empty());
}

TEST_F(CompleterTest, NaksBecomeTheirCompletionErrorsAndStopTheQueue) {
  const std::pair<ReplyCode, uint32_t> cases[] = {{ReplyCode::kRemoteAccess, wc_status::kRemAccessErr},
                                                  {ReplyCode::kInvalidRequest, wc_status::kRemInvReqErr},
                                                  {ReplyCode::kRemoteOp, wc_status::kRemOpErr}};
  Configure(kRc, 7, 7);
  for (auto [code, status] : cases) {
    RetryState r = completer_.Budget();
    // Errors complete even unsignaled work requests (IBA 10.8.3).
    EXPECT_EQ(completer_.OnReply(Wr(9, WrOpcode::kRdmaWrite, false), r, Reply::Of(code), 8).kind,
              Completer::Verdict::kFailed);
    EXPECT_EQ(qp_.completions.back().status, status);
    EXPECT_EQ(qp_.completions.back().opcode, wc_opcode::kRdmaWrite);
  }
  EXPECT_EQ(qp_.errors, 3);
}

TEST_F(CompleterTest, UnreliableFailuresEnterSqeNotErr) {
  Configure(kUc, 0, 0);
  completer_.Fail(Wr(1), wc_status::kLocProtErr);
  EXPECT_EQ(qp_.sq_errors, 1);
  EXPECT_EQ(qp_.errors, 0);
}

// mlx5dv_dci_stream_id_reset(3): on a DCI with streams an error completes its WR and stops only
// its stream; the QP leaves RTS once 2^log_num_errored streams are in error.
TEST_F(CompleterTest, ADciStreamErrorStopsOnlyItsStreamUntilTheLimit) {
  CompleterConfig c;
  c.qp_num = 0x321;
  c.type = kRc;
  c.dci_streams = {true, 2, 1};  // 2 streams in error stop the DCI
  completer_.Configure(c);
  SendWr w = Wr(4, WrOpcode::kRdmaWrite);
  w.dc.set = true;
  w.dc.stream_id = 1;
  RetryState r = completer_.Budget();
  EXPECT_EQ(completer_.OnReply(w, r, Reply::Of(ReplyCode::kRemoteAccess), 8).kind, Completer::Verdict::kStreamFailed);
  ASSERT_EQ(qp_.completions.size(), 1u);
  EXPECT_EQ(qp_.completions[0].status, wc_status::kRemAccessErr);
  EXPECT_EQ(qp_.errors, 0);
  EXPECT_TRUE(completer_.StreamStopped(w));
  SendWr other = w;
  other.dc.stream_id = 2;
  EXPECT_FALSE(completer_.StreamStopped(other));
  // The stream's later WRs are flushed by the requester; a reset makes it serve again.
  EXPECT_EQ(completer_.ResetStream(2).code(), EINVAL);
  ASSERT_TRUE(completer_.ResetStream(1).ok());
  EXPECT_FALSE(completer_.StreamStopped(w));
  // Two streams in error: the DCI enters ERR (this completion comes after the state change).
  EXPECT_EQ(completer_.Fail(w, wc_status::kRemAccessErr).kind, Completer::Verdict::kStreamFailed);
  EXPECT_EQ(completer_.Fail(other, wc_status::kRetryExcErr).kind, Completer::Verdict::kFailed);
  EXPECT_EQ(qp_.errors, 1);
  EXPECT_EQ(qp_.completions.back().status, wc_status::kRetryExcErr);
}

TEST_F(CompleterTest, ADciWithoutStreamsEntersErrOnItsFirstError) {
  Configure(kRc, 7, 7);
  SendWr w = Wr(4, WrOpcode::kRdmaWrite);
  w.dc.set = true;
  w.dc.stream_id = 5;  // carried and ignored: one stream
  EXPECT_EQ(completer_.Fail(w, wc_status::kRemAccessErr).kind, Completer::Verdict::kFailed);
  EXPECT_EQ(qp_.errors, 1);
  EXPECT_FALSE(completer_.StreamStopped(w));
}

}  // namespace
}  // namespace softverbs::transport
