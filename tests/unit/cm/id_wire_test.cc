// cm::Id on the MAD path (docs/cm.md, "Across hosts"): two identifiers of this process meet
// through the process's CM agent as two hosts would, over a fake wire the test pumps (127.0.0.2
// is routed through lo but is not an address of the namespace, so it counts as another host).
// The exchange with its PSN swap, path MTU and ACK timeout, DREQ/DREP and timewait, the REQ's
// retransmissions ending in UNREACHABLE, a lost REP answered again, and REJ 8 from the agent.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>

#include <deque>
#include <functional>
#include <optional>

#include "cm/agent.h"
#include "cm/id.h"

namespace softverbs::cm {
namespace {

sockaddr_in WireTestV4(const char* host, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  inet_pton(AF_INET, host, &a.sin_addr);
  return a;
}
const sockaddr* WireTestSa(const sockaddr_in& a) { return reinterpret_cast<const sockaddr*>(&a); }

class WireTestQp : public QpDriver {
 public:
  explicit WireTestQp(uint32_t qpn) : qpn_(qpn) {}
  uint32_t qp_num() const override { return qpn_; }
  Status ToRtrRts(const ConnectedPath& path) override {
    path_ = path;
    return Status::Ok();
  }
  Status ToError() override {
    error_ = true;
    return Status::Ok();
  }
  Status Attach(const Gid&) override { return Status::Ok(); }
  Status Detach(const Gid&) override { return Status::Ok(); }
  std::optional<ConnectedPath> path_;
  bool error_ = false;

 private:
  uint32_t qpn_;
};

struct WireTestMad {
  Gid sgid, dgid;
  std::vector<uint8_t> bytes;
};

class CmIdWireTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("SOFTVERBS_HOST", "unit-tests", 0);
    server_ = std::move(Channel::Create().value());
    client_ = std::move(Channel::Create().value());
    Agent::Get().SetSender([this](const Gid& s, const Gid& d, std::span<const uint8_t> mad) {
      std::lock_guard lock(wire_mu_);
      wire_.push_back(WireTestMad{s, d, {mad.begin(), mad.end()}});
      ++sent_;
      return Status::Ok();
    });
    device_.gids.resize(4);
    device_.gids[1] = GidOf(WireTestSa(WireTestV4("127.0.0.1", 0)));
    device_.active_mtu = 5;  // 4096
    device_.node_guid = 0x0102030405060708;
  }
  void TearDown() override {
    for (Id* id : ids_) {
      std::lock_guard<std::mutex> lock(id->channel()->mutex());
      id->Close();
      delete id;
    }
    Agent::Get().SetSender(nullptr);  // the other tests run without a wire
  }
  Id* NewId(Channel* channel) {
    std::lock_guard<std::mutex> lock(channel->mutex());
    ids_.push_back(new Id(channel, PortSpace::kTcp, false));
    ids_.back()->set_mad_timers_for_testing(20, 3, 1);
    return ids_.back();
  }
  Status Locked(Id* id, const std::function<Status()>& verb) {
    std::lock_guard<std::mutex> lock(id->channel()->mutex());
    return verb();
  }
  // Delivers what is on the wire (each MAD to the agent, as QP1 would); `drop`: loses it.
  size_t Pump(bool drop = false) {
    std::deque<WireTestMad> now;
    {
      std::lock_guard lock(wire_mu_);
      now.swap(wire_);
    }
    for (const WireTestMad& m : now)
      if (!drop) Agent::Get().OnMad(m.bytes, m.sgid, m.dgid);
    return now.size();
  }
  template <typename Body>
  std::optional<Body> Peek() {
    std::lock_guard lock(wire_mu_);
    if (wire_.empty()) return std::nullopt;
    auto m = mad::DecodeMad(wire_.front().bytes);
    if (!m.ok() || !std::holds_alternative<Body>(m->body)) return std::nullopt;
    return std::get<Body>(m->body);
  }
  Event Next(Channel* channel) {
    Result<Event> e = channel->Get();
    EXPECT_TRUE(e.ok()) << e.status().rule();
    if (e->id != nullptr) channel->Acknowledge(e->id);
    return e.value();
  }
  // Runs `channel`'s timers until `done` (the protocol advances only when its channel is read).
  void RunUntil(Channel* channel, const std::function<bool()>& done) {
    fcntl(channel->fd(), F_SETFL, O_NONBLOCK);
    for (int i = 0; i < 2000 && !done(); ++i) {
      pollfd p{channel->fd(), POLLIN, 10};
      poll(&p, 1, 10);
      Result<Event> e = channel->Get();
      ASSERT_FALSE(e.ok()) << "an unexpected event " << static_cast<int>(e->type);
    }
    fcntl(channel->fd(), F_SETFL, 0);
    ASSERT_TRUE(done());
  }
  size_t OnWire() {
    std::lock_guard lock(wire_mu_);
    return wire_.size();
  }
  // A wildcard listener and a client whose route to 127.0.0.2:<its port> is resolved.
  std::pair<Id*, Id*> ListenerAndClient() {
    Id* listener = NewId(server_.get());
    Id* client = NewId(client_.get());
    sockaddr_in any = WireTestV4("0.0.0.0", 0);
    EXPECT_TRUE(Locked(listener, [&] { return listener->BindAddr(WireTestSa(any), device_); }).ok());
    EXPECT_TRUE(Locked(listener, [&] { return listener->Listen(4, device_); }).ok());
    sockaddr_in dst = WireTestV4("127.0.0.2", PortOf(reinterpret_cast<const sockaddr*>(&listener->src())));
    EXPECT_TRUE(Locked(client, [&] { return client->ResolveAddr(nullptr, WireTestSa(dst), device_); }).ok());
    EXPECT_EQ(Next(client_.get()).type, EventType::kAddrResolved);
    EXPECT_TRUE(client->on_wire());
    EXPECT_TRUE(Locked(client, [&] { return client->ResolveRoute(); }).ok());
    EXPECT_EQ(Next(client_.get()).type, EventType::kRouteResolved);
    return {listener, client};
  }

