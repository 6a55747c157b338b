// The CM's protocol between two identifiers of one process (cm/id.cc, cm/channel.cc), without
// QPs (one test's QP driver is a fake): the events each side sees, ECE in REQ / REP, the state table's refusals, private data limits, a peer that
// goes away, and the channel fd's readiness.
#include "cm/id.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <cstring>
#include <memory>

#include "cm/id_state.h"

namespace softverbs::cm {
namespace {

sockaddr_in Ipv4(const char* host, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  inet_pton(AF_INET, host, &a.sin_addr);
  return a;
}

const sockaddr* Sa(const sockaddr_in& a) { return reinterpret_cast<const sockaddr*>(&a); }

// A device view with 127.0.0.1 at GID index 1, as softverbs0's table has it.
DeviceView Device() {
  DeviceView d;
  d.gids.resize(4);
  sockaddr_in lo = Ipv4("127.0.0.1", 0);
  d.gids[1] = GidOf(Sa(lo));
  return d;
}

bool Readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, 0) == 1;
}

class CmIdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("SOFTVERBS_HOST", "unit-tests", 0);
    server_ = std::move(Channel::Create().value());
    client_ = std::move(Channel::Create().value());
  }
  void TearDown() override {
    for (Id* id : ids_) {
      std::lock_guard<std::mutex> lock(id->channel()->mutex());
      id->Close();
      delete id;
    }
  }
  Id* NewId(Channel* channel, bool ud = false) {
    std::lock_guard<std::mutex> lock(channel->mutex());
    ids_.push_back(new Id(channel, ud ? PortSpace::kUdp : PortSpace::kTcp, ud));
    return ids_.back();
  }
  Event Next(Channel* channel) {
    Result<Event> e = channel->Get();
    EXPECT_TRUE(e.ok()) << e.status().rule();
    if (e->id != nullptr) channel->Acknowledge(e->id);
    return e.value();
  }
  // A listener on 127.0.0.1 and a client with its route resolved to it.
  std::pair<Id*, Id*> ListenerAndClient(bool ud = false) {
    Id* listener = NewId(server_.get(), ud);
    Id* client = NewId(client_.get(), ud);
    sockaddr_in any_port = Ipv4("127.0.0.1", 0);
    {
      std::lock_guard<std::mutex> lock(server_->mutex());
      EXPECT_TRUE(listener->BindAddr(Sa(any_port), Device()).ok());
      EXPECT_TRUE(listener->Listen(4, Device()).ok());
    }
    sockaddr_in dst = Ipv4("127.0.0.1", PortOf(reinterpret_cast<const sockaddr*>(&listener->src())));
    {
      std::lock_guard<std::mutex> lock(client_->mutex());
      EXPECT_TRUE(client->ResolveAddr(nullptr, Sa(dst), Device()).ok());
    }
    EXPECT_EQ(Next(client_.get()).type, EventType::kAddrResolved);
    {
      std::lock_guard<std::mutex> lock(client_->mutex());
      EXPECT_TRUE(client->ResolveRoute().ok());
    }
    EXPECT_EQ(Next(client_.get()).type, EventType::kRouteResolved);
    return {listener, client};
  }
  Status Locked(Id* id, const std::function<Status()>& verb) {
    std::lock_guard<std::mutex> lock(id->channel()->mutex());
    return verb();
  }

  std::unique_ptr<Channel> server_, client_;
  std::vector<Id*> ids_;
};

