// The wire link's matching of responses to RC messages (transport/wire/wire_link.h) on a lossy,
// duplicating, reordering path: sequence NAKs that are late copies, forward progress, and READ
// responses that arrive out of order. The messages are carried to a loopback GID, which no
// wire port serves: nothing leaves, and the responses are handed to OnResponse by the test.
#include "transport/wire/wire_link.h"

#include <gtest/gtest.h>

#include <vector>

#include "tests/unit/core/test_context.h"
#include "transport/wire/wire_packets.h"

namespace softverbs::core {
namespace {

namespace packet = fabric::packet;
using transport::Reply;
using transport::ReplyCode;
using transport::WrOpcode;

struct Sink : transport::ReplySink {
  void OnReply(uint64_t ticket, const Reply& reply) override { replies.push_back({ticket, reply}); }
  void OnResponseData(uint64_t ticket, uint64_t offset, std::span<const uint8_t> bytes) override {
    data.push_back({ticket, offset, bytes.size()});
  }
  struct Data {
    uint64_t ticket, offset, size;
  };
  std::vector<std::pair<uint64_t, Reply>> replies;
  std::vector<Data> data;
};

class WireLinkTest : public CoreTest {
 protected:
  WireLinkTest() : link_(transport::WireFabric::Get(context_->local())) {
    link_.Attach(&sink_);
    // ::ffff:127.0.0.1 both ways: no wire port serves loopback, so nothing is sent.
    for (auto* g : {addressing_.sgid, addressing_.dgid}) {
      g[10] = g[11] = 0xff;
      g[12] = 127, g[15] = 1;
    }
  }
  ~WireLinkTest() override { link_.Attach(nullptr); }
  void Carry(uint64_t ticket, WrOpcode op, uint32_t psn, uint64_t length) {
    transport::Request r;
    r.qp_type = 2;
    r.opcode = op;
    r.src_qp = 0x300;
    r.dest_qp = 0x301;
    r.psn = psn;
    r.mtu = 1024;
    r.ticket = ticket;
    r.length = length;
    r.local = &piece_;
    r.local_count = 1;
    r.addressing = &addressing_;
    (void)link_.Carry(r);
  }
  void Respond(uint8_t opcode, uint32_t psn, uint8_t syndrome = transport::syndrome::kAck, size_t payload = 0) {
    packet::PacketHeaders h;
    h.bth.opcode = static_cast<uint8_t>(packet::op::kRc | opcode);
    h.bth.dest_qp = 0x300;
    h.bth.psn = psn;
    h.aeth = {syndrome, 0};
    std::vector<uint8_t> bytes(payload + 64), body(payload, 0x42);
    const packet::ConstBuffer piece{body.data(), body.size()};
    auto n = packet::Build(h, {&piece, payload ? 1u : 0u}, flow_, bytes);
    ASSERT_TRUE(n.ok()) << n.status().rule();
    bytes.resize(*n);
    auto parsed = packet::Parse(bytes);
    ASSERT_TRUE(parsed.ok());
    link_.OnResponse(*parsed);
  }
  void Nak(uint32_t psn) { Respond(packet::op::kAcknowledge, psn, transport::syndrome::kPsnSequence); }

  uint8_t bytes_[8192] = {};
  iovec piece_{bytes_, sizeof bytes_};
  transport::Addressing addressing_;
  packet::IpUdpInfo flow_ = packet::IpUdpInfo::V4(addressing_.sgid + 12, addressing_.dgid + 12, 4791);
  Sink sink_;
  transport::WireLink link_;
};

TEST_F(WireLinkTest, ALateCopyOfASequenceNakIsIgnored) {
  // The responder NAKs a gap once, until a packet in sequence arrives: a sequence NAK not
  // beyond the last one for the same message is a duplicate or a late copy. It used to make
  // the requester carry everything again and spend a retry each time.
  Carry(1, WrOpcode::kSend, 100, 4 * 1024);  // PSNs 100..103
  Nak(101);
  ASSERT_EQ(sink_.replies.size(), 1u);
  EXPECT_EQ(sink_.replies[0].second.code, ReplyCode::kSequenceError);
  EXPECT_TRUE(sink_.replies[0].second.progress);  // 100 was taken
  Carry(1, WrOpcode::kSend, 100, 4 * 1024);  // go-back-N
  Nak(101);                                  // the NAK's duplicate
  EXPECT_EQ(sink_.replies.size(), 1u);
  Nak(100);  // an older one, late: still nothing, and 101 stays the mark
  Nak(101);
  EXPECT_EQ(sink_.replies.size(), 1u);
  Nak(103);  // further: a new gap, progress
  ASSERT_EQ(sink_.replies.size(), 2u);
  EXPECT_TRUE(sink_.replies[1].second.progress);
  Carry(1, WrOpcode::kSend, 100, 4 * 1024);
  Respond(packet::op::kAcknowledge, 103);
  ASSERT_EQ(sink_.replies.size(), 3u);
  EXPECT_EQ(sink_.replies[2].second.code, ReplyCode::kAck);
}

TEST_F(WireLinkTest, ASequenceNakAtTheFirstPacketIsNoProgress) {
  Carry(1, WrOpcode::kRdmaWrite, 10, 2048);
  Nak(10);
  ASSERT_EQ(sink_.replies.size(), 1u);
  EXPECT_FALSE(sink_.replies[0].second.progress);
}

TEST_F(WireLinkTest, AReadResponseOvertakenAsksForTheReadAgainAtOnce) {
  // rxe check_psn: a READ response beyond the one expected means the ones between are missing;
  // the READ is retried now rather than after the ACK timeout.
  Carry(5, WrOpcode::kRdmaRead, 200, 3 * 1024);  // responses 200..202
  Respond(packet::op::kRdmaReadResponseFirst, 200, transport::syndrome::kAck, 1024);
  ASSERT_EQ(sink_.data.size(), 1u);
  EXPECT_TRUE(sink_.replies.empty());
  Respond(packet::op::kRdmaReadResponseLast, 202, transport::syndrome::kAck, 1024);  // 201 overtaken
  EXPECT_EQ(sink_.data.size(), 1u);  // not placed
  ASSERT_EQ(sink_.replies.size(), 1u);
  EXPECT_EQ(sink_.replies[0].first, 5u);
  EXPECT_EQ(sink_.replies[0].second.code, ReplyCode::kSequenceError);
  Carry(5, WrOpcode::kRdmaRead, 200, 3 * 1024);  // carried again
  // A straggler of the first attempt, before any response of the second: not another retry.
  Respond(packet::op::kRdmaReadResponseLast, 202, transport::syndrome::kAck, 1024);
  EXPECT_EQ(sink_.replies.size(), 1u);
  Respond(packet::op::kRdmaReadResponseFirst, 200, transport::syndrome::kAck, 1024);
  Respond(packet::op::kRdmaReadResponseMiddle, 201, transport::syndrome::kAck, 1024);
  Respond(packet::op::kRdmaReadResponseLast, 202, transport::syndrome::kAck, 1024);
  ASSERT_EQ(sink_.replies.size(), 2u);
  EXPECT_EQ(sink_.replies[1].second.code, ReplyCode::kAck);
  ASSERT_EQ(sink_.data.size(), 4u);
  EXPECT_EQ(sink_.data[3].offset, 2048u);
}

}  // namespace
}  // namespace softverbs::core