  std::unique_ptr<Channel> server_, client_;
  std::vector<Id*> ids_;
  DeviceView device_;
  std::mutex wire_mu_;
  std::deque<WireTestMad> wire_;
  size_t sent_ = 0;
};

TEST_F(CmIdWireTest, ConnectAcceptDisconnectOverMads) {
  auto [listener, client] = ListenerAndClient();
  WireTestQp qa(0x111), qb(0x222);
  client->AttachQp(&qa);
  ConnParam req;
  req.private_data = {7, 8, 9};
  req.retry_count = 7;
  req.rnr_retry_count = 7;
  ASSERT_TRUE(Locked(client, [&] { return client->Connect(req); }).ok());
  auto sent_req = Peek<mad::Req>();
  ASSERT_TRUE(sent_req.has_value());
  EXPECT_EQ(sent_req->local_qpn, 0x111u);
  EXPECT_EQ(sent_req->local_ca_guid, 0x0102030405060708u);
  EXPECT_EQ(sent_req->path_mtu, 5);
  EXPECT_EQ(Pump(), 1u);
  Event request = Next(server_.get());
  ASSERT_EQ(request.type, EventType::kConnectRequest);
  EXPECT_EQ(request.listen_id, listener);
  EXPECT_EQ(request.conn.qp_num, 0x111u);
  EXPECT_EQ(request.conn.private_data[2], 9);
  Id* child = request.id;
  ids_.push_back(child);
  EXPECT_TRUE(child->on_wire());
  child->AttachQp(&qb);
  ASSERT_TRUE(Locked(child, [&] { return child->Accept(ConnParam{}); }).ok());
  auto sent_rep = Peek<mad::Rep>();
  ASSERT_TRUE(sent_rep.has_value());
  EXPECT_EQ(sent_rep->remote_comm_id, sent_req->local_comm_id);
  ASSERT_TRUE(qb.path_.has_value());
  // Each side announced the PSN its receive queue expects: the passive side sends from the
  // REQ's and receives at its REP's.
  EXPECT_EQ(qb.path_->sq_psn, sent_req->starting_psn);
  EXPECT_EQ(qb.path_->rq_psn, sent_rep->starting_psn);
  EXPECT_EQ(qb.path_->dest_qpn, 0x111u);
  EXPECT_EQ(qb.path_->path_mtu, 5);
  EXPECT_EQ(qb.path_->timeout, kMadAckTimeout);
  EXPECT_EQ(Pump(), 1u);
  Event established = Next(client_.get());
  ASSERT_EQ(established.type, EventType::kEstablished);
  ASSERT_TRUE(qa.path_.has_value());
  EXPECT_EQ(qa.path_->sq_psn, qb.path_->rq_psn);
  EXPECT_EQ(qa.path_->rq_psn, qb.path_->sq_psn);
  EXPECT_EQ(qa.path_->dest_qpn, 0x222u);
  ASSERT_TRUE(Peek<mad::Rtu>().has_value());
  EXPECT_EQ(Pump(), 1u);
  EXPECT_EQ(Next(server_.get()).type, EventType::kEstablished);
  // DREQ → DISCONNECTED at once here; the peer's DREP ends the DREQ's retries, then timewait.
  ASSERT_TRUE(Locked(client, [&] { return client->Disconnect(); }).ok());
  EXPECT_EQ(Next(client_.get()).type, EventType::kDisconnected);
  ASSERT_TRUE(Peek<mad::Dreq>().has_value());
  EXPECT_EQ(Peek<mad::Dreq>()->remote_qpn, 0x222u);
  EXPECT_EQ(Pump(), 1u);
  EXPECT_EQ(Next(server_.get()).type, EventType::kDisconnected);
  EXPECT_TRUE(qb.error_);
  ASSERT_TRUE(Peek<mad::Drep>().has_value());
  EXPECT_EQ(Pump(), 1u);
  EXPECT_EQ(Next(client_.get()).type, EventType::kTimewaitExit);
  EXPECT_EQ(Next(server_.get()).type, EventType::kTimewaitExit);
  EXPECT_EQ(OnWire(), 0u);  // the DREP stopped the DREQ's retransmissions
}

