// The RC responder (transport/wire/rc_responder.h) against a fake target, seen from its response
// path: what it answers, and through which path -- plain ACKs may be coalesced by the fabric,
// every other response is sent at once -- with the QP's counters.
#include "transport/wire/rc_responder.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/mr.h"
#include "tests/unit/core/test_context.h"
#include "tests/unit/transport/fake_target.h"
#include "transport/codes.h"
#include "tests/unit/transport/wire/join_datagrams.h"
#include "tests/unit/transport/wire/wire_qp.h"

namespace softverbs::core {
namespace {

namespace packet = fabric::packet;
using transport::Request;
using transport::WrOpcode;

using transport::qp_type::kRc;

class RcResponderPathTest : public CoreTest {
 protected:
  RcResponderPathTest() : target_(context_->local()) {
    mr_ = std::move(Mr::Register(*pd_, {reinterpret_cast<uint64_t>(buf_), sizeof(buf_), reinterpret_cast<uint64_t>(buf_),
                                        access::kLocalWrite | access::kRemoteWrite})
                        .value());
    transport::QpEndpoint& e = target_.e_;
    wire_testing::ConnectWireQp(e, kRc, pd_->host_id());
    e.access = access::kRemoteWrite;
    e.wire.epsn = 100;
    flow_ = wire_testing::RequestFlow();
    path_.flow = wire_testing::ResponseFlow();
    path_.send = [this](std::span<const iovec> pieces, std::span<const uint16_t> counts) {
      for (const std::vector<uint8_t>& d : transport::JoinDatagrams(pieces, counts)) sent_.push_back(Decode(d));
      return Status::Ok();
    };
    path_.coalesce_ack = [this](std::span<const uint8_t> ack) { held_.push_back(Decode(ack)); };
  }
  struct Response {
    uint8_t opcode = 0, syndrome = 0;
    uint32_t psn = 0, dest_qp = 0;
  };
  Response Decode(std::span<const uint8_t> bytes) {
    auto p = packet::Parse(bytes, &path_.flow);
    EXPECT_TRUE(p.ok()) << p.status().rule();
    if (!p.ok()) return {};
    return {p->hdr.bth.opcode, p->hdr.aeth.syndrome, p->hdr.bth.psn, p->hdr.bth.dest_qp};
  }
  // The packets of an RC WRITE of `length` bytes at offset 0 of buf_, PSNs from `psn`.
  std::vector<std::vector<uint8_t>> Write(uint32_t length, uint32_t psn) {
    iovec piece{message_, length};
    Request r = wire_testing::MessageTo(kRc, WrOpcode::kRdmaWrite, &piece, psn);
    r.remote_addr = reinterpret_cast<uint64_t>(buf_);
    r.rkey = mr_->rkey();
    return wire_testing::BuildPackets(r, flow_);
  }
  void Receive(const std::vector<uint8_t>& bytes) {
    auto parsed = packet::Parse(bytes, &flow_);
    ASSERT_TRUE(parsed.ok()) << parsed.status().rule();
    transport::RcResponder::Receive(target_, *parsed, path_);
  }
  const transport::WireResponderCounters& counters() { return target_.e_.wire.counters; }

  uint8_t buf_[4096] = {};
  uint8_t message_[1024] = {};
  packet::IpUdpInfo flow_;
  transport::ResponsePath path_;
  std::vector<Response> sent_, held_;
  transport::FakeTarget target_;
  std::unique_ptr<Mr> mr_;
};

TEST_F(RcResponderPathTest, APlainAckMayBeCoalesced) {
  for (const auto& p : Write(600, 100)) Receive(p);  // FIRST, MIDDLE, LAST: AckReq on the last
  EXPECT_TRUE(sent_.empty());
  ASSERT_EQ(held_.size(), 1u);
  EXPECT_EQ(held_[0].opcode, packet::op::kRc | packet::op::kAcknowledge);
  EXPECT_EQ(held_[0].syndrome, transport::syndrome::kAck);
  EXPECT_EQ(held_[0].psn, 102u);  // the message's last PSN
  EXPECT_EQ(held_[0].dest_qp, 0x777u);
  EXPECT_EQ(counters().packets.load(), 3u);
  EXPECT_EQ(counters().acks.load(), 1u);
}

// IBA 9.7.5.1.1 / rxe: a PSN ahead of the one expected is answered by one sequence NAK, sent at
// once (never held), and not repeated until the gap is filled.
TEST_F(RcResponderPathTest, AGapIsOneSequenceNakSentAtOnce) {
  auto packets = Write(600, 100);
  Receive(packets[1]);
  Receive(packets[2]);
  ASSERT_EQ(sent_.size(), 1u);
  EXPECT_EQ(sent_[0].syndrome, transport::syndrome::kPsnSequence);
  EXPECT_EQ(sent_[0].psn, 100u);  // names the PSN expected
  EXPECT_TRUE(held_.empty());
  EXPECT_EQ(counters().out_of_sequence.load(), 2u);
  EXPECT_EQ(counters().naks_sequence.load(), 1u);
}

// C9-105: a duplicate asking for an ACK is acknowledged with the last PSN received.
TEST_F(RcResponderPathTest, ADuplicateIsAcknowledgedAgain) {
  auto packets = Write(200, 100);
  Receive(packets[0]);
  Receive(packets[0]);
  ASSERT_EQ(held_.size(), 2u);
  EXPECT_EQ(held_[1].psn, 100u);
  EXPECT_EQ(counters().duplicates.load(), 1u);
}

// IBA 9.8.2 / rxe check_op_seq: a MIDDLE with no message in progress is an invalid request,
// NAKed at once.
TEST_F(RcResponderPathTest, AMiddleWithoutAFirstIsNakedAtOnce) {
  auto packets = Write(600, 99);  // FIRST at 99, MIDDLE at 100 (the PSN expected)
  Receive(packets[1]);
  ASSERT_EQ(sent_.size(), 1u);
  EXPECT_EQ(sent_[0].syndrome, transport::syndrome::kInvalidRequest);
  EXPECT_TRUE(held_.empty());
  EXPECT_EQ(counters().naks_error.load(), 1u);
}

// Without a coalescing hook every ACK is sent at once.
TEST_F(RcResponderPathTest, WithoutAHookAcksAreSent) {
  path_.coalesce_ack = nullptr;
  for (const auto& p : Write(100, 100)) Receive(p);
  ASSERT_EQ(sent_.size(), 1u);
  EXPECT_EQ(sent_[0].syndrome, transport::syndrome::kAck);
}

}  // namespace
}  // namespace softverbs::core
