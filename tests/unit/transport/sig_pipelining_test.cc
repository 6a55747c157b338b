// Signature pipelining's requester side (transport/sig_pipelining.cc) against fake links:
// mlx5dv_qp_cancel_posted_send_wrs(3) on waiting WRs, and a fenced WR waiting for those before it.
// The stop at a failed check itself goes through a signature mkey: tests/pyverbs/test_mlx5_sig.py.
#include <gtest/gtest.h>

#include <vector>

#include "tests/unit/transport/requester_fixture.h"
#include "transport/codes.h"
#include "transport/requester.h"

namespace softverbs::core {
namespace {

using transport::Reply;
using transport::ReplyCode;
using transport::SendWr;
using transport::WrOpcode;
using transport::qp_state::kRts, transport::qp_state::kSqd;

struct PipeLink : transport::Link {
  Reply Carry(const transport::Request& r) override {
    seen.push_back(r.opcode);
    return next;
  }
  void CarryMulticast(const transport::Request&, uint32_t) override {}
  std::vector<WrOpcode> seen;
  Reply next = Reply::Of(ReplyCode::kAck);
};

class SigPipeliningTest : public requester_testing::RequesterFixture<PipeLink, PipeLink, 64> {
 protected:
  void Configure(bool on_host, bool pipelining) {
    // timeout 20: no retry within the test
    transport::RequesterConfig c = BaseConfig(transport::qp_type::kRc, /*timeout=*/20, /*retry_cnt=*/7);
    c.dest_on_host = on_host;
    c.max_rd_atomic = 1;
    c.max_send_wr = 16;
    c.max_send_sge = 1;
    c.sig_pipelining = pipelining;
    requester_.Configure(c);
  }
  SendWr Wr(WrOpcode op, uint64_t wr_id, uint32_t flags = transport::send_flag::kSignaled) {
    SendWr w = MakeWr(wr_id, op, 16);
    w.flags = flags;
    return w;
  }
};

// providers/mlx5/qp.c mlx5dv_qp_cancel_posted_send_wrs: every waiting WQE of the wr_id becomes a
// NOP that completes as signaled with its original opcode; a NOP is not canceled again (EINVAL).
TEST_F(SigPipeliningTest, CanceledWrsCompleteAsNopsInOrder) {
  Configure(/*on_host=*/true, /*pipelining=*/true);
  ASSERT_TRUE(requester_.Post(Wr(WrOpcode::kSend, 5), kSqd).ok());
  ASSERT_TRUE(requester_.Post(Wr(WrOpcode::kRdmaWrite, 6), kSqd).ok());
  ASSERT_TRUE(requester_.Post(Wr(WrOpcode::kSend, 5, 0), kSqd).ok());  // unsignaled
  EXPECT_TRUE(host_.seen.empty());  // SQD: they wait
  auto canceled = requester_.CancelPosted(5);
  ASSERT_TRUE(canceled.ok());
  EXPECT_EQ(canceled.value(), 2u);
  EXPECT_EQ(requester_.CancelPosted(5).status().code(), EINVAL);
  auto none = requester_.CancelPosted(9);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none.value(), 0u);
  requester_.LeaveDrained();
  requester_.Progress();  // SQD -> RTS
  ASSERT_EQ(qp_.completions.size(), 2u);  // the unsignaled NOP completes silently
  EXPECT_EQ(qp_.completions[0].wr_id, 5u);
  EXPECT_EQ(qp_.completions[0].status, transport::wc_status::kSuccess);
  EXPECT_EQ(qp_.completions[0].opcode, transport::wc_opcode::kSend);
  EXPECT_EQ(qp_.completions[1].wr_id, 6u);
  EXPECT_EQ(host_.seen, std::vector<WrOpcode>{WrOpcode::kRdmaWrite});  // NOPs carry nothing
}

// A NOP completes at once: behind a WR in flight it waits for that one's reply, as a local
// operation does, so it completes once and in order.
TEST_F(SigPipeliningTest, ACanceledWrWaitsBehindOneInFlight) {
  Configure(/*on_host=*/false, true);
  wire_.next = Reply::Of(ReplyCode::kPending);
  ASSERT_TRUE(requester_.Post(Wr(WrOpcode::kRdmaWrite, 1), kRts).ok());  // in flight, no reply yet
  ASSERT_TRUE(requester_.Post(Wr(WrOpcode::kSend, 5), kSqd).ok());
  ASSERT_EQ(requester_.CancelPosted(5).value(), 1u);
  requester_.LeaveDrained();
  requester_.Progress();
  requester_.Progress();
  EXPECT_TRUE(qp_.completions.empty());
  EXPECT_EQ(wire_.seen.size(), 1u);
  requester_.Reset();
}

// A canceled WR of a QP that enters ERR is flushed like the rest (the man page).
TEST_F(SigPipeliningTest, ACanceledWrIsFlushedInErr) {
  Configure(true, true);
  ASSERT_TRUE(requester_.Post(Wr(WrOpcode::kSend, 5), kSqd).ok());
  ASSERT_EQ(requester_.CancelPosted(5).value(), 1u);
  requester_.Flush();
  ASSERT_EQ(qp_.completions.size(), 1u);
  EXPECT_EQ(qp_.completions[0].status, transport::wc_status::kWrFlushErr);
  EXPECT_TRUE(host_.seen.empty());
}

// mlx5dv_qp_cancel_posted_send_wrs(3): the QP stops "between the WQE that generated the signature
// error, and the next WQE that has IBV_SEND_FENCE": on a pipelining QP a fenced WR waits for the
// WRs in flight before it; elsewhere it does not.
TEST_F(SigPipeliningTest, AFencedWrWaitsForThoseInFlightOnAPipeliningQpOnly) {
  for (bool pipelining : {true, false}) {
    SCOPED_TRACE(pipelining ? "pipelining" : "not pipelining");
    requester_.Reset();
    wire_.seen.clear();
    Configure(/*on_host=*/false, pipelining);
    wire_.next = Reply::Of(ReplyCode::kPending);  // the WRITE stays in flight
    ASSERT_TRUE(requester_.Post(Wr(WrOpcode::kRdmaWrite, 1, 0), kRts).ok());
    SendWr fenced = Wr(WrOpcode::kSend, 2, transport::send_flag::kSignaled | transport::send_flag::kFence);
    ASSERT_TRUE(requester_.Post(fenced, kRts).ok());
    EXPECT_EQ(wire_.seen.size(), pipelining ? 1u : 2u);
  }
  requester_.Reset();  // nothing left in flight for the progress thread
}

}  // namespace
}  // namespace softverbs::core
