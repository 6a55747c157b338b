// The RC responder's packet front end with a matched RNDV (transport/wire/rc_responder.h,
// transport/rendezvous.h): the SEND is acknowledged at once (never held for coalescing) and the
// READ is handed to the QP's owner, an eager message's ACK may still be held.
#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <vector>

#include "base/big_endian.h"
#include "core/cq.h"
#include "core/mr.h"
#include "tests/unit/core/test_context.h"
#include "tests/unit/transport/fake_target.h"
#include "tests/unit/transport/wire/join_datagrams.h"
#include "transport/codes.h"
#include "transport/rendezvous.h"
#include "transport/wire/rc_responder.h"
#include "transport/wire/wire_packets.h"

namespace softverbs::core {
namespace {

namespace packet = fabric::packet;
constexpr uint32_t kQpn = 0x1234;

struct RcFakeIssuer : transport::RendezvousIssuer {
  bool CanIssueRendezvous() const override { return true; }
  bool IssueRendezvous(const transport::RendezvousRead& read) override {
    issued.push_back(read);
    return true;
  }
  std::vector<transport::RendezvousRead> issued;
};

class RcResponderRendezvousTest : public CoreTest {
 protected:
  RcResponderRendezvousTest() : target_(context_->local()) {
    cq_ = std::move(Cq::Create(*context_, 16, nullptr, 0).value());
    rq_ = std::move(transport::RecvQueue::Create(context_->local(), 4, 1).value());
    mr_ = std::move(Mr::Register(*pd_, {reinterpret_cast<uint64_t>(buf_), sizeof(buf_), reinterpret_cast<uint64_t>(buf_),
                                        access::kLocalWrite})
                        .value());
    table_ref_ = context_->local().Allocate(transport::TagTableBytes(4)).value();
    table_ = static_cast<transport::TagTable*>(context_->local().At(table_ref_));
    memset(static_cast<void*>(table_), 0, transport::TagTableBytes(4));
    transport::TagTableInit(*table_, 4);
    rq_->ring().tm = table_ref_;
    transport::QpEndpoint& e = target_.e_;
    e.wire.lock.Init();
    e.state.store(transport::qp_state::kRts);
    e.qp_num = kQpn;
    e.type = transport::qp_type::kRc;
    e.mtu = 256;
    e.dest_qp_num = 0x777;
    e.pd = pd_->host_id();
    e.recv_cq = cq_->ring_ref();
    e.recv_queue = rq_->ref();
    e.async_fd = -1;
    const uint8_t a[4] = {10, 0, 0, 2}, b[4] = {10, 0, 0, 1};
    flow_ = packet::IpUdpInfo::V4(a, b, 4791);
    path_.flow = packet::IpUdpInfo::V4(b, a, 4791);
    path_.send = [this](std::span<const iovec> pieces, std::span<const uint16_t> counts) {
      sent_ += transport::JoinDatagrams(pieces, counts).size();
      return Status::Ok();
    };
    path_.coalesce_ack = [this](std::span<const uint8_t>) { ++held_; };
    transport::RegisterRendezvousIssuer(kQpn, &issuer_);
  }
  ~RcResponderRendezvousTest() override {
    transport::UnregisterRendezvousIssuer(kQpn, &issuer_);
    rq_->ring().tm = {};
    context_->local().Free(table_ref_, transport::TagTableBytes(4));
  }
  // One SEND_ONLY at PSN `psn` of a TMH (`op`, `tag`) and an RVH naming 64 bytes.
  void Send(uint8_t op, uint64_t tag, uint32_t psn) {
    uint8_t bytes[32];
    transport::WriteTmh(transport::TmHeader{op, 3, tag}, bytes);
    PutBe64(bytes + 16, 0x10000);
    PutBe32(bytes + 24, 0x99);
    PutBe32(bytes + 28, 64);
    iovec piece{bytes, sizeof bytes};
    transport::Request r;
    r.qp_type = transport::qp_type::kRc;
    r.opcode = transport::WrOpcode::kSend;
    r.dest_qp = kQpn;
    r.psn = psn;
    r.mtu = 256;
    r.local = &piece;
    r.local_count = 1;
    r.length = sizeof bytes;
    uint8_t buffer[512];
    ASSERT_TRUE(transport::BuildMessage(r, flow_, buffer, [&](std::span<const uint8_t> p) {
                  std::vector<uint8_t> datagram(p.begin(), p.end());
                  auto parsed = packet::Parse(datagram, &flow_);
                  EXPECT_TRUE(parsed.ok());
                  if (parsed.ok()) transport::RcResponder::Receive(target_, *parsed, path_);
                  return Status::Ok();
                }).ok());
  }
  void AddTag(uint64_t tag) {
    ASSERT_TRUE(transport::TagAdd(*table_, {tag, ~0ull, 5, reinterpret_cast<uint64_t>(buf_), 128, mr_->lkey(), 1}).ok);
  }

  uint8_t buf_[256] = {};
  packet::IpUdpInfo flow_;
  transport::ResponsePath path_;
  size_t sent_ = 0, held_ = 0;
  RcFakeIssuer issuer_;
  transport::FakeTarget target_;
  std::unique_ptr<Cq> cq_;
  std::unique_ptr<transport::RecvQueue> rq_;
  std::unique_ptr<Mr> mr_;
  fabric::SharedRef table_ref_{};
  transport::TagTable* table_ = nullptr;
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
