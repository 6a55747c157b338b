// The CM agent's dispatch (cm/agent.h): REQs to the listener of their service ID and address,
// every other MAD to the connection its comm ID names, and the kernel's answers when there is
// no identifier (REJ 8, SIDR_REP unsupported, DREP). A fake sender records what leaves.
#include "cm/agent.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <gtest/gtest.h>
#include <poll.h>

#include <cstring>
#include <set>

#include "cm/address.h"
#include "cm/service.h"

namespace softverbs::cm {
namespace {

Gid AgentTestGid(const char* v4) {
  Gid g{};
  g[10] = g[11] = 0xff;
  inet_pton(AF_INET, v4, &g[12]);
  return g;
}

bool AgentTestReadable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, 0) == 1;
}

struct AgentTestSent {
  Gid sgid, dgid;
  mad::Mad mad;
};

class AgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    agent_.SetSender([this](const Gid& s, const Gid& d, std::span<const uint8_t> bytes) {
      auto m = mad::DecodeMad(bytes);
      EXPECT_TRUE(m.ok()) << m.status().rule();
      if (m.ok()) sent_.push_back(AgentTestSent{s, d, *m});
      return Status::Ok();
    });
    inbox_ = std::move(MadInbox::Create().value());
    wild_ = std::move(MadInbox::Create().value());
  }
  // A REQ from the peer (10.78.0.2, comm ID 0x1234) to `dst`:`port`, TCP port space.
  std::array<uint8_t, mad::kMadBytes> Req(const char* dst, uint16_t port, uint32_t comm_id = 0x1234) {
    mad::Req r;
    r.local_comm_id = comm_id;
    r.service_id = mad::ServiceId(mad::PortSpace::kTcp, port);
    r.local_ca_guid = 0xfeed;
    r.local_qpn = 0x111;
    r.primary.local_gid = peer_;
    r.primary.remote_gid = AgentTestGid(dst);
    mad::CmaHdr hdr;
    hdr.port = 40000;
    hdr.src = peer_;
    hdr.dst = AgentTestGid(dst);
    EXPECT_TRUE(mad::EncodeCmaHdr(hdr, r.private_data).ok());
    mad::Mad m;
    m.hdr.tid = 0x77;
    m.body = r;
    return mad::EncodeMad(m).value();
  }
  // Binds `ip`:`port` as another identifier of the host would (cm/service.h), so that the agent
  // finds the port held but has no listener of its own there.
  Result<UniqueFd> HoldPort(const char* ip, uint16_t port) {
    sockaddr_storage held{};
    auto* in = reinterpret_cast<sockaddr_in*>(&held);
    in->sin_family = AF_INET;
    inet_pton(AF_INET, ip, &in->sin_addr);
    SetPort(&held, port);
    return BindService(&held, false);
  }
  template <typename Body>
  std::array<uint8_t, mad::kMadBytes> Encode(const Body& body) {
    mad::Mad m;
    m.hdr.tid = 0x99;
    m.body = body;
    return mad::EncodeMad(m).value();
  }

  Agent agent_;
  std::vector<AgentTestSent> sent_;
  std::unique_ptr<MadInbox> inbox_, wild_;
  const Gid peer_ = AgentTestGid("10.78.0.2"), local_ = AgentTestGid("10.78.0.1");
};

TEST_F(AgentTest, CommIdsAreUniqueNonZeroAndShareTheProcessHalf) {
  std::set<uint32_t> seen;
  uint32_t first = agent_.NewCommId();
  for (int i = 0; i < 1000; ++i) {
    uint32_t id = agent_.NewCommId();
    EXPECT_NE(id & 0xffff, 0u);
    EXPECT_EQ(id >> 16, first >> 16);
    EXPECT_TRUE(seen.insert(id).second);
  }
}

TEST_F(AgentTest, TheProcessSlotNamesTheHighHalf) {
  // Two live processes of one host hold different registry slots: their comm IDs never meet.
  Agent other;
  agent_.SetProcessSlot(0x123);
  other.SetProcessSlot(0x124);
  std::set<uint32_t> ours;
  for (int i = 0; i < 1000; ++i) {
    const uint32_t id = agent_.NewCommId();
    EXPECT_EQ(id >> 20, 0x123u);
    ours.insert(id);
  }
  for (int i = 0; i < 1000; ++i) {
    const uint32_t id = other.NewCommId();
    EXPECT_EQ(id >> 20, 0x124u);
    EXPECT_EQ(ours.count(id), 0u);
  }
}