TEST_F(CmIdTest, ConnectAcceptEstablishDisconnect) {
  auto [listener, client] = ListenerAndClient();
  ConnParam req;
  req.private_data = {1, 2, 3};
  req.responder_resources = 2;
  req.initiator_depth = 3;
  req.qp_num = 0x111;
  ASSERT_TRUE(Locked(client, [&] { return client->Connect(req); }).ok());
  EXPECT_TRUE(Readable(server_->fd()));
  Event request = Next(server_.get());
  ASSERT_EQ(request.type, EventType::kConnectRequest);
  EXPECT_EQ(request.listen_id, listener);
  EXPECT_EQ(request.conn.qp_num, 0x111u);
  EXPECT_EQ(request.conn.private_data.size(), MaxPrivateData(MessageType::kReq));
  EXPECT_EQ(request.conn.private_data[2], 3);
  // Mirrored: the peer's initiator depth is what we may serve.
  EXPECT_EQ(request.conn.responder_resources, 3);
  EXPECT_EQ(request.conn.initiator_depth, 2);
  Id* child = request.id;
  ids_.push_back(child);
  ConnParam rep;
  rep.qp_num = 0x222;
  ASSERT_TRUE(Locked(child, [&] { return child->Accept(rep); }).ok());
  Event response = Next(client_.get());
  ASSERT_EQ(response.type, EventType::kConnectResponse);  // no QP: the client must establish
  EXPECT_EQ(response.conn.qp_num, 0x222u);
  EXPECT_FALSE(Readable(server_->fd()));
  ASSERT_TRUE(Locked(client, [&] { return client->Establish(); }).ok());
  EXPECT_EQ(Next(server_.get()).type, EventType::kEstablished);
  ASSERT_TRUE(Locked(client, [&] { return client->Disconnect(); }).ok());
  EXPECT_EQ(Next(server_.get()).type, EventType::kDisconnected);
  EXPECT_EQ(Next(client_.get()).type, EventType::kDisconnected);
  EXPECT_EQ(child->state(), IdState::kDisconnected);
}

// ECE (rdma_set_local_ece(3)): what a REQ / REP is given arrives with CONNECT_REQUEST /
// CONNECT_RESPONSE, unchanged (the kernel's CM passes it through).
TEST_F(CmIdTest, EceCrossesInReqAndRep) {
  auto [listener, client] = ListenerAndClient();
  ConnParam req;
  req.qp_num = 0x111;
  req.ece = {0x5356, 0xa5a5};
  ASSERT_TRUE(Locked(client, [&] { return client->Connect(req); }).ok());
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
  Event response = Next(client_.get());
  ASSERT_EQ(response.type, EventType::kConnectResponse);
  EXPECT_EQ(response.conn.ece.vendor_id, 0x5356u);
  EXPECT_EQ(response.conn.ece.options, 0x5au);
}

// A QP that the REP's ECE does not suit (librdmacm's ucma_process_conn_resp_ece: another vendor
// than was sent) is never moved to RTR: the active side gets CONNECT_ERROR.
class EceRefusingQp : public QpDriver {
 public:
  uint32_t qp_num() const override { return 0x333; }
  Status ToRtrRts(const ConnectedPath&) override {
    ++moved;
    return Status::Ok();
  }
  Status ToError() override { return Status::Ok(); }
  Status Attach(const Gid&) override { return Status::Ok(); }
  Status Detach(const Gid&) override { return Status::Ok(); }
  Status TakeResponseEce(const Ece& ece) override {
    seen = ece;
    return Invalid("another vendor");
  }
  Ece seen;
  int moved = 0;
};

TEST_F(CmIdTest, ARepWhoseEceTheQpRefusesIsAConnectError) {
  auto [listener, client] = ListenerAndClient();
  EceRefusingQp qp;
  {
    std::lock_guard<std::mutex> lock(client_->mutex());
    client->AttachQp(&qp);
  }
  ASSERT_TRUE(Locked(client, [&] { return client->Connect(ConnParam{}); }).ok());
  Event request = Next(server_.get());
  Id* child = request.id;
  ids_.push_back(child);
  ConnParam rep;
  rep.qp_num = 0x222;
  rep.ece = {0x1234, 7};
  ASSERT_TRUE(Locked(child, [&] { return child->Accept(rep); }).ok());
  Event e = Next(client_.get());
  EXPECT_EQ(e.type, EventType::kConnectError);
  EXPECT_EQ(e.status, -EINVAL);
  EXPECT_EQ(qp.seen.vendor_id, 0x1234u);
  EXPECT_EQ(qp.seen.options, 7u);
  EXPECT_EQ(qp.moved, 0);
  EXPECT_EQ(client->state(), IdState::kDisconnected);
  std::lock_guard<std::mutex> lock(client_->mutex());
  client->AttachQp(nullptr);
}

TEST_F(CmIdTest, NobodyListeningIsRejectedWithInvalidServiceId) {
  Id* client = NewId(client_.get());
  sockaddr_in dst = Ipv4("127.0.0.1", 1);  // never bound: below the ephemeral range
  ASSERT_TRUE(Locked(client, [&] { return client->ResolveAddr(nullptr, Sa(dst), Device()); }).ok());
  Next(client_.get());
  ASSERT_TRUE(Locked(client, [&] { return client->ResolveRoute(); }).ok());
  Next(client_.get());
  ASSERT_TRUE(Locked(client, [&] { return client->Connect(ConnParam{}); }).ok());
  Event e = Next(client_.get());
  EXPECT_EQ(e.type, EventType::kRejected);
  EXPECT_EQ(e.status, kRejInvalidServiceId);
}

