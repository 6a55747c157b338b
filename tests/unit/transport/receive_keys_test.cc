// The receive buffers' keys a sender keeps across messages (transport/receive_keys.h) and the
// receiver's poll keeps for its landings (core::Cq): a kept view answers only while the key
// table still holds it; a key withdrawn, re-registered or changed is read again and decides as
// the usual way does (IBA 10.6.3.1: IBV_WC_LOC_PROT_ERR / LOC_LEN_ERR at the target, a log line).
#include "transport/receive_keys.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "base/log.h"
#include "core/cq.h"
#include "core/mr.h"
#include "tests/unit/core/test_context.h"
#include "tests/unit/transport/fake_target.h"
#include "transport/codes.h"
#include "transport/responder.h"

namespace softverbs::core {
namespace {

using transport::ReplyCode;
using transport::Request;
using transport::WrOpcode;
using transport::wc_status::kLocLenErr, transport::wc_status::kLocProtErr, transport::wc_status::kSuccess;

constexpr uint32_t kHeldKeyAccess = access::kLocalWrite | access::kRemoteWrite;

// The library's log lines (SOFTVERBS_LOG=error) while it lives.
class HeldKeyLogCapture {
 public:
  HeldKeyLogCapture() {
    setenv("SOFTVERBS_LOG", "error", 1);
    log::ReloadForTesting();
    testing::internal::CaptureStderr();
  }
  std::string Take() {
    std::string out = testing::internal::GetCapturedStderr();
    unsetenv("SOFTVERBS_LOG");
    log::ReloadForTesting();
    return out;
  }
};

class ReceiveKeysTest : public CoreTest {
 protected:
  std::unique_ptr<Mr> Register(Pd& pd, uint32_t access = kHeldKeyAccess) {
    return std::move(
        Mr::Register(pd, {reinterpret_cast<uint64_t>(buf_), sizeof(buf_), reinterpret_cast<uint64_t>(buf_), access})
            .value());
  }
  fabric::HostRegistry& registry() { return context_->local().registry(); }
  uint8_t buf_[256] = {};
  transport::ReceiveKeys keys_;
};

TEST_F(ReceiveKeysTest, AKeptViewAnswersOnlyWhileTheTableHoldsIt) {
  auto mr = Register(*pd_);
  const uint32_t lkey = mr->lkey();
  transport::KeyView fresh;
  const transport::KeyView* kept = keys_.Peek(registry(), lkey);
  ASSERT_NE(kept, nullptr);
  ASSERT_TRUE(transport::KeyPin::Peek(registry(), lkey, &fresh));
  EXPECT_EQ(memcmp(kept, &fresh, sizeof fresh), 0);
  ASSERT_NE(keys_.Peek(registry(), lkey), nullptr);
  EXPECT_EQ(keys_.reads(), 1u);  // the second answer came from the kept view
  // ibv_rereg_mr keeps the key and changes the registration: read again, the new view.
  MrLayout l = mr->layout();
  l.access = access::kLocalWrite;
  ASSERT_TRUE(mr->Reregister(rereg::kChangeAccess, nullptr, l).ok());
  kept = keys_.Peek(registry(), lkey);
  ASSERT_NE(kept, nullptr);
  EXPECT_EQ(keys_.reads(), 2u);
  EXPECT_EQ(kept->access & access::kRemoteWrite, 0u);
  // ibv_dereg_mr: no view at all, as a fresh read finds none; a new registration of the same
  // memory has a key of its own, and the old one stays unknown.
  mr.reset();
  EXPECT_EQ(keys_.Peek(registry(), lkey), nullptr);
  auto again = Register(*pd_);
  EXPECT_EQ(keys_.Peek(registry(), lkey), nullptr);
  kept = keys_.Peek(registry(), again->lkey());
  ASSERT_NE(kept, nullptr);
  EXPECT_EQ(kept->key, again->lkey());
}

TEST_F(ReceiveKeysTest, TwoKeysAreKeptAndAThirdTakesTheOlderPlace) {
  auto a = Register(*pd_), b = Register(*pd_), c = Register(*pd_);
  for (const Mr* mr : {a.get(), b.get(), a.get(), b.get()}) ASSERT_NE(keys_.Peek(registry(), mr->lkey()), nullptr);
  EXPECT_EQ(keys_.reads(), 2u);
  ASSERT_NE(keys_.Peek(registry(), c->lkey()), nullptr);  // takes a's place
  ASSERT_NE(keys_.Peek(registry(), b->lkey()), nullptr);
  EXPECT_EQ(keys_.reads(), 3u);
  const transport::KeyView* v = keys_.Peek(registry(), a->lkey());
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(keys_.reads(), 4u);
  EXPECT_EQ(v->key, a->lkey());
}

// A same-host SEND to another process's QP (a landing: the owner's poll scatters it), its
// sender keeping the receive keys.
class ResponderHeldKeyTest : public ReceiveKeysTest {
 protected:
  ResponderHeldKeyTest() : target_(context_->local()) {
    cq_ = std::move(Cq::Create(*context_, 64, nullptr, 0).value());
    rq_ = std::move(transport::RecvQueue::Create(context_->local(), 16, 2).value());
    mr_ = Register(*pd_);
    transport::QpEndpoint& e = target_.e_;
    e.state.store(transport::qp_state::kRts);
    e.qp_num = 0x4321;
    e.type = transport::qp_type::kRc;
    e.pd = pd_->host_id();
    e.recv_cq = cq_->ring_ref();
    e.recv_queue = rq_->ref();
    e.async_fd = -1;
    target_.lands = true;
    target_.keys = &keys_;
  }
  void PostRecv(uint64_t id, uint32_t offset, uint32_t length, uint32_t lkey) {
    transport::RecvSge s{reinterpret_cast<uint64_t>(buf_) + offset, length, lkey};
    ASSERT_TRUE(rq_->Post(id, &s, 1).ok());
  }
  ReplyCode Send() {
    Request r;
    r.qp_type = transport::qp_type::kRc;
    r.opcode = WrOpcode::kSend;
    r.src_qp = 0x99;
    r.dest_qp = 0x4321;
    r.local = &local_;
    r.local_count = 1;
    r.length = local_.iov_len;
    return transport::Responder::Execute(target_, r).code;
  }
  transport::Completion PollOne() {
    transport::Completion c;
    EXPECT_EQ(cq_->Poll(&c, 1), 1);
    return c;
  }
  uint8_t payload_[8] = {'p', 'i', 'n', 'g', '!'};
  iovec local_{payload_, 5};
  transport::FakeTarget target_;
  std::unique_ptr<Cq> cq_;
  std::unique_ptr<transport::RecvQueue> rq_;
  std::unique_ptr<Mr> mr_;
};

TEST_F(ResponderHeldKeyTest, MessagesAfterTheFirstUseTheKeptKey) {
  for (uint32_t i = 0; i < 3; ++i) {
    PostRecv(i, 16 * i, 16, mr_->lkey());
    ASSERT_EQ(Send(), ReplyCode::kAck);
    const transport::Completion c = PollOne();
    EXPECT_EQ(c.status, kSuccess);
    EXPECT_EQ(c.wr_id, i);
    EXPECT_EQ(c.byte_len, 5u);
    EXPECT_EQ(memcmp(buf_ + 16 * i, "ping!", 5), 0);
  }
  EXPECT_EQ(keys_.reads(), 1u);
  EXPECT_EQ(target_.moves, 0);  // every one landed in its completion
}

TEST_F(ResponderHeldKeyTest, AKeyDeregisteredBetweenTwoMessagesIsAProtectionErrorAtTheTarget) {
  PostRecv(1, 0, 16, mr_->lkey());
  PostRecv(2, 16, 16, mr_->lkey());
  ASSERT_EQ(Send(), ReplyCode::kAck);
  EXPECT_EQ(PollOne().status, kSuccess);
  mr_.reset();  // ibv_dereg_mr
  HeldKeyLogCapture log;
  EXPECT_EQ(Send(), ReplyCode::kRemoteOp);
  const std::string lines = log.Take();
  EXPECT_NE(lines.find("IBV_WC_LOC_PROT_ERR at the target"), std::string::npos) << lines;
  const transport::Completion c = PollOne();
  EXPECT_EQ(c.status, kLocProtErr);
  EXPECT_EQ(c.wr_id, 2u);
  EXPECT_EQ(target_.e_.remote_error.load(), 1u);  // the target QP enters ERR
  EXPECT_EQ(buf_[16], 0);
}

TEST_F(ResponderHeldKeyTest, AKeyReRegisteredBetweenTwoMessagesNamesOnlyTheNewRegistration) {
  PostRecv(1, 0, 16, mr_->lkey());
  ASSERT_EQ(Send(), ReplyCode::kAck);
  EXPECT_EQ(PollOne().status, kSuccess);
  const uint32_t old_key = mr_->lkey();
  mr_.reset();
  mr_ = Register(*pd_);
  ASSERT_NE(mr_->lkey(), old_key);
  PostRecv(2, 16, 16, old_key);
  PostRecv(3, 32, 16, mr_->lkey());
  EXPECT_EQ(Send(), ReplyCode::kRemoteOp);
  EXPECT_EQ(PollOne().status, kLocProtErr);
  EXPECT_EQ(Send(), ReplyCode::kAck);  // (the fake target keeps receiving: its owner applies ERR)
  const transport::Completion c = PollOne();
  EXPECT_EQ(c.status, kSuccess);
  EXPECT_EQ(c.wr_id, 3u);
  EXPECT_EQ(memcmp(buf_ + 32, "ping!", 5), 0);
  EXPECT_EQ(buf_[16], 0);
}

TEST_F(ResponderHeldKeyTest, AKeyRegisteredAgainWithoutLocalWriteIsRefused) {
  PostRecv(1, 0, 16, mr_->lkey());
  ASSERT_EQ(Send(), ReplyCode::kAck);
  EXPECT_EQ(PollOne().status, kSuccess);
  MrLayout l = mr_->layout();
  l.access = 0;  // ibv_rereg_mr(IBV_REREG_MR_CHANGE_ACCESS): read only now
  ASSERT_TRUE(mr_->Reregister(rereg::kChangeAccess, nullptr, l).ok());
  PostRecv(2, 16, 16, mr_->lkey());
  EXPECT_EQ(Send(), ReplyCode::kRemoteOp);
  EXPECT_EQ(PollOne().status, kLocProtErr);
  EXPECT_EQ(keys_.reads(), 2u);
}

TEST_F(ResponderHeldKeyTest, AKeyOfAnotherPdIsRefusedKeptOrNot) {
  auto other_pd = std::move(Pd::Create(*context_).value());
  auto other = Register(*other_pd);
  PostRecv(1, 0, 16, mr_->lkey());
  PostRecv(2, 16, 16, other->lkey());
  PostRecv(3, 32, 16, other->lkey());
  ASSERT_EQ(Send(), ReplyCode::kAck);
  EXPECT_EQ(PollOne().status, kSuccess);
  HeldKeyLogCapture log;
  EXPECT_EQ(Send(), ReplyCode::kRemoteOp);  // read, kept, refused (IBA 10.6.3.1: the QP's PD)
  EXPECT_EQ(Send(), ReplyCode::kRemoteOp);  // the kept view, refused the same way
  const std::string lines = log.Take();
  EXPECT_NE(lines.find("IBV_WC_LOC_PROT_ERR"), std::string::npos) << lines;
  EXPECT_EQ(PollOne().status, kLocProtErr);
  EXPECT_EQ(PollOne().status, kLocProtErr);
  EXPECT_EQ(keys_.reads(), 2u);
  EXPECT_EQ(buf_[16], 0);
  EXPECT_EQ(buf_[32], 0);
}

TEST_F(ResponderHeldKeyTest, AWqeTooSmallIsALengthErrorAtTheTarget) {
  PostRecv(1, 0, 16, mr_->lkey());
  PostRecv(2, 16, 4, mr_->lkey());  // 4 bytes for a 5-byte message
  ASSERT_EQ(Send(), ReplyCode::kAck);
  EXPECT_EQ(PollOne().status, kSuccess);
  HeldKeyLogCapture log;
  EXPECT_EQ(Send(), ReplyCode::kInvalidRequest);
  const std::string lines = log.Take();
  EXPECT_NE(lines.find("IBV_WC_LOC_LEN_ERR at the target"), std::string::npos) << lines;
  EXPECT_EQ(PollOne().status, kLocLenErr);
  EXPECT_EQ(buf_[16], 0);
}

TEST_F(ResponderHeldKeyTest, ThePollRechecksItsKeptLandingKey) {
  // The receiver's poll keeps the landed buffers' key too: a landing whose MR went between the
  // SEND and the poll is not written (IBV_WC_LOC_PROT_ERR), and a new MR is learned afresh.
  PostRecv(1, 0, 16, mr_->lkey());
  PostRecv(2, 16, 16, mr_->lkey());
  ASSERT_EQ(Send(), ReplyCode::kAck);
  EXPECT_EQ(PollOne().status, kSuccess);  // the poll keeps the key
  ASSERT_EQ(Send(), ReplyCode::kAck);     // checked by the sender, landed
  mr_.reset();                            // ... and deregistered before the owner polls
  HeldKeyLogCapture log;
  EXPECT_EQ(PollOne().status, kLocProtErr);
  const std::string lines = log.Take();
  EXPECT_NE(lines.find("lost its MR"), std::string::npos) << lines;
  EXPECT_EQ(buf_[16], 0);
  mr_ = Register(*pd_);
  PostRecv(3, 32, 16, mr_->lkey());
  ASSERT_EQ(Send(), ReplyCode::kAck);
  EXPECT_EQ(PollOne().status, kSuccess);
  EXPECT_EQ(memcmp(buf_ + 32, "ping!", 5), 0);
}

}  // namespace
}  // namespace softverbs::core
