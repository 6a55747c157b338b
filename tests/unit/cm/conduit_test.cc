// The conduits an identifier's messages travel (cm/conduit.h, cm/mad_conduit.h): the same-host
// socket, and two MAD conduits joined back to back through their senders (what the wire and the
// CM agents would do between two hosts).
#include "cm/mad_conduit.h"

#include <arpa/inet.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstring>
#include <vector>

#include <gtest/gtest.h>

namespace softverbs::cm {
namespace {

bool HasInput(int fd) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, 0) == 1;
}

sockaddr_storage V4(const char* ip, uint16_t port) {
  sockaddr_storage s{};
  auto* sin = reinterpret_cast<sockaddr_in*>(&s);
  sin->sin_family = AF_INET;
  sin->sin_port = htons(port);
  inet_pton(AF_INET, ip, &sin->sin_addr);
  return s;
}

Gid Mapped(const char* ip) {
  Gid g{};
  g[10] = g[11] = 0xff;
  inet_pton(AF_INET, ip, g.data() + 12);
  return g;
}

TEST(SocketConduitTest, CarriesMessagesAndSeesThePeerGo) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
  SocketConduit a{UniqueFd(sv[0])};
  auto b = std::make_unique<SocketConduit>(UniqueFd(sv[1]));
  Message m;
  m.type = MessageType::kRep;
  m.qpn = 0x123;
  m.psn = 0x456;
  m.private_data_len = 3;
  m.private_data[0] = 'a';
  ASSERT_TRUE(a.Send(m).ok());
  ASSERT_TRUE(HasInput(b->fd()));
  Message got;
  bool closed = true;
  ASSERT_TRUE(b->Receive(&got, &closed).ok());
  EXPECT_FALSE(closed);
  EXPECT_EQ(got.type, MessageType::kRep);
  EXPECT_EQ(got.qpn, 0x123u);
  EXPECT_EQ(got.private_data[0], 'a');
  b.reset();
  ASSERT_TRUE(a.Receive(&got, &closed).ok());
  EXPECT_TRUE(closed);
}

class MadConduitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    mad::MadContext a_ctx;
    a_ctx.local_comm_id = 0x11111111;
    a_ctx.tid = uint64_t{2} << 32 | a_ctx.local_comm_id;
    a_ctx.service_id = mad::ServiceId(mad::PortSpace::kTcp, 7174);
    a_ctx.local_ca_guid = 0xaaaa;
    auto a = MadConduit::Create(Wire(&b_, gid_a_, &sent_by_a_), gid_a_, gid_b_, a_ctx, Hooks(&armed_a_, &disarmed_a_));
    mad::MadContext b_ctx;
    b_ctx.local_comm_id = 0x22222222;
    b_ctx.local_ca_guid = 0xbbbb;
    auto b = MadConduit::Create(Wire(&a_, gid_b_, &sent_by_b_), gid_b_, gid_a_, b_ctx, Hooks(&armed_b_, &disarmed_b_));
    ASSERT_TRUE(a.ok() && b.ok());
    a_ = std::move(a.value());
    b_ = std::move(b.value());
  }
  // Before the logs they write to: an established conduit sends its DREQ when destroyed.
  void TearDown() override {
    b_.reset();
    a_.reset();
  }
  // A sender that checks where the MAD goes, keeps its bytes, decodes it as the peer's agent
  // would and delivers it to `to`.
  MadSender Wire(std::unique_ptr<MadConduit>* to, const Gid& from, std::vector<std::vector<uint8_t>>* log) {
    return [this, to, from, log](const Gid& sgid, const Gid& dgid, std::span<const uint8_t> bytes) {
      EXPECT_EQ(sgid, from);
      EXPECT_EQ(dgid, from == gid_a_ ? gid_b_ : gid_a_);
      log->emplace_back(bytes.begin(), bytes.end());
      auto mad = mad::DecodeMad(bytes);
      if (!mad.ok()) return mad.status();
      if (*to == nullptr) return Status(EPIPE, "the peer's conduit is gone");  // torn down first
      return (*to)->Deliver(*mad, sgid);
    };
  }
  struct Armed {
    uint64_t token;
    Gid sgid, dgid;
    mad::Mad mad;
  };
  // A fake of the wire's guard: what was armed and disarmed.
  static LastWordsHooks Hooks(std::vector<Armed>* armed, std::vector<uint64_t>* disarmed) {
    return {[armed](uint64_t token, const Gid& sgid, const Gid& dgid, std::span<const uint8_t> bytes) {
              auto mad = mad::DecodeMad(bytes);
              EXPECT_TRUE(mad.ok());
              if (mad.ok()) armed->push_back({token, sgid, dgid, *mad});
            },
            [disarmed](uint64_t token) { disarmed->push_back(token); }};
  }
  // REQ (QPN 0x100) from A, REP (QPN 0x200) from B, RTU from A: both sides established.
  void Connect() {
    Message req;
    req.type = MessageType::kReq;
    req.qpn = 0x100;
    req.src = V4("10.0.0.1", 40000);
    req.dst = V4("10.0.0.2", 7174);
    ASSERT_TRUE(a_->Send(req).ok());
    Take(*b_);
    Message rep;
    rep.type = MessageType::kRep;
    rep.qpn = 0x200;
    ASSERT_TRUE(b_->Send(rep).ok());
    Take(*a_);
    Message rtu;
    rtu.type = MessageType::kRtu;
    ASSERT_TRUE(a_->Send(rtu).ok());
    Take(*b_);
  }
  Message Take(MadConduit& c) {
    EXPECT_TRUE(HasInput(c.fd()));
    Message m;
    bool closed = true;
    Status s = c.Receive(&m, &closed);
    EXPECT_TRUE(s.ok()) << s.rule();
    EXPECT_FALSE(closed);
    return m;
  }

  const Gid gid_a_ = Mapped("10.0.0.1"), gid_b_ = Mapped("10.0.0.2");
  std::unique_ptr<MadConduit> a_, b_;
  std::vector<std::vector<uint8_t>> sent_by_a_, sent_by_b_;
  std::vector<Armed> armed_a_, armed_b_;
  std::vector<uint64_t> disarmed_a_, disarmed_b_;
};

