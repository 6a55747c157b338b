// The RC responder's packet front end with a matched RNDV (transport/wire/rc_responder.h,
// transport/rendezvous.h): the SEND is acknowledged at once (never held for coalescing) and the
// READ is handed to the QP's owner, an eager message's ACK may still be held.
#include <gtest/gtest.h>

#include <vector>

#include "tests/unit/transport/rendezvous_fixture.h"
#include "tests/unit/transport/wire/join_datagrams.h"
#include "tests/unit/transport/wire/wire_qp.h"
#include "transport/codes.h"
#include "transport/wire/rc_responder.h"

namespace softverbs::core {
namespace {

namespace packet = fabric::packet;

class RcResponderRendezvousTest : public rendezvous_testing::TmRcQpFixture {
 protected:
  RcResponderRendezvousTest() : TmRcQpFixture(16, 4, access::kLocalWrite) {
    transport::QpEndpoint& e = target_.e_;
    e.wire.lock.Init();
    e.mtu = 256;
    e.dest_qp_num = 0x777;
    flow_ = wire_testing::RequestFlow();
    path_.flow = wire_testing::ResponseFlow();
    path_.send = [this](std::span<const iovec> pieces, std::span<const uint16_t> counts) {
      sent_ += transport::JoinDatagrams(pieces, counts).size();
      return Status::Ok();
    };
    path_.coalesce_ack = [this](std::span<const uint8_t>) { ++held_; };
  }
  // One SEND_ONLY at PSN `psn` of a TMH (`op`, `tag`) and an RVH naming 64 bytes.
  void Send(uint8_t op, uint64_t tag, uint32_t psn) {
    uint8_t bytes[32];
    rendezvous_testing::WriteTmhAndRvh(bytes, transport::TmHeader{op, 3, tag}, 0x10000, 0x99, 64);
    iovec piece{bytes, sizeof bytes};
    transport::Request r = SendOf(&piece);
    r.psn = psn;
    r.mtu = 256;
    for (const std::vector<uint8_t>& datagram : wire_testing::BuildPackets(r, flow_)) {
      auto parsed = packet::Parse(datagram, &flow_);
      EXPECT_TRUE(parsed.ok());
      if (parsed.ok()) transport::RcResponder::Receive(target_, *parsed, path_);
    }
  }
  void AddTag(uint64_t tag) { TmRcQpFixture::AddTag(tag, 128, 5); }

  packet::IpUdpInfo flow_;
  transport::ResponsePath path_;
  size_t sent_ = 0, held_ = 0;
};

TEST_F(RcResponderRendezvousTest, AMatchedRndvIsAckedAtOnceThenItsReadGoesToTheOwner) {
  AddTag(0x42);
  Send(transport::kTmhRndv, 0x42, 0);
  EXPECT_EQ(sent_, 1u);  // the ACK, sent before the READ could reach the sender
  EXPECT_EQ(held_, 0u);
  ASSERT_EQ(issuer_.issued.size(), 1u);
  EXPECT_EQ(issuer_.issued[0].va, 0x10000u);
  EXPECT_EQ(issuer_.issued[0].rkey, 0x99u);
  EXPECT_EQ(issuer_.issued[0].len, 64u);
  EXPECT_EQ(issuer_.issued[0].src_qp, 0x777u);  // the connected QP (BTH carries no source)
  transport::Completion c;
  ASSERT_EQ(cq_->Poll(&c, 1), 1);
  EXPECT_EQ(c.wc_flags, transport::wc_flag::kTmMatch);
  EXPECT_EQ(target_.e_.wire.epsn, 1u);
}

TEST_F(RcResponderRendezvousTest, AnEagerMessagesAckMayStillBeHeld) {
  AddTag(0x42);
  Send(transport::kTmhEager, 0x42, 0);
  EXPECT_EQ(sent_, 0u);
  EXPECT_EQ(held_, 1u);
  EXPECT_TRUE(issuer_.issued.empty());
}

}  // namespace
}  // namespace softverbs::core