TEST_F(AgentTest, ReqForNobodyIsRejectedWithReason8) {
  agent_.OnMad(Req("10.78.0.1", 7000), peer_, local_);
  ASSERT_EQ(sent_.size(), 1u);
  const auto* rej = std::get_if<mad::Rej>(&sent_[0].mad.body);
  ASSERT_NE(rej, nullptr);
  EXPECT_EQ(rej->reason, 8);  // IB_CM_REJ_INVALID_SERVICE_ID
  EXPECT_EQ(rej->remote_comm_id, 0x1234u);
  EXPECT_EQ(rej->message_rejected, 0);
  EXPECT_EQ(sent_[0].mad.hdr.tid, 0x77u);
  EXPECT_EQ(sent_[0].sgid, local_);  // back from where it arrived, to its sender
  EXPECT_EQ(sent_[0].dgid, peer_);
  EXPECT_EQ(agent_.counters().answered.load(), 1u);
}

TEST_F(AgentTest, ReqForAPortAnotherProcessHoldsIsDroppedNotRejected) {
  // The address's UDP group gave this process a REQ for a port another identifier of the host
  // holds (a listener in a process that does not receive it, or one about to listen): REJ 8
  // would refuse a connection that listener takes. Dropped and counted; the sender repeats it.
  auto bound = HoldPort("10.78.0.1", 7002);
  ASSERT_TRUE(bound.ok()) << bound.status().rule();
  agent_.OnMad(Req("10.78.0.1", 7002), peer_, local_);
  EXPECT_TRUE(sent_.empty());
  EXPECT_EQ(agent_.counters().unowned.load(), 1u);
  EXPECT_EQ(agent_.counters().answered.load(), 0u);
  // Once the port is free again, the kernel's answer: REJ 8.
  bound->reset();
  agent_.OnMad(Req("10.78.0.1", 7002), peer_, local_);
  ASSERT_EQ(sent_.size(), 1u);
  EXPECT_TRUE(std::holds_alternative<mad::Rej>(sent_[0].mad.body));
}

struct AgentTestForwarded {
  uint32_t slot;
  std::vector<uint8_t> mad;
};

TEST_F(AgentTest, ReqForAPortAnotherProcessHoldsGoesToTheHostsOtherProcesses) {
  // The same with a way to hand MADs over (WireFabric::ForwardMad): the REQ goes, unchanged, to
  // every other process of the host -- the port's holder takes it -- and nothing is answered.
  std::vector<AgentTestForwarded> forwarded;
  Status result = Status::Ok();
  agent_.SetForwarder([&](uint32_t slot, const Gid& s, const Gid& d, std::span<const uint8_t> mad) {
    EXPECT_EQ(s, peer_);
    EXPECT_EQ(d, local_);
    forwarded.push_back({slot, {mad.begin(), mad.end()}});
    return result;
  });
  auto bound = HoldPort("10.78.0.1", 7003);
  ASSERT_TRUE(bound.ok()) << bound.status().rule();
  const auto req = Req("10.78.0.1", 7003);
  agent_.OnMad(req, peer_, local_);
  ASSERT_EQ(forwarded.size(), 1u);
  EXPECT_EQ(forwarded[0].slot, Agent::kEveryOtherProcess);
  EXPECT_EQ(forwarded[0].mad, std::vector<uint8_t>(req.begin(), req.end()));
  EXPECT_TRUE(sent_.empty());
  EXPECT_EQ(agent_.counters().forwarded.load(), 1u);
  EXPECT_EQ(agent_.counters().unowned.load(), 0u);
  // No other process took it (they all ended): dropped and counted, still not refused.
  result = Status(EHOSTUNREACH, "nobody");
  agent_.OnMad(req, peer_, local_);
  EXPECT_TRUE(sent_.empty());
  EXPECT_EQ(agent_.counters().unowned.load(), 1u);
  EXPECT_EQ(agent_.counters().forwarded.load(), 1u);
}

