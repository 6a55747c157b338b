// The receiving QP's rendezvous READ and FIN as internal work requests of its requester
// (transport/rendezvous.h), against fake links: they go through the send queue like any READ
// and SEND, and never complete on the send CQ.
#include "transport/rendezvous.h"

#include <gtest/gtest.h>

#include <cstring>
#include <mutex>
#include <vector>

#include "core/mr.h"
#include "tests/unit/core/test_context.h"
#include "transport/codes.h"
#include "transport/requester.h"

namespace softverbs::core {
namespace {

using transport::Reply;
using transport::ReplyCode;
using transport::Request;
using transport::WrOpcode;
namespace wc_status = transport::wc_status;

struct RendezvousLink : transport::Link {
  Reply Carry(const Request& r) override {
    seen.push_back(r);
    if (r.opcode == WrOpcode::kSend && r.local_count == 1)
      fins.emplace_back(static_cast<uint8_t*>(r.local[0].iov_base),
                        static_cast<uint8_t*>(r.local[0].iov_base) + r.local[0].iov_len);
    return r.opcode == WrOpcode::kRdmaRead ? read_reply : Reply::Of(ReplyCode::kAck);
  }
  void CarryMulticast(const Request&, uint32_t) override {}
  std::vector<Request> seen;
  std::vector<std::vector<uint8_t>> fins;
  Reply read_reply = Reply::Of(ReplyCode::kAck);
};

struct FakeQp : transport::RequesterHost {
  void Complete(const transport::Completion& c) override { send_cq.push_back(c); }
  void EnterError() override { ++errors; }
  void EnterSendQueueError() override {}
  std::vector<transport::Completion> send_cq;
  int errors = 0;
};

class RendezvousTest : public CoreTest {
 protected:
  RendezvousTest() : requester_(context_->local(), qp_, {&host_, &wire_}) {
    mr_ = std::move(Mr::Register(*pd_, {reinterpret_cast<uint64_t>(buf_), sizeof(buf_), reinterpret_cast<uint64_t>(buf_),
                                        access::kLocalWrite})
                        .value());
    transport::RequesterConfig c;
    c.completer.qp_num = 0x300;
    c.completer.type = transport::qp_type::kRc;
    c.completer.timeout = 14;
    c.completer.retry_cnt = 7;
    c.completer.rnr_retry = 7;
    c.completer.sq_sig_all = true;  // still nothing on the send CQ: the QP posted these itself
    c.pd = pd_->host_id();
    c.process_slot = context_->local().slot();
    c.dest_qp_num = 0x301;
    c.max_rd_atomic = 1;
    c.max_send_wr = 4;
    c.max_send_sge = 1;
    requester_.Configure(c);
  }
  transport::RendezvousRead Read(uint32_t len, uint32_t lkey) {
    transport::RendezvousRead r;
    r.qp_num = 0x300;
    r.src_qp = 0x301;
    r.tag = 0x1122334455667788ull;
    r.app_ctx = 0xabc;
    r.wr_id = 77;
    r.buffer = {reinterpret_cast<uint64_t>(buf_), sizeof(buf_), lkey};
    r.va = 0x5000;
    r.rkey = 0x99;
    r.len = len;
    return r;
  }
  transport::SendWr ReadWr(const transport::RendezvousRead& r) {
    return transport::RendezvousReadWr(r, [this](const transport::Completion& c) { recv_cq_.push_back(c); });
  }