TEST_F(CmIdTest, RejectCarriesPrivateDataAndConsumerReason) {
  auto [listener, client] = ListenerAndClient();
  ASSERT_TRUE(Locked(client, [&] { return client->Connect(ConnParam{}); }).ok());
  Event request = Next(server_.get());
  Id* child = request.id;
  ids_.push_back(child);
  std::vector<uint8_t> too_long(MaxPrivateData(MessageType::kRej) + 1, 7);
  Status refused = Locked(child, [&] { return child->Reject(too_long); });
  EXPECT_EQ(refused.code(), EINVAL);
  EXPECT_EQ(child->state(), IdState::kRequestReceived);  // nothing changed
  ASSERT_TRUE(Locked(child, [&] { return child->Reject({9, 8, 7}); }).ok());
  Event e = Next(client_.get());
  EXPECT_EQ(e.type, EventType::kRejected);
  EXPECT_EQ(e.status, kRejConsumerDefined);
  ASSERT_EQ(e.conn.private_data.size(), MaxPrivateData(MessageType::kRej));
  EXPECT_EQ(e.conn.private_data[0], 9);
}

TEST_F(CmIdTest, RejectEceCarriesReason35) {  // rdma_reject_ece: IB_CM_REJ_VENDOR_OPTION_NOT_SUPPORTED
  auto [listener, client] = ListenerAndClient();
  ASSERT_TRUE(Locked(client, [&] { return client->Connect(ConnParam{}); }).ok());
  Event request = Next(server_.get());
  Id* child = request.id;
  ids_.push_back(child);
  ASSERT_TRUE(Locked(child, [&] { return child->Reject({}, kRejVendorOptionNotSupported); }).ok());
  Event e = Next(client_.get());
  EXPECT_EQ(e.type, EventType::kRejected);
  EXPECT_EQ(e.status, 35);
}

TEST_F(CmIdTest, UdLookupReturnsQpnAndQkey) {
  auto [listener, client] = ListenerAndClient(/*ud=*/true);
  ASSERT_TRUE(Locked(client, [&] { return client->Connect(ConnParam{}); }).ok());
  Event request = Next(server_.get());
  ASSERT_EQ(request.type, EventType::kConnectRequest);
  EXPECT_TRUE(request.ud);
  Id* child = request.id;
  ids_.push_back(child);
  ConnParam rep;
  rep.qp_num = 0x333;
  ASSERT_TRUE(Locked(child, [&] { return child->Accept(rep); }).ok());
  Event e = Next(client_.get());
  EXPECT_EQ(e.type, EventType::kEstablished);
  EXPECT_TRUE(e.ud);
  EXPECT_EQ(e.ud_param.qp_num, 0x333u);
  EXPECT_EQ(e.ud_param.qkey, kUdpQkey);
  EXPECT_EQ(e.ud_param.sgid_index, 1);
}

TEST_F(CmIdTest, PeerGoneBeforeTheReplyIsUnreachable) {
  auto [listener, client] = ListenerAndClient();
  ASSERT_TRUE(Locked(client, [&] { return client->Connect(ConnParam{}); }).ok());
  Event request = Next(server_.get());
  {
    std::lock_guard<std::mutex> lock(server_->mutex());
    request.id->Close();  // as if the server process died: its sockets close
    delete request.id;
  }
  Event e = Next(client_.get());
  EXPECT_EQ(e.type, EventType::kUnreachable);
  EXPECT_EQ(e.status, -ETIMEDOUT);
}

TEST_F(CmIdTest, UnansweredReqTimesOutAsUnreachable) {
  auto [listener, client] = ListenerAndClient();
  client->set_timeout_for_testing(50);
  ASSERT_TRUE(Locked(client, [&] { return client->Connect(ConnParam{}); }).ok());
  // The server never reads its channel: its CM never answers.
  Event e = Next(client_.get());
  EXPECT_EQ(e.type, EventType::kUnreachable);
  EXPECT_EQ(e.status, -ETIMEDOUT);
  EXPECT_EQ(client->state(), IdState::kDisconnected);
}

