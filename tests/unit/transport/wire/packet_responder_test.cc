// The responder's packet front end for UC (transport/wire/packet_responder.h) against a fake
// target: packets built by the wire's own builder, in order, lost, or malformed.
#include "transport/wire/packet_responder.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/cq.h"
#include "core/mr.h"
#include "tests/unit/core/test_context.h"
#include "tests/unit/transport/fake_target.h"
#include "tests/unit/transport/wire/wire_qp.h"
#include "transport/codes.h"

namespace softverbs::core {
namespace {

namespace packet = fabric::packet;
using transport::Request;
using transport::WrOpcode;

using transport::qp_type::kUc;

class PacketResponderTest : public CoreTest {
 protected:
  PacketResponderTest() : target_(context_->local()) {
    cq_ = std::move(Cq::Create(*context_, 64, nullptr, 0).value());
    rq_ = std::move(transport::RecvQueue::Create(context_->local(), 16, 1).value());
    mr_ = std::move(Mr::Register(*pd_, {reinterpret_cast<uint64_t>(buf_), sizeof(buf_), reinterpret_cast<uint64_t>(buf_),
                                        access::kLocalWrite | access::kRemoteWrite})
                        .value());
    transport::QpEndpoint& e = target_.e_;
    wire_testing::ConnectWireQp(e, kUc, pd_->host_id());
    e.access = access::kRemoteWrite;
    e.recv_cq = cq_->ring_ref();
    e.recv_queue = rq_->ref();
    for (size_t i = 0; i < sizeof(message_); ++i) message_[i] = static_cast<uint8_t>(i * 7 + 1);
    flow_ = wire_testing::RequestFlow();
  }
  // The packets of a UC message of `length` bytes of message_, PSNs from `psn`.
  std::vector<std::vector<uint8_t>> Packets(WrOpcode op, uint32_t length, uint32_t psn) {
    iovec piece{message_, length};
    Request r = wire_testing::MessageTo(kUc, op, &piece, psn);
    r.remote_addr = reinterpret_cast<uint64_t>(buf_) + 1000;
    r.rkey = mr_->rkey();
    r.imm_data = 0x05060708;
    return wire_testing::BuildPackets(r, flow_);
  }
  void Receive(const std::vector<uint8_t>& bytes) {
    auto parsed = packet::Parse(bytes, &flow_);
    ASSERT_TRUE(parsed.ok()) << parsed.status().rule();
    transport::PacketResponder::ReceiveUc(target_, *parsed);
  }
  void PostRecv(uint64_t id) {
    transport::RecvSge s{reinterpret_cast<uint64_t>(buf_), 4096, mr_->lkey()};
    ASSERT_TRUE(rq_->Post(id, &s, 1).ok());
  }
  int Poll(transport::Completion* c) { return cq_->Poll(c, 1); }