TEST_F(AgentTest, AForwardedReqIsTakenByItsListenerElseNeitherAnsweredNorForwardedAgain) {
  size_t forwards = 0;
  agent_.SetForwarder([&](uint32_t, const Gid&, const Gid&, std::span<const uint8_t>) {
    ++forwards;
    return Status::Ok();
  });
  // Nobody here listens, nobody holds the port: the process that received it answers for the
  // host (REJ 8 once the port is free everywhere), not each process it was handed to.
  agent_.OnMad(Req("10.78.0.1", 7004), peer_, local_, /*forwarded=*/true);
  EXPECT_TRUE(sent_.empty());
  EXPECT_EQ(forwards, 0u);
  agent_.AddListener(static_cast<uint16_t>(mad::PortSpace::kTcp), 7004, local_, inbox_.get());
  agent_.OnMad(Req("10.78.0.1", 7004), peer_, local_, /*forwarded=*/true);
  MadInbox::Received r;
  ASSERT_TRUE(inbox_->Pop(&r));
  EXPECT_EQ(r.sgid, peer_);
  EXPECT_EQ(forwards, 0u);
  agent_.RemoveListener(inbox_.get());
}

TEST_F(AgentTest, AnotherProcesssCommIdGoesToThatProcess) {
  // Comm IDs carry their process's registry slot (SetProcessSlot): a REP, RTU, DREQ... naming
  // one of another live process goes there; one of a process that is gone is handled here.
  agent_.SetProcessSlot(5);
  std::vector<AgentTestForwarded> forwarded;
  agent_.SetForwarder([&](uint32_t slot, const Gid&, const Gid&, std::span<const uint8_t> mad) {
    if (slot == 9) return Status(EHOSTUNREACH, "slot 9 has no live process");
    forwarded.push_back({slot, {mad.begin(), mad.end()}});
    return Status::Ok();
  });
  Agent other;
  other.SetProcessSlot(7);
  mad::Rep rep;
  rep.local_comm_id = 0x4444;
  rep.remote_comm_id = other.NewCommId();
  agent_.OnMad(Encode(rep), peer_, local_);
  ASSERT_EQ(forwarded.size(), 1u);
  EXPECT_EQ(forwarded[0].slot, 7u);
  EXPECT_EQ(agent_.counters().unowned.load(), 0u);
  // One handed over already is never handed on: dropped where it landed.
  agent_.OnMad(Encode(rep), peer_, local_, /*forwarded=*/true);
  EXPECT_EQ(forwarded.size(), 1u);
  EXPECT_EQ(agent_.counters().unowned.load(), 1u);
  // This process's own slot, no such connection: dropped, not handed anywhere.
  rep.remote_comm_id = agent_.NewCommId();
  agent_.OnMad(Encode(rep), peer_, local_);
  EXPECT_EQ(forwarded.size(), 1u);
  EXPECT_EQ(agent_.counters().unowned.load(), 2u);
  // A DREQ for a process that is gone (slot 9): answered here with the DREP the kernel gives.
  Agent gone;
  gone.SetProcessSlot(9);
  const uint32_t dead_id = gone.NewCommId();
  agent_.OnMad(Encode(mad::Dreq{0x1234, dead_id, 0x111, {}}), peer_, local_);
  ASSERT_EQ(sent_.size(), 1u);
  const auto* drep = std::get_if<mad::Drep>(&sent_[0].mad.body);
  ASSERT_NE(drep, nullptr);
  EXPECT_EQ(drep->local_comm_id, dead_id);
  EXPECT_EQ(forwarded.size(), 1u);
  EXPECT_EQ(agent_.counters().forwarded.load(), 1u);
  // Handed to every process (by one without a CM agent): only the process the comm ID names
  // answers an unknown DREQ, so the peer gets one DREP.
  agent_.OnMad(Encode(mad::Dreq{0x1234, other.NewCommId(), 0x111, {}}), peer_, local_, /*forwarded=*/true);
  EXPECT_EQ(sent_.size(), 1u);
  agent_.OnMad(Encode(mad::Dreq{0x1234, agent_.NewCommId(), 0x111, {}}), peer_, local_, /*forwarded=*/true);
  EXPECT_EQ(sent_.size(), 2u);
  EXPECT_EQ(forwarded.size(), 1u);
}

