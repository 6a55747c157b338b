// Receives into an lkey imported from another process (responder_imported.h): the target QP is
// configured as another process's, the MR is this process's, so its lkey is an import for the
// target and the message is written through imported_key.h into this process's memory.
#include "transport/responder_imported.h"

#include <gtest/gtest.h>

#include <cstring>

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

class ResponderImportedTest : public CoreTest {
 protected:
  ResponderImportedTest() : target_(context_->local()) {
    cq_ = std::move(Cq::Create(*context_, 64, nullptr, 0).value());
    rq_ = std::move(transport::RecvQueue::Create(context_->local(), 16, 4).value());
    mr_ = Register(access::kLocalWrite);
    ro_ = Register(access::kRemoteRead);
    transport::QpEndpoint& e = target_.e_;
    e.state.store(transport::qp_state::kRts);
    e.qp_num = 0x1234;
    e.type = transport::qp_type::kRc;
    e.pd = pd_->host_id();
    e.recv_cq = cq_->ring_ref();
    e.recv_queue = rq_->ref();
    e.async_fd = -1;
    target_.slot_offset = 1;
  }
  std::unique_ptr<Mr> Register(uint32_t access) {
    return std::move(
        Mr::Register(*pd_, {reinterpret_cast<uint64_t>(buf_), sizeof(buf_), reinterpret_cast<uint64_t>(buf_), access})
            .value());
  }
  Request Send() {
    Request r;
    r.qp_type = transport::qp_type::kRc;
    r.opcode = WrOpcode::kSend;
    r.src_qp = 0x99;
    r.dest_qp = 0x1234;
    r.local = local_;
    r.local_count = 2;
    r.length = 11;
    return r;
  }
  transport::Completion Polled() {
    transport::Completion c{};
    EXPECT_EQ(cq_->Poll(&c, 1), 1);
    return c;
  }
  uint8_t buf_[512] = {};
  uint8_t a_[5] = {'h', 'e', 'l', 'l', 'o'}, b_[6] = {' ', 'w', 'o', 'r', 'l', 'd'};
  iovec local_[2] = {{a_, 5}, {b_, 6}};
  transport::FakeTarget target_;
  std::unique_ptr<Cq> cq_;
  std::unique_ptr<transport::RecvQueue> rq_;
  std::unique_ptr<Mr> mr_, ro_;
};

TEST_F(ResponderImportedTest, AReceiveScattersAcrossImportedSges) {
  const auto at = reinterpret_cast<uint64_t>(buf_);
  transport::RecvSge s[2] = {{at + 100, 3, mr_->lkey()}, {at + 300, 64, mr_->lkey()}};
  ASSERT_TRUE(rq_->Post(7, s, 2).ok());
  EXPECT_TRUE(transport::ResponderIsImportedKey(target_, mr_->lkey()));
  EXPECT_EQ(transport::Responder::Execute(target_, Send()).code, ReplyCode::kAck);
  EXPECT_EQ(memcmp(buf_ + 100, "hel", 3), 0);
  EXPECT_EQ(memcmp(buf_ + 300, "lo world", 8), 0);
  EXPECT_EQ(buf_[103] | buf_[308] | buf_[99], 0);
  transport::Completion c = Polled();
  EXPECT_EQ(c.status, transport::wc_status::kSuccess);
  EXPECT_EQ(c.byte_len, 11u);
}

TEST_F(ResponderImportedTest, ASmallMessageIsNotLandedInTheCompletion) {
  target_.lands = true;  // the owner's poll could not scatter into another process's memory
  transport::RecvSge s{reinterpret_cast<uint64_t>(buf_) + 8, 32, mr_->lkey()};
  ASSERT_TRUE(rq_->Post(8, &s, 1).ok());
  EXPECT_EQ(transport::Responder::Execute(target_, Send()).code, ReplyCode::kAck);
  EXPECT_EQ(memcmp(buf_ + 8, "hello world", 11), 0);
  EXPECT_EQ(Polled().status, transport::wc_status::kSuccess);
}

TEST_F(ResponderImportedTest, WithoutLocalWriteOrBeyondTheMrTheReceiveFails) {
  transport::RecvSge s{reinterpret_cast<uint64_t>(buf_), 32, ro_->lkey()};
  ASSERT_TRUE(rq_->Post(9, &s, 1).ok());
  EXPECT_EQ(transport::Responder::Execute(target_, Send()).code, ReplyCode::kRemoteOp);
  EXPECT_EQ(Polled().status, transport::wc_status::kLocProtErr);
  EXPECT_EQ(buf_[0], 0);
  target_.e_.state.store(transport::qp_state::kRts);  // the failure took it to ERR
  transport::RecvSge beyond{reinterpret_cast<uint64_t>(buf_) + 500, 32, mr_->lkey()};
  ASSERT_TRUE(rq_->Post(10, &beyond, 1).ok());
  EXPECT_EQ(transport::Responder::Execute(target_, Send()).code, ReplyCode::kRemoteOp);
  EXPECT_EQ(Polled().status, transport::wc_status::kLocProtErr);
  EXPECT_EQ(buf_[500], 0);
}

}  // namespace
}  // namespace softverbs::core