  uint8_t buf_[8192] = {};
  uint8_t message_[1000];
  packet::IpUdpInfo flow_;
  transport::FakeTarget target_;
  std::unique_ptr<Cq> cq_;
  std::unique_ptr<transport::RecvQueue> rq_;
  std::unique_ptr<Mr> mr_;
};

TEST_F(PacketResponderTest, SendInPacketsFillsOneWqe) {
  PostRecv(1);
  auto packets = Packets(WrOpcode::kSendWithImm, 700, 10);  // FIRST, MIDDLE, LAST_WITH_IMMEDIATE
  ASSERT_EQ(packets.size(), 3u);
  transport::Completion c;
  for (auto& p : packets) {
    EXPECT_EQ(Poll(&c), 0);  // complete only with the last packet
    Receive(p);
  }
  ASSERT_EQ(Poll(&c), 1);
  EXPECT_EQ(c.wr_id, 1u);
  EXPECT_EQ(c.byte_len, 700u);
  EXPECT_EQ(c.src_qp, 0x777u);
  EXPECT_EQ(c.imm_data, 0x05060708u);
  EXPECT_EQ(memcmp(buf_, message_, 700), 0);
}

TEST_F(PacketResponderTest, ALostPacketDropsTheMessageAndKeepsItsWqe) {
  // IBA 9.8.3: the message is lost; the WQE it had taken serves the next message (as rxe does).
  PostRecv(1);
  PostRecv(2);
  auto lost = Packets(WrOpcode::kSend, 700, 10);
  Receive(lost[0]);
  Receive(lost[2]);  // MIDDLE lost: LAST is out of sequence
  transport::Completion c;
  EXPECT_EQ(Poll(&c), 0);
  auto next = Packets(WrOpcode::kSend, 100, 50);  // a new ONLY at any PSN restarts the sequence
  Receive(next[0]);
  ASSERT_EQ(Poll(&c), 1);
  EXPECT_EQ(c.wr_id, 1u);  // the same WQE
  EXPECT_EQ(c.byte_len, 100u);
  EXPECT_EQ(rq_->count(), 1u);
}

TEST_F(PacketResponderTest, WriteInPacketsLandsAtItsOffsets) {
  auto packets = Packets(WrOpcode::kRdmaWrite, 600, 0x00fffffe);  // PSNs wrap at 24 bits
  ASSERT_EQ(packets.size(), 3u);
  for (auto& p : packets) Receive(p);
  EXPECT_EQ(memcmp(buf_ + 1000, message_, 600), 0);
}

TEST_F(PacketResponderTest, WriteWithImmConsumesAWqeAtTheEnd) {
  PostRecv(9);
  for (auto& p : Packets(WrOpcode::kRdmaWriteWithImm, 300, 5)) Receive(p);
  transport::Completion c;
  ASSERT_EQ(Poll(&c), 1);
  EXPECT_EQ(c.wr_id, 9u);
  EXPECT_EQ(c.opcode, transport::wc_opcode::kRecvRdmaWithImm);
  EXPECT_EQ(c.byte_len, 300u);
  EXPECT_EQ(memcmp(buf_ + 1000, message_, 300), 0);
}

TEST_F(PacketResponderTest, AMiddlePacketShorterThanTheMtuDropsTheMessage) {
  // IBA 9.4 / rxe: FIRST and MIDDLE carry exactly the path MTU. The receiver's MTU is smaller
  // than the sender's packets here, so its FIRST is refused and nothing lands.
  target_.e_.mtu = 128;
  for (auto& p : Packets(WrOpcode::kRdmaWrite, 600, 0)) Receive(p);
  EXPECT_EQ(buf_[1000], 0);
}

TEST_F(PacketResponderTest, AWriteLongerThanItsRethIsDropped) {
  auto packets = Packets(WrOpcode::kRdmaWrite, 600, 0);
  auto other = Packets(WrOpcode::kRdmaWrite, 300, 0);
  Receive(other[0]);       // FIRST of a 300-byte write (RETH length 300)...
  Receive(packets[1]);     // ...followed by MIDDLE and LAST of a 600-byte one
  Receive(packets[2]);
  EXPECT_EQ(buf_[1000 + 256], 0);  // nothing beyond the first packet landed
  EXPECT_EQ(memcmp(buf_ + 1000, message_, 256), 0);
}

TEST_F(PacketResponderTest, AWriteWhoseRethEndsPastTheMrWritesNothing) {
  // rxe check_rkey checks the RETH's whole range at the FIRST packet: a UC message that would
  // end outside the MR is dropped before its first packet lands (it used to write the packets
  // inside the MR and drop only the one that crossed its end).
  auto packets = Packets(WrOpcode::kRdmaWrite, 600, 0);
  auto p = packet::Parse(packets[0], &flow_);
  ASSERT_TRUE(p.ok());
  // The same FIRST, its RETH moved so the message ends 100 bytes past the MR (8192 bytes).
  packet::PacketHeaders h = p->hdr;
  h.reth.va = reinterpret_cast<uint64_t>(buf_) + sizeof(buf_) - 500;
  std::vector<uint8_t> first(512);
  const packet::ConstBuffer piece{p->payload.data(), p->payload.size()};
  auto n = packet::Build(h, {&piece, 1}, flow_, first);
  ASSERT_TRUE(n.ok());
  first.resize(*n);
  Receive(first);
  Receive(packets[1]);
  for (size_t i = sizeof(buf_) - 500; i < sizeof(buf_); ++i) ASSERT_EQ(buf_[i], 0) << i;
}

TEST_F(PacketResponderTest, AUcPacketForAnRcQpLeavesItsSequenceAlone) {
  // rxe check_type_state: the opcode's transport must be the QP's. An RC QP's expected PSN
  // lives in the same receive state, and a stray UC FIRST used to restart it.
  target_.e_.type = 2;  // RC
  target_.e_.wire.epsn = 40;
  for (auto& p : Packets(WrOpcode::kRdmaWrite, 600, 7)) Receive(p);
  EXPECT_EQ(target_.e_.wire.epsn, 40u);
  EXPECT_EQ(target_.e_.wire.message, 0u);
  EXPECT_EQ(buf_[1000], 0);
}

}  // namespace
}  // namespace softverbs::core