TEST_F(AgentTest, ReqGoesToTheExactListenerBeforeTheWildcard) {
  agent_.AddListener(static_cast<uint16_t>(mad::PortSpace::kTcp), 7000, Gid{}, wild_.get());
  agent_.AddListener(static_cast<uint16_t>(mad::PortSpace::kTcp), 7000, local_, inbox_.get());
  agent_.OnMad(Req("10.78.0.1", 7000), peer_, local_);
  EXPECT_TRUE(AgentTestReadable(inbox_->fd()));
  EXPECT_FALSE(AgentTestReadable(wild_->fd()));
  MadInbox::Received r;
  ASSERT_TRUE(inbox_->Pop(&r));
  EXPECT_EQ(r.sgid, peer_);
  EXPECT_EQ(r.dgid, local_);
  EXPECT_NE(r.comm_id, 0u);
  EXPECT_FALSE(AgentTestReadable(inbox_->fd()));
  // Another address of the port: the wildcard listener.
  agent_.OnMad(Req("10.78.0.9", 7000, 0x5678), peer_, local_);
  EXPECT_TRUE(AgentTestReadable(wild_->fd()));
  // The same REQ again (its sender's timer ran out) while the application has not taken it:
  // not a second connection request, but an MRA (rdma_cm's delayed MRA, service timeout 24)
  // with the reserved comm ID and the REQ's TID, so that the peer waits.
  agent_.OnMad(Req("10.78.0.1", 7000), peer_, local_);
  MadInbox::Received again;
  EXPECT_FALSE(inbox_->Pop(&again));
  ASSERT_EQ(sent_.size(), 1u);
  const auto* mra = std::get_if<mad::Mra>(&sent_[0].mad.body);
  ASSERT_NE(mra, nullptr);
  EXPECT_EQ(mra->message_mraed, 0);  // the REQ
  EXPECT_EQ(mra->service_timeout, kMraServiceTimeout);
  EXPECT_EQ(mra->local_comm_id, r.comm_id);
  EXPECT_EQ(mra->remote_comm_id, 0x1234u);
  EXPECT_EQ(sent_[0].mad.hdr.tid, 0x77u);
  EXPECT_EQ(sent_[0].dgid, peer_);
  EXPECT_EQ(agent_.counters().mra_sent.load(), 1u);
  // Another port: nobody.
  agent_.OnMad(Req("10.78.0.1", 7001, 0x9999), peer_, local_);
  EXPECT_EQ(sent_.size(), 2u);
  EXPECT_TRUE(std::holds_alternative<mad::Rej>(sent_[1].mad.body));
  agent_.RemoveListener(inbox_.get());
  agent_.RemoveListener(wild_.get());
}

TEST_F(AgentTest, RepGoesToTheConnectionItsRemoteCommIdNames) {
  mad::MadContext ctx;
  ctx.local_comm_id = agent_.NewCommId();
  auto conduit = MadConduit::Create(agent_.Sender(), local_, peer_, ctx);
  ASSERT_TRUE(conduit.ok());
  agent_.AddConnection(ctx.local_comm_id, conduit->get());
  mad::Rep rep;
  rep.local_comm_id = 0x4444;
  rep.remote_comm_id = ctx.local_comm_id;
  rep.local_qpn = 0x222;
  agent_.OnMad(Encode(rep), peer_, local_);
  Message m;
  bool closed = false;
  ASSERT_TRUE((*conduit)->Receive(&m, &closed).ok());
  EXPECT_EQ(m.type, MessageType::kRep);
  EXPECT_EQ(m.qpn, 0x222u);
  EXPECT_EQ(m.gid, peer_);
  // Someone else's comm ID: counted, dropped, unanswered.
  rep.remote_comm_id = ctx.local_comm_id + 1;
  agent_.OnMad(Encode(rep), peer_, local_);
  EXPECT_EQ(agent_.counters().unowned.load(), 1u);
  EXPECT_TRUE(sent_.empty());
  agent_.RemoveConnection(ctx.local_comm_id);
  rep.remote_comm_id = ctx.local_comm_id;
  agent_.OnMad(Encode(rep), peer_, local_);
  EXPECT_EQ(agent_.counters().unowned.load(), 2u);
}