  uint8_t buf_[128] = {};
  FakeQp qp_;
  RendezvousLink host_, wire_;
  std::unique_ptr<Mr> mr_;
  std::vector<transport::Completion> recv_cq_;
  transport::Requester requester_;
};

TEST_F(RendezvousTest, TheReadThenTheFinLeaveOnTheSendQueueWithoutSendCompletions) {
  ASSERT_TRUE(requester_.Post(ReadWr(Read(100, mr_->lkey())), transport::qp_state::kRts).ok());
  ASSERT_EQ(wire_.seen.size(), 2u);
  EXPECT_EQ(wire_.seen[0].opcode, WrOpcode::kRdmaRead);
  EXPECT_EQ(wire_.seen[0].remote_addr, 0x5000u);
  EXPECT_EQ(wire_.seen[0].rkey, 0x99u);
  EXPECT_EQ(wire_.seen[0].length, 100u);
  EXPECT_EQ(wire_.seen[0].dest_qp, 0x301u);
  EXPECT_EQ(wire_.seen[1].opcode, WrOpcode::kSend);
  EXPECT_EQ(wire_.seen[1].psn, wire_.seen[0].psn + 1);  // the READ took one PSN, the FIN the next
  ASSERT_EQ(wire_.fins.size(), 1u);
  ASSERT_EQ(wire_.fins[0].size(), transport::kTmhBytes);
  const transport::TmHeader fin = transport::ParseTmh(wire_.fins[0].data());
  EXPECT_EQ(fin.opcode, transport::kTmhFin);
  EXPECT_EQ(fin.tag, 0x1122334455667788ull);
  EXPECT_EQ(fin.app_ctx, 0xabcu);
  EXPECT_TRUE(qp_.send_cq.empty());
  ASSERT_EQ(recv_cq_.size(), 1u);
  EXPECT_EQ(recv_cq_[0].status, wc_status::kSuccess);
  EXPECT_EQ(recv_cq_[0].opcode, transport::wc_opcode::kTmRecv);
  EXPECT_EQ(recv_cq_[0].wc_flags, transport::wc_flag::kTmDataValid);
  EXPECT_EQ(recv_cq_[0].byte_len, 100u);
  EXPECT_EQ(recv_cq_[0].wr_id, 77u);
  EXPECT_EQ(recv_cq_[0].qp_num, 0x300u);
}

TEST_F(RendezvousTest, ANakedReadCompletesTheTagInErrorAndSendsNoFin) {
  wire_.read_reply = Reply::Of(ReplyCode::kRemoteAccess);
  ASSERT_TRUE(requester_.Post(ReadWr(Read(100, mr_->lkey())), transport::qp_state::kRts).ok());
  ASSERT_EQ(wire_.seen.size(), 1u);
  EXPECT_TRUE(wire_.fins.empty());
  EXPECT_TRUE(qp_.send_cq.empty());
  EXPECT_EQ(qp_.errors, 1);  // the QP enters ERR, as for any READ NAKed (IBA 10.8.3)
  ASSERT_EQ(recv_cq_.size(), 1u);
  EXPECT_EQ(recv_cq_[0].status, wc_status::kRemAccessErr);
  EXPECT_EQ(recv_cq_[0].wc_flags, 0u);
  EXPECT_EQ(recv_cq_[0].byte_len, 0u);
}

TEST_F(RendezvousTest, ATagBufferTheQpMayNotWriteIsALocalProtectionError) {
  ASSERT_TRUE(requester_.Post(ReadWr(Read(100, mr_->lkey() + 0x100)), transport::qp_state::kRts).ok());
  EXPECT_TRUE(wire_.seen.empty());
  ASSERT_EQ(recv_cq_.size(), 1u);
  EXPECT_EQ(recv_cq_[0].status, wc_status::kLocProtErr);
  EXPECT_TRUE(qp_.send_cq.empty());
}

TEST_F(RendezvousTest, AReadFlushedByErrCompletesTheTagOnce) {
  wire_.read_reply = Reply::Of(ReplyCode::kPending);  // in flight when the QP enters ERR
  ASSERT_TRUE(requester_.Post(ReadWr(Read(100, mr_->lkey())), transport::qp_state::kRts).ok());
  requester_.Flush();
  ASSERT_EQ(recv_cq_.size(), 1u);
  EXPECT_EQ(recv_cq_[0].status, wc_status::kWrFlushErr);
  EXPECT_TRUE(qp_.send_cq.empty());
  EXPECT_TRUE(wire_.fins.empty());
}

TEST_F(RendezvousTest, TheRvhIsReadInNetworkOrder) {
  uint8_t bytes[32] = {};
  transport::WriteTmh(transport::TmHeader{transport::kTmhRndv, 1, 2}, bytes);
  const uint8_t rvh[16] = {0, 0, 0, 1, 2, 3, 4, 5, 0, 0, 0x12, 0x34, 0, 1, 0, 0};
  memcpy(bytes + 16, rvh, 16);
  transport::RendezvousRead r;
  transport::ParseRvh(bytes, &r);
  EXPECT_EQ(r.va, 0x102030405ull);
  EXPECT_EQ(r.rkey, 0x1234u);
  EXPECT_EQ(r.len, 0x10000u);
}

}  // namespace
}  // namespace softverbs::core