// ECE across hosts: the REQ's and REP's vendor ID and options (attribute modifier) reach the
// other side's CONNECT_REQUEST / CONNECT_RESPONSE through the MADs (docs/cm.md, "ECE").
TEST_F(CmIdWireTest, EceCrossesInTheReqAndRepMads) {
  auto [listener, client] = ListenerAndClient();
  ConnParam req;
  req.qp_num = 0x111;
  req.ece = {0x5356, 0xa5a5};
  ASSERT_TRUE(Locked(client, [&] { return client->Connect(req); }).ok());
  uint32_t attr_mod = 0;
  {
    std::lock_guard lock(wire_mu_);
    ASSERT_FALSE(wire_.empty());
    attr_mod = static_cast<uint32_t>(wire_.front().bytes[20]) << 24 | wire_.front().bytes[21] << 16 |
               wire_.front().bytes[22] << 8 | wire_.front().bytes[23];
  }
  EXPECT_EQ(attr_mod, 0xa5a5u);
  auto sent_req = Peek<mad::Req>();
  ASSERT_TRUE(sent_req.has_value());
  EXPECT_EQ(sent_req->ece_vendor_id, 0x5356u);
  EXPECT_EQ(Pump(), 1u);
  Event request = Next(server_.get());
  ASSERT_EQ(request.type, EventType::kConnectRequest);
  EXPECT_EQ(request.conn.ece.vendor_id, 0x5356u);
  EXPECT_EQ(request.conn.ece.options, 0xa5a5u);
  Id* child = request.id;
  ids_.push_back(child);
  ConnParam rep;
  rep.qp_num = 0x222;
  rep.ece = {0x5356, 0x5a};
  ASSERT_TRUE(Locked(child, [&] { return child->Accept(rep); }).ok());
  auto sent_rep = Peek<mad::Rep>();
  ASSERT_TRUE(sent_rep.has_value());
  EXPECT_EQ(sent_rep->ece_vendor_id, 0x5356u);
  EXPECT_EQ(Pump(), 1u);
  Event response = Next(client_.get());
  ASSERT_EQ(response.type, EventType::kConnectResponse);
  EXPECT_EQ(response.conn.ece.vendor_id, 0x5356u);
  EXPECT_EQ(response.conn.ece.options, 0x5au);
}