TEST_F(AgentTest, CountsMadsByTypeReceivedSentResentDropped) {
  agent_.AddListener(static_cast<uint16_t>(mad::PortSpace::kTcp), 7000, local_, inbox_.get());
  agent_.OnMad(Req("10.78.0.1", 7000), peer_, local_);  // received, to the listener
  agent_.OnMad(Req("10.78.0.1", 7000), peer_, local_);  // again: an MRA
  agent_.OnMad(Req("10.78.0.1", 7000), peer_, local_);  // again: the same MRA, resent
  mad::Rep rep;
  rep.remote_comm_id = 0xdead;  // no connection of ours: dropped
  agent_.OnMad(Encode(rep), peer_, local_);
  const auto& c = agent_.counters();
  constexpr auto kIdx = [](mad::Attr a) { return static_cast<uint16_t>(a) - Agent::kFirstAttr; };
  EXPECT_EQ(c.received_by_type[kIdx(mad::Attr::kReq)].load(), 3u);
  EXPECT_EQ(c.received_by_type[kIdx(mad::Attr::kRep)].load(), 1u);
  EXPECT_EQ(c.dropped_by_type[kIdx(mad::Attr::kRep)].load(), 1u);
  EXPECT_EQ(c.dropped_by_type[kIdx(mad::Attr::kReq)].load(), 0u);
  EXPECT_EQ(c.sent_by_type[kIdx(mad::Attr::kMra)].load(), 2u);
  EXPECT_EQ(c.resent_by_type[kIdx(mad::Attr::kMra)].load(), 1u);
  const std::string report = agent_.Report();
  EXPECT_NE(report.find("  cm received REQ=3 MRA=0 REJ=0 REP=1 "), std::string::npos) << report;
  EXPECT_NE(report.find("  cm sent REQ=0 MRA=2 "), std::string::npos) << report;
  EXPECT_NE(report.find("  cm resent REQ=0 MRA=1 "), std::string::npos) << report;
  EXPECT_NE(report.find("  cm dropped REQ=0 MRA=0 REJ=0 REP=1 "), std::string::npos) << report;
  agent_.RemoveListener(inbox_.get());
}

TEST_F(AgentTest, UnknownDreqGetsItsDrep) {
  agent_.OnMad(Encode(mad::Dreq{0x1234, 0x5678, 0x111, {}}), peer_, local_);
  ASSERT_EQ(sent_.size(), 1u);
  const auto* drep = std::get_if<mad::Drep>(&sent_[0].mad.body);
  ASSERT_NE(drep, nullptr);
  EXPECT_EQ(drep->local_comm_id, 0x5678u);
  EXPECT_EQ(drep->remote_comm_id, 0x1234u);
  EXPECT_EQ(sent_[0].mad.hdr.tid, 0x99u);
}

TEST_F(AgentTest, SidrReqForNobodyIsUnsupported) {
  mad::SidrReq req;
  req.request_id = 0x31;
  req.service_id = mad::ServiceId(mad::PortSpace::kUdp, 7000);
  mad::CmaHdr hdr;
  hdr.src = peer_;
  hdr.dst = local_;
  ASSERT_TRUE(mad::EncodeCmaHdr(hdr, req.private_data).ok());
  agent_.OnMad(Encode(req), peer_, local_);
  ASSERT_EQ(sent_.size(), 1u);
  const auto* rep = std::get_if<mad::SidrRep>(&sent_[0].mad.body);
  ASSERT_NE(rep, nullptr);
  EXPECT_EQ(rep->status, 2);  // IB_SIDR_UNSUPPORTED
  EXPECT_EQ(rep->request_id, 0x31u);
}

TEST_F(AgentTest, MalformedMadIsCountedAndDropped) {
  auto bytes = Req("10.78.0.1", 7000);
  bytes[1] = 0x04;  // not the CM class
  agent_.OnMad(bytes, peer_, local_);
  agent_.OnMad(std::span<const uint8_t>(bytes.data(), 100), peer_, local_);
  EXPECT_EQ(agent_.counters().refused.load(), 2u);
  EXPECT_TRUE(sent_.empty());
}

}  // namespace
}  // namespace softverbs::cm