TEST_F(MadConduitTest, ReqRepRtuDreqDrep) {
  Message req;
  req.type = MessageType::kReq;
  req.qpn = 0x100;
  req.psn = 0xabcdef;
  req.responder_resources = 1;
  req.initiator_depth = 1;
  req.retry_count = 7;
  req.rnr_retry_count = 7;
  req.gid = gid_a_;
  req.src = V4("10.0.0.1", 40000);
  req.dst = V4("10.0.0.2", 7174);
  req.private_data_len = 5;
  memcpy(req.private_data.data(), "hello", 5);
  ASSERT_TRUE(a_->Send(req).ok());
  // On the wire: rping's REQ shape.
  ASSERT_EQ(sent_by_a_.size(), 1u);
  auto wire = mad::DecodeMad(sent_by_a_[0]);
  ASSERT_TRUE(wire.ok());
  const mad::Req& r = std::get<mad::Req>(wire->body);
  EXPECT_EQ(r.service_id, 0x01061C06u);
  EXPECT_EQ(r.local_comm_id, 0x11111111u);
  EXPECT_EQ(r.primary.local_gid, gid_a_);
  EXPECT_EQ(r.primary.remote_gid, gid_b_);
  EXPECT_EQ(r.primary.local_lid, 0xffff);
  EXPECT_EQ(wire->hdr.tid, (uint64_t{2} << 32) | 0x11111111);
  // At B: the REQ, and what B learnt.
  Message got = Take(*b_);
  EXPECT_EQ(got.type, MessageType::kReq);
  EXPECT_EQ(got.qpn, 0x100u);
  EXPECT_EQ(got.psn, 0xabcdefu);
  EXPECT_EQ(memcmp(got.private_data.data(), "hello", 5), 0);
  EXPECT_EQ(got.gid, gid_a_);
  EXPECT_EQ(ntohs(reinterpret_cast<const sockaddr_in*>(&got.src)->sin_port), 40000);
  EXPECT_EQ(b_->context().remote_comm_id, 0x11111111u);
  EXPECT_FALSE(HasInput(b_->fd()));
  // A retransmits its REQ byte for byte until answered.
  ASSERT_TRUE(a_->Retransmit().ok());
  EXPECT_EQ(sent_by_a_.back(), sent_by_a_[0]);
  EXPECT_FALSE(HasInput(b_->fd()));  // a REQ that comes again is not a new request
  // B's application has not answered yet: B asks for time with an MRA (REQ, 24), and A's timer
  // takes it (cm.c cm_dup_req_handler in MRA_REQ_SENT; cm_mra_handler).
  ASSERT_EQ(sent_by_b_.size(), 1u);
  auto mra_wire = mad::DecodeMad(sent_by_b_[0]);
  ASSERT_TRUE(mra_wire.ok());
  const auto& mra = std::get<mad::Mra>(mra_wire->body);
  EXPECT_EQ(mra.message_mraed, 0);
  EXPECT_EQ(mra.service_timeout, kMraServiceTimeout);
  EXPECT_EQ(mra.local_comm_id, 0x22222222u);
  EXPECT_EQ(mra.remote_comm_id, 0x11111111u);
  EXPECT_EQ(mra_wire->hdr.tid, (uint64_t{2} << 32) | 0x11111111);
  EXPECT_EQ(a_->TakeMraServiceTimeout(), kMraServiceTimeout);
  EXPECT_FALSE(HasInput(a_->fd()));
  // B's REP reuses the REQ's TID and names both comm IDs.
  Message rep;
  rep.type = MessageType::kRep;
  rep.qpn = 0x200;
  rep.psn = 0x123;
  ASSERT_TRUE(b_->Send(rep).ok());
  auto rep_wire = mad::DecodeMad(sent_by_b_.back());
  ASSERT_TRUE(rep_wire.ok());
  EXPECT_EQ(rep_wire->hdr.tid, (uint64_t{2} << 32) | 0x11111111);
  EXPECT_EQ(std::get<mad::Rep>(rep_wire->body).remote_comm_id, 0x11111111u);
  EXPECT_EQ(std::get<mad::Rep>(rep_wire->body).local_ca_guid, 0xbbbbu);
  got = Take(*a_);
  EXPECT_EQ(got.type, MessageType::kRep);
  EXPECT_EQ(got.qpn, 0x200u);
  EXPECT_EQ(got.gid, gid_b_);  // from the datagram's source
  EXPECT_EQ(a_->context().remote_comm_id, 0x22222222u);
  EXPECT_EQ(a_->Retransmit().code(), EINVAL);  // the REP answered the REQ
  // The REQ again (our REP was lost on its way): B sends the same REP again
  // (cm_dup_req_handler); A, which has it already, takes nothing new.
  const size_t reps = sent_by_b_.size();
  auto req_again = mad::DecodeMad(sent_by_a_[0]);
  ASSERT_TRUE(req_again.ok());
  ASSERT_TRUE(b_->Deliver(*req_again, gid_a_).ok());
  ASSERT_EQ(sent_by_b_.size(), reps + 1);
  EXPECT_EQ(sent_by_b_.back(), sent_by_b_[reps - 1]);
  EXPECT_FALSE(HasInput(a_->fd()));
  // RTU, then DREQ / DREP.
  Message rtu;
  rtu.type = MessageType::kRtu;
  ASSERT_TRUE(a_->Send(rtu).ok());
  EXPECT_EQ(Take(*b_).type, MessageType::kRtu);
  EXPECT_EQ(b_->Retransmit().code(), EINVAL);  // the RTU answered the REP
  Message dreq;
  dreq.type = MessageType::kDreq;
  ASSERT_TRUE(a_->Send(dreq).ok());
  auto dreq_wire = mad::DecodeMad(sent_by_a_.back());
  ASSERT_TRUE(dreq_wire.ok());
  EXPECT_EQ(std::get<mad::Dreq>(dreq_wire->body).remote_qpn, 0x200u);  // the REP's QPN
  EXPECT_EQ(Take(*b_).type, MessageType::kDreq);
  Message drep;
  drep.type = MessageType::kDrep;
  ASSERT_TRUE(b_->Send(drep).ok());
  EXPECT_EQ(Take(*a_).type, MessageType::kDrep);
  Message none;
  bool closed = true;
  EXPECT_EQ(a_->Receive(&none, &closed).code(), EAGAIN);
  EXPECT_FALSE(closed);
}