TEST_F(CmIdWireTest, UnansweredReqIsSentAgainThenUnreachable) {
  auto [listener, client] = ListenerAndClient();
  (void)listener;
  ASSERT_TRUE(Locked(client, [&] { return client->Connect(ConnParam{}); }).ok());
  auto first = Peek<mad::Req>();
  ASSERT_TRUE(first.has_value());
  // Nothing ever arrives: 1 + 3 retries (set_mad_timers_for_testing), then the kernel's
  // IB_CM_REQ_ERROR → UNREACHABLE -ETIMEDOUT.
  Event e = Next(client_.get());
  EXPECT_EQ(e.type, EventType::kUnreachable);
  EXPECT_EQ(e.status, -ETIMEDOUT);
  EXPECT_EQ(client->state(), IdState::kDisconnected);
  std::lock_guard lock(wire_mu_);
  ASSERT_EQ(wire_.size(), 4u);
  for (const WireTestMad& m : wire_) EXPECT_EQ(m.bytes, wire_.front().bytes);  // the same REQ
}

TEST_F(CmIdWireTest, LostRepIsSentAgainForTheRepeatedReq) {
  auto [listener, client] = ListenerAndClient();
  // The passive side's own REP timer (inherited from its listener) stays out of the way: only
  // the answer to the repeated REQ may send the REP again here.
  listener->set_mad_timers_for_testing(600000, 3, 1);
  ASSERT_TRUE(Locked(client, [&] { return client->Connect(ConnParam{}); }).ok());
  EXPECT_EQ(Pump(), 1u);
  Event request = Next(server_.get());
  ASSERT_EQ(request.type, EventType::kConnectRequest);
  ids_.push_back(request.id);
  ASSERT_TRUE(Locked(request.id, [&] { return request.id->Accept(ConnParam{}); }).ok());
  ASSERT_TRUE(Peek<mad::Rep>().has_value());
  EXPECT_EQ(Pump(/*drop=*/true), 1u);  // the REP is lost
  RunUntil(client_.get(), [&] { return OnWire() > 0; });  // the client's timer sends the REQ again
  ASSERT_TRUE(Peek<mad::Req>().has_value());
  EXPECT_EQ(Pump(), 1u);
  // The listener is not asked again: the connection answers with its REP.
  ASSERT_TRUE(Peek<mad::Rep>().has_value());
  fcntl(server_->fd(), F_SETFL, O_NONBLOCK);
  EXPECT_FALSE(server_->Get().ok());
  fcntl(server_->fd(), F_SETFL, 0);
  EXPECT_EQ(Pump(), 1u);
  EXPECT_EQ(Next(client_.get()).type, EventType::kConnectResponse);  // no QP on the client
}

TEST_F(CmIdWireTest, NobodyListeningOnTheOtherHostIsRejectedWith8) {
  Id* client = NewId(client_.get());
  sockaddr_in dst = WireTestV4("127.0.0.2", 1);
  ASSERT_TRUE(Locked(client, [&] { return client->ResolveAddr(nullptr, WireTestSa(dst), device_); }).ok());
  EXPECT_EQ(Next(client_.get()).type, EventType::kAddrResolved);
  ASSERT_TRUE(Locked(client, [&] { return client->ResolveRoute(); }).ok());
  Next(client_.get());
  ASSERT_TRUE(Locked(client, [&] { return client->Connect(ConnParam{}); }).ok());
  EXPECT_EQ(Pump(), 1u);  // the agent answers for the host: REJ 8
  EXPECT_EQ(Pump(), 1u);
  Event e = Next(client_.get());
  EXPECT_EQ(e.type, EventType::kRejected);
  EXPECT_EQ(e.status, kRejInvalidServiceId);
}

TEST_F(CmIdWireTest, NoWireMeansAddrErrorForAnotherHost) {
  Agent::Get().SetSender(nullptr);
  Id* client = NewId(client_.get());
  sockaddr_in dst = WireTestV4("127.0.0.2", 1);
  ASSERT_TRUE(Locked(client, [&] { return client->ResolveAddr(nullptr, WireTestSa(dst), device_); }).ok());
  Event e = Next(client_.get());
  EXPECT_EQ(e.type, EventType::kAddrError);
  EXPECT_EQ(e.status, -EHOSTUNREACH);
}

}  // namespace
}  // namespace softverbs::cm
