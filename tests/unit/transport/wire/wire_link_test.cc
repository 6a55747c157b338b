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

namespace softverbs::core {
namespace {

class WireLinkPartsTest : public WireLinkTest {
 protected:
  // Carries packets [first, first + count) of an 8-packet SEND at PSN 100 (MTU 1024).
  void CarryPart(uint64_t ticket, uint32_t first, uint32_t count) {
    transport::Request r;
    r.qp_type = 2;
    r.opcode = WrOpcode::kSend;
    r.src_qp = 0x300;
    r.dest_qp = 0x301;
    r.psn = 100;
    r.mtu = 1024;
    r.ticket = ticket;
    r.length = 8 * 1024;
    r.local = &piece_;
    r.local_count = 1;
    r.addressing = &addressing_;
    r.first_packet = first;
    r.packets = count;
    r.ack_every = 2;
    (void)link_.Carry(r);
  }
};

// A SEND carried in parts: an ACK inside it reports how many of its packets the responder took
// (the requester's window moves on), a NAK inside it the packets before the gap, and only the
// ACK of its last packet completes it.
TEST_F(WireLinkPartsTest, AcknowledgementsInsideAMessageReportItsPacketsTaken) {
  CarryPart(1, 0, 4);  // PSNs 100..103
  Respond(packet::op::kAcknowledge, 101);
  ASSERT_EQ(sink_.replies.size(), 1u);
  EXPECT_EQ(sink_.replies[0].second.code, ReplyCode::kPartial);
  EXPECT_EQ(sink_.replies[0].second.acked, 2u);
  CarryPart(1, 4, 4);  // the next part: PSNs 104..107, the same message
  Nak(105);
  ASSERT_EQ(sink_.replies.size(), 2u);
  EXPECT_EQ(sink_.replies[1].second.code, ReplyCode::kSequenceError);
  EXPECT_EQ(sink_.replies[1].second.acked, 5u);  // 100..104 taken
  CarryPart(1, 5, 3);  // go-back-N from the gap
  Respond(packet::op::kAcknowledge, 106);
  ASSERT_EQ(sink_.replies.size(), 3u);
  EXPECT_EQ(sink_.replies[2].second.code, ReplyCode::kPartial);
  EXPECT_EQ(sink_.replies[2].second.acked, 7u);
  Respond(packet::op::kAcknowledge, 107);
  ASSERT_EQ(sink_.replies.size(), 4u);
  EXPECT_EQ(sink_.replies[3].second.code, ReplyCode::kAck);
}

// Where the requester asks for acknowledgements in a part: every ack_every packets, at the end
// of the part and at the end of the message (BTH AckReq, IBA 9.7.6.1.1).
TEST(WirePartsAckReqTest, AckReqEveryFewPacketsAndAtEachPartsEnd) {
  uint8_t bytes[10 * 256] = {};
  iovec piece{bytes, sizeof bytes};
  transport::Request r;
  r.qp_type = 2;
  r.opcode = WrOpcode::kRdmaWrite;
  r.psn = 0;
  r.mtu = 256;
  r.length = sizeof bytes;  // 10 packets
  r.local = &piece;
  r.local_count = 1;
  r.first_packet = 1;
  r.packets = 6;  // packets 1..6
  r.ack_every = 4;
  const uint8_t a[4] = {10, 0, 0, 1}, b[4] = {10, 0, 0, 2};
  const auto flow = packet::IpUdpInfo::V4(a, b, 4791);
  std::vector<uint8_t> wrap(6 * transport::kWrapSlot);
  std::vector<iovec> pieces;
  std::vector<uint16_t> counts;
  ASSERT_TRUE(transport::GatherMessagePackets(r, flow, 1, 6, wrap, pieces, counts).ok());
  std::vector<bool> ack_req;
  for (size_t k = 0; k < 6; ++k) ack_req.push_back((wrap[k * transport::kWrapSlot + 8] & 0x80) != 0);  // BTH byte 8
  EXPECT_EQ(ack_req, (std::vector<bool>{false, false, true, false, false, true}));  // packet 3 (4th), packet 6 (part end)
  ASSERT_TRUE(transport::GatherMessagePackets(r, flow, 9, 1, wrap, pieces, counts).ok());
  EXPECT_NE(wrap[8] & 0x80, 0);  // the message's last
}

}  // namespace
}  // namespace softverbs::core
