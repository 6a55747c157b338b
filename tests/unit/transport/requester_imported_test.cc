// The requester's local SGEs through an lkey imported from another process (imported_key.h):
// written when a READ or atomic is answered, on this host (the response lands in a bounce, then
// in the owner's memory) and from the wire (OnResponseData / OnReply). The MR is this process's;
// the QP is configured as another process's, so the lkey is an import for it.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <mutex>
#include <vector>

#include "core/mr.h"
#include "tests/unit/transport/requester_fixture.h"
#include "transport/codes.h"
#include "transport/requester.h"

namespace softverbs::core {
namespace {

using transport::Reply;
using transport::ReplyCode;
using transport::Request;
using transport::SendWr;
using transport::WrOpcode;
using transport::wc_status::kLocProtErr, transport::wc_status::kSuccess;

// Answers each request at once with `answer`, or leaves it pending for the test to answer
// through `sink`, as the wire does.
struct ImportedLink : transport::Link {
  void Attach(transport::ReplySink* s) override { sink = s; }
  Reply Carry(const Request& r) override {
    seen.push_back(r);
    return answer ? answer(r) : Reply::Of(ReplyCode::kPending);
  }
  void CarryMulticast(const Request&, uint32_t) override {}
  std::function<Reply(const Request&)> answer;
  std::vector<Request> seen;
  transport::ReplySink* sink = nullptr;
};

// buf_ is page aligned: iova 0x5000 is at the same page offset as its address.
class RequesterImportedTest : public requester_testing::RequesterFixture<ImportedLink, ImportedLink, 256, 4096> {
 protected:
  void Start(uint32_t access, bool on_host) {
    mr_ = std::move(Mr::Register(*pd_, {reinterpret_cast<uint64_t>(buf_), sizeof(buf_), 0x5000, access}).value());
    transport::RequesterConfig c = BaseConfig(transport::qp_type::kRc, /*timeout=*/14, /*retry_cnt=*/7);
    c.process_slot = context_->local().slot() + 1;  // the QP of another process on the shared PD
    c.dest_on_host = on_host;
    c.path_mtu = 1024;
    c.max_rd_atomic = 4;
    c.max_send_wr = 16;
    c.max_send_sge = 4;
    requester_.Configure(c);
  }
  SendWr Wr(WrOpcode op, uint64_t iova, uint32_t length) {
    SendWr w = MakeWr(1, op, length);
    w.sge[0].addr = iova;
    return w;
  }
  uint32_t Status0() {
    std::lock_guard lock(qp_.mu);
    return qp_.completions.empty() ? 0xffff : qp_.completions[0].status;
  }
};

TEST_F(RequesterImportedTest, AReadOnThisHostLandsInTheOwnersMemory) {
  Start(access::kLocalWrite, true);
  host_.answer = [](const Request& r) {  // the responder fills the request's local pieces
    uint8_t v = 0x61;
    for (size_t i = 0; i < r.local_count; ++i)
      for (size_t j = 0; j < r.local[i].iov_len; ++j) static_cast<uint8_t*>(r.local[i].iov_base)[j] = v++;
    return Reply::Of(ReplyCode::kAck);
  };
  ASSERT_TRUE(requester_.Post(Wr(WrOpcode::kRdmaRead, 0x5000 + 10, 4), transport::qp_state::kRts).ok());
  EXPECT_EQ(Status0(), kSuccess);
  EXPECT_EQ(memcmp(buf_ + 10, "abcd", 4), 0);
  EXPECT_EQ(buf_[9] | buf_[14], 0);
}

TEST_F(RequesterImportedTest, AnAtomicOnThisHostLandsTheOriginalValue) {
  Start(access::kLocalWrite, true);
  host_.answer = [](const Request&) {
    Reply r = Reply::Of(ReplyCode::kAck);
    r.original = 0x1122334455667788;
    return r;
  };
  ASSERT_TRUE(requester_.Post(Wr(WrOpcode::kAtomicCmpSwp, 0x5000 + 64, 8), transport::qp_state::kRts).ok());
  EXPECT_EQ(Status0(), kSuccess);
  uint64_t got;
  memcpy(&got, buf_ + 64, 8);
  EXPECT_EQ(got, 0x1122334455667788u);
}

TEST_F(RequesterImportedTest, FromTheWireTheResponseAndTheOriginalLandThere) {
  Start(access::kLocalWrite, false);
  ASSERT_TRUE(requester_.Post(Wr(WrOpcode::kRdmaRead, 0x5000, 6), transport::qp_state::kRts).ok());
  ASSERT_EQ(wire_.seen.size(), 1u);
  const uint8_t data[] = {'w', 'i', 'r', 'e', 'd', '!'};
  wire_.sink->OnResponseData(wire_.seen[0].ticket, 3, {data + 3, 3});
  wire_.sink->OnResponseData(wire_.seen[0].ticket, 0, {data, 3});
  wire_.sink->OnReply(wire_.seen[0].ticket, Reply::Of(ReplyCode::kAck));
  EXPECT_EQ(Status0(), kSuccess);
  EXPECT_EQ(memcmp(buf_, data, 6), 0);
  ASSERT_TRUE(requester_.Post(Wr(WrOpcode::kAtomicFetchAdd, 0x5000 + 128, 8), transport::qp_state::kRts).ok());
  ASSERT_EQ(wire_.seen.size(), 2u);
  Reply ack = Reply::Of(ReplyCode::kAck);
  ack.original = 42;
  wire_.sink->OnReply(wire_.seen[1].ticket, ack);
  uint64_t got;
  memcpy(&got, buf_ + 128, 8);
  EXPECT_EQ(got, 42u);
}

TEST_F(RequesterImportedTest, WithoutLocalWriteNothingIsSentNorWritten) {
  Start(access::kRemoteRead, true);
  host_.answer = [](const Request&) { return Reply::Of(ReplyCode::kAck); };
  ASSERT_TRUE(requester_.Post(Wr(WrOpcode::kRdmaRead, 0x5000, 8), transport::qp_state::kRts).ok());
  EXPECT_TRUE(host_.seen.empty());
  EXPECT_EQ(Status0(), kLocProtErr);
}

TEST_F(RequesterImportedTest, AReadBeyondTheMrIsRefusedWhenPosted) {
  Start(access::kLocalWrite, true);
  host_.answer = [](const Request&) { return Reply::Of(ReplyCode::kAck); };
  ASSERT_TRUE(requester_.Post(Wr(WrOpcode::kRdmaRead, 0x5000 + 250, 8), transport::qp_state::kRts).ok());
  EXPECT_TRUE(host_.seen.empty());
  EXPECT_EQ(Status0(), kLocProtErr);
}

TEST_F(RequesterImportedTest, AnMrDeregisteredBeforeTheResponseFailsTheRead) {
  Start(access::kLocalWrite, false);
  ASSERT_TRUE(requester_.Post(Wr(WrOpcode::kRdmaRead, 0x5000, 4), transport::qp_state::kRts).ok());
  ASSERT_EQ(wire_.seen.size(), 1u);
  mr_.reset();  // the exporter's ibv_dereg_mr: nothing is pinned between packets
  const uint8_t data[] = {1, 2, 3, 4};
  wire_.sink->OnResponseData(wire_.seen[0].ticket, 0, {data, 4});
  wire_.sink->OnReply(wire_.seen[0].ticket, Reply::Of(ReplyCode::kAck));
  EXPECT_EQ(Status0(), kLocProtErr);
  EXPECT_EQ(buf_[0], 0);
}

}  // namespace
}  // namespace softverbs::core
