// The responder's side of a tag matching rendezvous from another host (responder_rendezvous.cc):
// a matched RNDV's packets against a fake target and a fake issuer standing for the QP's owner.
#include <gtest/gtest.h>

#include <cstring>
#include <optional>

#include "base/big_endian.h"
#include "core/cq.h"
#include "core/mr.h"
#include "tests/unit/core/test_context.h"
#include "tests/unit/transport/fake_target.h"
#include "transport/codes.h"
#include "transport/rendezvous.h"
#include "transport/responder.h"

namespace softverbs::core {
namespace {

using transport::ReceiveTm;
using transport::ReplyCode;
using transport::Request;
using transport::TakenWqe;
using transport::WrOpcode;
namespace wc_flag = transport::wc_flag;
namespace wc_status = transport::wc_status;

constexpr uint32_t kQpn = 0x1234;

struct FakeIssuer : transport::RendezvousIssuer {
  bool CanIssueRendezvous() const override { return ready; }
  bool IssueRendezvous(const transport::RendezvousRead& read) override {
    issued = read;
    return accept;
  }
  bool ready = true, accept = true;
  std::optional<transport::RendezvousRead> issued;
};

class ResponderRendezvousTest : public CoreTest {
 protected:
  ResponderRendezvousTest() : target_(context_->local()) {
    cq_ = std::move(Cq::Create(*context_, 64, nullptr, 0).value());
    rq_ = std::move(transport::RecvQueue::Create(context_->local(), 16, 1).value());
    mr_ = std::move(Mr::Register(*pd_, {reinterpret_cast<uint64_t>(buf_), sizeof(buf_), reinterpret_cast<uint64_t>(buf_),
                                        access::kLocalWrite | access::kRemoteRead})
                        .value());
    table_ref_ = context_->local().Allocate(transport::TagTableBytes(4)).value();
    table_ = static_cast<transport::TagTable*>(context_->local().At(table_ref_));
    memset(static_cast<void*>(table_), 0, transport::TagTableBytes(4));
    transport::TagTableInit(*table_, 4);
    rq_->ring().tm = table_ref_;
    transport::QpEndpoint& e = target_.e_;
    e.state.store(transport::qp_state::kRts);
    e.qp_num = kQpn;
    e.type = transport::qp_type::kRc;
    e.pd = pd_->host_id();
    e.recv_cq = cq_->ring_ref();
    e.recv_queue = rq_->ref();
    e.async_fd = -1;
    transport::RegisterRendezvousIssuer(kQpn, &issuer_);
  }
  ~ResponderRendezvousTest() override {
    transport::UnregisterRendezvousIssuer(kQpn, &issuer_);
    rq_->ring().tm = {};
    context_->local().Free(table_ref_, transport::TagTableBytes(4));
  }
  void AddTag(uint64_t tag, uint32_t length) {
    ASSERT_TRUE(transport::TagAdd(*table_, {tag, ~0ull, 9, reinterpret_cast<uint64_t>(buf_), length, mr_->lkey(), 1}).ok);
  }
  // The first packet of an RNDV: TMH (tag, app_ctx 0x55) then the RVH (va, rkey, len) and `extra` bytes.
  Request Rndv(uint64_t tag, uint32_t len, size_t extra = 0) {
    transport::WriteTmh(transport::TmHeader{transport::kTmhRndv, 0x55, tag}, payload_);
    PutBe64(payload_ + 16, 0xabcdef000ull);
    PutBe32(payload_ + 24, 0x77);
    PutBe32(payload_ + 28, len);
    memset(payload_ + 32, 0xee, extra);
    piece_ = {payload_, 32 + extra};
    Request r;
    r.qp_type = transport::qp_type::kRc;
    r.opcode = WrOpcode::kSend;
    r.src_qp = 0x99;
    r.dest_qp = kQpn;
    r.local = &piece_;
    r.local_count = 1;
    r.length = piece_.iov_len;
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

  uint8_t buf_[256] = {};
  uint8_t payload_[128] = {};
  iovec piece_{};
  FakeIssuer issuer_;
  transport::FakeTarget target_;
  std::unique_ptr<Cq> cq_;
  std::unique_ptr<transport::RecvQueue> rq_;
  std::unique_ptr<Mr> mr_;
  fabric::SharedRef table_ref_{};
  transport::TagTable* table_ = nullptr;
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
  ASSERT_TRUE(issuer_.issued.has_value());
  EXPECT_EQ(issuer_.issued->va, 0xabcdef000ull);
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
  EXPECT_FALSE(issuer_.issued.has_value());
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