TEST_F(MadConduitTest, RepeatedRepBeforeTheRtuGetsAnMraAndAfterItTheRtu) {
  Message req;
  req.type = MessageType::kReq;
  req.src = V4("10.0.0.1", 40000);
  req.dst = V4("10.0.0.2", 7174);
  ASSERT_TRUE(a_->Send(req).ok());
  Take(*b_);
  Message rep;
  rep.type = MessageType::kRep;
  ASSERT_TRUE(b_->Send(rep).ok());
  EXPECT_EQ(Take(*a_).type, MessageType::kRep);
  // A's application has not read the REP yet when B's timer sends it again: an MRA for the REP.
  ASSERT_TRUE(b_->Retransmit().ok());
  auto mra_wire = mad::DecodeMad(sent_by_a_.back());
  ASSERT_TRUE(mra_wire.ok());
  const auto* mra = std::get_if<mad::Mra>(&mra_wire->body);
  ASSERT_NE(mra, nullptr);
  EXPECT_EQ(mra->message_mraed, 1);  // the REP
  EXPECT_EQ(mra->local_comm_id, 0x11111111u);
  EXPECT_EQ(mra->remote_comm_id, 0x22222222u);
  EXPECT_EQ(b_->TakeMraServiceTimeout(), kMraServiceTimeout);
  EXPECT_FALSE(HasInput(a_->fd()));
  // Once A sent its RTU, a REP that comes again gets the RTU again, not an MRA.
  Message rtu;
  rtu.type = MessageType::kRtu;
  ASSERT_TRUE(a_->Send(rtu).ok());
  Take(*b_);
  const size_t before = sent_by_a_.size();
  auto rep_again = mad::DecodeMad(sent_by_b_.back());
  ASSERT_TRUE(rep_again.ok());
  ASSERT_TRUE(a_->Deliver(*rep_again, gid_b_).ok());
  ASSERT_EQ(sent_by_a_.size(), before + 1);
  EXPECT_EQ(sent_by_a_.back(), sent_by_a_[before - 1]);
}

TEST_F(MadConduitTest, RepeatedReqAfterARejGetsNoMra) {
  Message req;
  req.type = MessageType::kReq;
  req.src = V4("10.0.0.1", 40000);
  req.dst = V4("10.0.0.2", 7174);
  ASSERT_TRUE(a_->Send(req).ok());
  Take(*b_);
  Message rej;
  rej.type = MessageType::kRej;
  ASSERT_TRUE(b_->Send(rej).ok());
  const size_t before = sent_by_b_.size();
  auto req_again = mad::DecodeMad(sent_by_a_[0]);
  ASSERT_TRUE(req_again.ok());
  ASSERT_TRUE(b_->Deliver(*req_again, gid_a_).ok());
  EXPECT_EQ(sent_by_b_.size(), before);  // answered already: the copy is dropped
}

TEST_F(MadConduitTest, AnMraOnlyExtendsTheTimer) {
  mad::Mad mra;
  mra.body = mad::Mra{0x22222222, 0x11111111, 0, 24, {}};
  EXPECT_EQ(a_->mra_service_timeout(), -1);
  ASSERT_TRUE(a_->Deliver(mra, gid_b_).ok());
  EXPECT_EQ(a_->mra_service_timeout(), 24);
  EXPECT_FALSE(HasInput(a_->fd()));
}

TEST_F(MadConduitTest, APrivateDataTooLongIsRefusedBeforeSending) {
  Message req;
  req.type = MessageType::kReq;
  req.src = V4("10.0.0.1", 1);
  req.dst = V4("10.0.0.2", 2);
  req.private_data_len = 57;  // 92 - 36 = 56 (rdma_connect(3))
  EXPECT_EQ(a_->Send(req).code(), EINVAL);
  EXPECT_TRUE(sent_by_a_.empty());
}