TEST_F(CmIdTest, DisconnectCompletesWithoutThePeerReading) {
  auto [listener, client] = ListenerAndClient();
  ASSERT_TRUE(Locked(client, [&] { return client->Connect(ConnParam{}); }).ok());
  Event request = Next(server_.get());
  Id* child = request.id;
  ids_.push_back(child);
  ASSERT_TRUE(Locked(child, [&] { return child->Accept(ConnParam{}); }).ok());
  ASSERT_EQ(Next(client_.get()).type, EventType::kConnectResponse);
  ASSERT_TRUE(Locked(client, [&] { return client->Establish(); }).ok());
  // The server does not read its channel now: the client's disconnect completes anyway, as a
  // kernel CM's DREP would let it.
  ASSERT_TRUE(Locked(client, [&] { return client->Disconnect(); }).ok());
  EXPECT_EQ(Next(client_.get()).type, EventType::kDisconnected);
  // Once the server reads, it sees the RTU and the DREQ in order.
  EXPECT_EQ(Next(server_.get()).type, EventType::kEstablished);
  EXPECT_EQ(Next(server_.get()).type, EventType::kDisconnected);
  // Both disconnecting is harmless.
  EXPECT_TRUE(Locked(child, [&] { return child->Disconnect(); }).ok());
  EXPECT_EQ(child->state(), IdState::kDisconnected);
}

TEST_F(CmIdTest, VerbsInTheWrongStateChangeNothing) {
  Id* id = NewId(client_.get());
  EXPECT_EQ(Locked(id, [&] { return id->ResolveRoute(); }).code(), EINVAL);
  EXPECT_EQ(Locked(id, [&] { return id->Connect(ConnParam{}); }).code(), EINVAL);
  EXPECT_EQ(Locked(id, [&] { return id->Accept(ConnParam{}); }).code(), EINVAL);
  EXPECT_EQ(Locked(id, [&] { return id->Disconnect(); }).code(), EINVAL);
  EXPECT_EQ(id->state(), IdState::kIdle);
  sockaddr_in foreign = Ipv4("198.51.100.7", 0);
  EXPECT_EQ(Locked(id, [&] { return id->BindAddr(Sa(foreign), Device()); }).code(), EADDRNOTAVAIL);
  EXPECT_EQ(id->state(), IdState::kIdle);
}

TEST_F(CmIdTest, NonBlockingChannelGivesEagain) {
  int fl = fcntl(client_->fd(), F_GETFL);
  ASSERT_EQ(fcntl(client_->fd(), F_SETFL, fl | O_NONBLOCK), 0);
  EXPECT_FALSE(Readable(client_->fd()));
  Result<Event> e = client_->Get();
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), EAGAIN);
}

TEST(CmIdState, TheTableFollowsTheManPages) {
  EXPECT_TRUE(Allowed(IdVerb::kBindAddr, IdState::kIdle));
  EXPECT_FALSE(Allowed(IdVerb::kBindAddr, IdState::kBound));
  EXPECT_TRUE(Allowed(IdVerb::kListen, IdState::kIdle));  // the kernel binds to the wildcard
  EXPECT_FALSE(Allowed(IdVerb::kConnect, IdState::kAddrResolved));
  EXPECT_TRUE(Allowed(IdVerb::kConnect, IdState::kRouteResolved));
  EXPECT_TRUE(Allowed(IdVerb::kAccept, IdState::kRequestReceived));
  EXPECT_FALSE(Allowed(IdVerb::kAccept, IdState::kListening));
  EXPECT_TRUE(Allowed(IdVerb::kEstablish, IdState::kConnectResponse));
  EXPECT_FALSE(Allowed(IdVerb::kEstablish, IdState::kConnected));
  EXPECT_FALSE(Allowed(IdVerb::kDisconnect, IdState::kIdle));
  EXPECT_STREQ(IdStateName(IdState::kRouteResolved), "route resolved");
}

TEST(CmWire, PrivateDataSizesAreTheIbCmAreas) {
  EXPECT_EQ(MaxPrivateData(MessageType::kReq), 56u);
  EXPECT_EQ(MaxPrivateData(MessageType::kRep), 196u);
  EXPECT_EQ(MaxPrivateData(MessageType::kRej), 148u);
  EXPECT_EQ(MaxPrivateData(MessageType::kSidrReq), 180u);
  EXPECT_EQ(MaxPrivateData(MessageType::kSidrRep), 136u);
}

}  // namespace
}  // namespace softverbs::cm
