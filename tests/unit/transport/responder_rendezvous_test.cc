// The responder's side of a tag matching rendezvous from another host (responder_rendezvous.cc):
// a matched RNDV's packets against a fake target and a fake issuer standing for the QP's owner.
#include <gtest/gtest.h>

#include <cstring>

#include "base/big_endian.h"
#include "tests/unit/transport/rendezvous_fixture.h"
#include "transport/codes.h"
#include "transport/responder.h"

namespace softverbs::core {
namespace {

using transport::ReceiveTm;
using transport::ReplyCode;
using transport::Request;
using transport::TakenWqe;
namespace wc_flag = transport::wc_flag;
namespace wc_status = transport::wc_status;

class ResponderRendezvousTest : public rendezvous_testing::TmRcQpFixture {
 protected:
  ResponderRendezvousTest() : TmRcQpFixture(64, 16, access::kLocalWrite | access::kRemoteRead) {}
  void AddTag(uint64_t tag, uint32_t length) { TmRcQpFixture::AddTag(tag, length, 9); }
  // The first packet of an RNDV: TMH (tag, app_ctx 0x55) then the RVH (va, rkey, len) and `extra` bytes.
  Request Rndv(uint64_t tag, uint32_t len, size_t extra = 0) {
    const transport::TmHeader tmh{transport::kTmhRndv, 0x55, tag};
    rendezvous_testing::WriteTmhAndRvh(payload_, tmh, 0xabcdef000ull, 0x77, len);
    memset(payload_ + 32, 0xee, extra);
    piece_ = {payload_, 32 + extra};
    Request r = SendOf(&piece_);
    r.src_qp = 0x99;
    return r;
  }
  // BeginReceive, PlaceReceive, CompleteReceive of a one-packet message, as the RC front end runs them.
  transport::RendezvousRead Receive(const Request& r, ReceiveTm* tm) {
    TakenWqe w;
    EXPECT_EQ(transport::Responder::BeginReceive(target_, r, &w, tm).code, ReplyCode::kAck);
    EXPECT_EQ(transport::Responder::PlaceReceive(target_, w, 0, r, tm).code, ReplyCode::kAck);
    transport::RendezvousRead read;
    EXPECT_EQ(transport::Responder::CompleteReceive(target_, w, r, r.length, tm, &read).code, ReplyCode::kAck);
    return read;
  }
  bool Untouched() const {
    for (uint8_t b : buf_)
      if (b != 0) return false;
    return true;
  }

  uint8_t payload_[128] = {};
  iovec piece_{};
};

TEST_F(ResponderRendezvousTest, AMatchedRndvCompletesTheMatchAndHandsTheReadToTheOwner) {
  AddTag(0x42, 64);
  ReceiveTm tm{};
  const transport::RendezvousRead read = Receive(Rndv(0x42, 48, 8), &tm);
  EXPECT_EQ(tm.mode, ReceiveTm::kRndvRead);
  EXPECT_TRUE(Untouched());  // nothing of the message lands: the READ brings the data
  transport::Completion c;
  transport::TmInfo info;
  ASSERT_EQ(cq_->Poll(&c, 1, &info), 1);
  EXPECT_EQ(c.status, wc_status::kSuccess);
  EXPECT_EQ(c.opcode, transport::wc_opcode::kTmRecv);
  EXPECT_EQ(c.wc_flags, wc_flag::kTmMatch);
  EXPECT_EQ(c.wr_id, 9u);
  EXPECT_EQ(info.tag, 0x42u);
  EXPECT_EQ(info.priv, 0x55u);
  EXPECT_EQ(read.qp_num, kQpn);
  EXPECT_EQ(read.src_qp, 0x99u);
  EXPECT_EQ(read.va, 0xabcdef000ull);
  EXPECT_EQ(read.rkey, 0x77u);
  EXPECT_EQ(read.len, 48u);
  EXPECT_EQ(read.wr_id, 9u);
  EXPECT_EQ(read.buffer.addr, reinterpret_cast<uint64_t>(buf_));
  EXPECT_EQ(read.buffer.lkey, mr_->lkey());
  EXPECT_EQ(read.tag, 0x42u);
  EXPECT_EQ(read.app_ctx, 0x55u);
  transport::Responder::StartRendezvous(target_, read);
  ASSERT_FALSE(issuer_.issued.empty());
  EXPECT_EQ(issuer_.issued.back().va, 0xabcdef000ull);
  EXPECT_EQ(cq_->Poll(&c, 1), 0);  // the second completion is the READ's
}

TEST_F(ResponderRendezvousTest, ALenBeyondTheTagsBufferIsALocalLengthErrorWithoutARead) {
  AddTag(0x42, 32);
  ReceiveTm tm{};
  const transport::RendezvousRead read = Receive(Rndv(0x42, 33), &tm);
  EXPECT_EQ(read.qp_num, 0u);  // no READ
  transport::Completion c[2];
  ASSERT_EQ(cq_->Poll(c, 2), 2);
  EXPECT_EQ(c[0].wc_flags, wc_flag::kTmMatch);
  EXPECT_EQ(c[1].status, wc_status::kLocLenErr);
  EXPECT_EQ(c[1].wc_flags, 0u);
  EXPECT_EQ(c[1].wr_id, 9u);
  EXPECT_NE(target_.e_.remote_error.load(), 0u);  // the QP enters ERR, as on the same host
  EXPECT_TRUE(Untouched());
}

TEST_F(ResponderRendezvousTest, AQpThatCannotReadLeavesTheRendezvousToTheApplication) {
  issuer_.ready = false;  // e.g. not in RTS: mlx5's software rendezvous
  AddTag(0x42, 64);
  ReceiveTm tm{};
  Receive(Rndv(0x42, 48), &tm);
  EXPECT_EQ(tm.mode, ReceiveTm::kRndvSoftware);
  transport::Completion c;
  ASSERT_EQ(cq_->Poll(&c, 1), 1);
  EXPECT_EQ(c.status, wc_status::kTmRndvIncomplete);
  EXPECT_EQ(c.byte_len, 16u);  // the RVH, in the tag's buffer
  EXPECT_EQ(Be32(buf_ + 12), 48u);
  EXPECT_TRUE(issuer_.issued.empty());
}

TEST_F(ResponderRendezvousTest, AFirstPacketWithoutAWholeRvhIsTheApplications) {
  AddTag(0x42, 64);
  ReceiveTm tm{};
  Request r = Rndv(0x42, 48);
  piece_.iov_len = r.length = 16 + 15;
  Receive(r, &tm);
  EXPECT_EQ(tm.mode, ReceiveTm::kRndvSoftware);
}

TEST_F(ResponderRendezvousTest, AReadTheOwnerRefusesCompletesTheTagInError) {
  issuer_.accept = false;
  AddTag(0x42, 64);
  ReceiveTm tm{};
  const transport::RendezvousRead read = Receive(Rndv(0x42, 48), &tm);
  transport::Responder::StartRendezvous(target_, read);
  transport::Completion c[2];
  ASSERT_EQ(cq_->Poll(c, 2), 2);
  EXPECT_EQ(c[1].status, wc_status::kLocQpOpErr);
  EXPECT_EQ(c[1].opcode, transport::wc_opcode::kTmRecv);
  EXPECT_NE(target_.e_.remote_error.load(), 0u);
}

}  // namespace
}  // namespace softverbs::core