TEST_F(MadConduitTest, AnEstablishedConnectionArmsItsDreqUntilItEnds) {
  Connect();
  // Each side, once established, leaves the DREQ the kernel's CM would send for it when its
  // process ends (cm_destroy_id): from its GID to the peer's, both comm IDs, the peer's QPN.
  ASSERT_EQ(armed_a_.size(), 1u);
  EXPECT_EQ(armed_a_[0].token, 0x11111111u);
  EXPECT_EQ(armed_a_[0].sgid, gid_a_);
  EXPECT_EQ(armed_a_[0].dgid, gid_b_);
  const auto& a_dreq = std::get<mad::Dreq>(armed_a_[0].mad.body);
  EXPECT_EQ(a_dreq.local_comm_id, 0x11111111u);
  EXPECT_EQ(a_dreq.remote_comm_id, 0x22222222u);
  EXPECT_EQ(a_dreq.remote_qpn, 0x200u);
  ASSERT_EQ(armed_b_.size(), 1u);
  EXPECT_EQ(armed_b_[0].token, 0x22222222u);
  EXPECT_EQ(armed_b_[0].dgid, gid_a_);
  const auto& b_dreq = std::get<mad::Dreq>(armed_b_[0].mad.body);
  EXPECT_EQ(b_dreq.local_comm_id, 0x22222222u);
  EXPECT_EQ(b_dreq.remote_comm_id, 0x11111111u);
  EXPECT_EQ(b_dreq.remote_qpn, 0x100u);
  // A disconnects: A's DREQ is on its way (retransmitted by its identifier) and B has it.
  Message dreq;
  dreq.type = MessageType::kDreq;
  ASSERT_TRUE(a_->Send(dreq).ok());
  EXPECT_EQ(disarmed_a_, std::vector<uint64_t>{0x11111111u});
  EXPECT_EQ(disarmed_b_, std::vector<uint64_t>{0x22222222u});
  Take(*b_);
  // Nothing is said when they are destroyed afterwards.
  const size_t a_sent = sent_by_a_.size(), b_sent = sent_by_b_.size();
  b_.reset();
  a_.reset();
  EXPECT_EQ(sent_by_a_.size(), a_sent);
  EXPECT_EQ(sent_by_b_.size(), b_sent);
  EXPECT_EQ(armed_a_.size(), 1u);
}

TEST_F(MadConduitTest, DestroyingAnEstablishedConnectionSendsItsDreq) {
  Connect();
  const size_t before = sent_by_a_.size();
  a_.reset();  // rdma_destroy_id without rdma_disconnect
  ASSERT_EQ(sent_by_a_.size(), before + 1);
  auto wire = mad::DecodeMad(sent_by_a_.back());
  ASSERT_TRUE(wire.ok());
  EXPECT_EQ(std::get<mad::Dreq>(wire->body).remote_comm_id, 0x22222222u);
  EXPECT_EQ(disarmed_a_, std::vector<uint64_t>{0x11111111u});
  EXPECT_EQ(Take(*b_).type, MessageType::kDreq);  // B hears of it: DISCONNECTED there
  EXPECT_EQ(disarmed_b_, std::vector<uint64_t>{0x22222222u});
}

TEST_F(MadConduitTest, NothingIsArmedBeforeTheRtuNorAfterARej) {
  Message req;
  req.type = MessageType::kReq;
  req.src = V4("10.0.0.1", 40000);
  req.dst = V4("10.0.0.2", 7174);
  ASSERT_TRUE(a_->Send(req).ok());
  Take(*b_);
  Message rej;
  rej.type = MessageType::kRej;
  ASSERT_TRUE(b_->Send(rej).ok());
  EXPECT_TRUE(armed_a_.empty());
  EXPECT_TRUE(armed_b_.empty());
  const size_t a_sent = sent_by_a_.size();
  a_.reset();
  EXPECT_EQ(sent_by_a_.size(), a_sent);
}

}  // namespace
}  // namespace softverbs::cm
