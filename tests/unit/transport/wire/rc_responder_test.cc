// The RC responder's packet front end (transport/wire/rc_responder.h) against a fake target:
// hostile request packets at the expected PSN, each refused as rxe refuses it -- a NAK, the QP
// to ERR, and not one byte of the MR written (or read and sent) before the refusal.
#include "transport/wire/rc_responder.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/cq.h"
#include "core/mr.h"
#include "tests/unit/core/test_context.h"
#include "tests/unit/transport/fake_target.h"
#include "transport/codes.h"
#include "tests/unit/transport/wire/join_datagrams.h"
#include "tests/unit/transport/wire/wire_qp.h"

namespace softverbs::core {
namespace {

namespace packet = fabric::packet;
namespace op = packet::op;

using transport::qp_type::kRc;
constexpr uint32_t kMtu = wire_testing::kWireMtu;  // the QP's (ConnectWireQp)

class RcResponderTest : public CoreTest {
 protected:
  RcResponderTest() : target_(context_->local()) {
    cq_ = std::move(Cq::Create(*context_, 64, nullptr, 0).value());
    rq_ = std::move(transport::RecvQueue::Create(context_->local(), 16, 1).value());
    memset(buf_, 0x5a, sizeof buf_);
    // The MR is the middle of buf_: kGuard bytes on each side must never change.
    mr_ = std::move(Mr::Register(*pd_, {Addr(0), kMrBytes, Addr(0),
                                        access::kLocalWrite | access::kRemoteWrite | access::kRemoteRead |
                                            access::kRemoteAtomic})
                        .value());
    transport::QpEndpoint& e = target_.e_;
    wire_testing::ConnectWireQp(e, kRc, pd_->host_id());
    e.access = access::kRemoteWrite | access::kRemoteRead | access::kRemoteAtomic;
    e.max_dest_rd_atomic = 4;
    e.recv_cq = cq_->ring_ref();
    e.recv_queue = rq_->ref();
    flow_ = wire_testing::RequestFlow();
    path_.flow = flow_;
    path_.send = [this](std::span<const iovec> pieces, std::span<const uint16_t> counts) {
      for (const std::vector<uint8_t>& d : transport::JoinDatagrams(pieces, counts)) sent_.push_back(d);
      return Status::Ok();
    };
  }
  uint64_t Addr(size_t offset) { return reinterpret_cast<uint64_t>(buf_ + kGuard + offset); }
  void Receive(const packet::PacketHeaders& h, size_t payload_bytes = 0) {
    std::vector<uint8_t> payload(payload_bytes, 0xc3), bytes(payload_bytes + 128);
    const packet::ConstBuffer piece{payload.data(), payload.size()};
    auto n = packet::Build(h, {&piece, payload_bytes ? 1u : 0u}, flow_, bytes);
    ASSERT_TRUE(n.ok()) << n.status().rule();
    bytes.resize(*n);
    auto parsed = packet::Parse(bytes, &flow_);
    ASSERT_TRUE(parsed.ok()) << parsed.status().rule();
    transport::RcResponder::Receive(target_, *parsed, path_);
  }
  static packet::PacketHeaders Request(uint8_t opcode, uint32_t psn) {
    packet::PacketHeaders h;
    h.bth.opcode = static_cast<uint8_t>(op::kRc | opcode);
    h.bth.dest_qp = 0x1234;
    h.bth.psn = psn;
    h.bth.ack_req = true;
    return h;
  }
  // The responses sent, parsed: their opcodes and AETH syndromes.
  std::vector<std::pair<uint8_t, uint8_t>> Responses() {
    std::vector<std::pair<uint8_t, uint8_t>> out;
    for (const auto& s : sent_) {
      auto p = packet::Parse(s, &flow_);
      EXPECT_TRUE(p.ok());
      if (p.ok()) out.push_back({static_cast<uint8_t>(p->hdr.bth.opcode & 0x1f), p->hdr.aeth.syndrome});
    }
    return out;
  }
  bool Untouched() const {
    for (uint8_t b : buf_)
      if (b != 0x5a) return false;
    return true;
  }
  bool InError() const { return target_.e_.remote_error.load() != 0; }

  static constexpr size_t kGuard = 4096, kMrBytes = 4096;
  alignas(64) uint8_t buf_[kGuard + kMrBytes + kGuard];
  packet::IpUdpInfo flow_;
  transport::ResponsePath path_;
  std::vector<std::vector<uint8_t>> sent_;
  transport::FakeTarget target_;
  std::unique_ptr<Cq> cq_;
  std::unique_ptr<transport::RecvQueue> rq_;
  std::unique_ptr<Mr> mr_;
};

using Sent = std::vector<std::pair<uint8_t, uint8_t>>;

TEST_F(RcResponderTest, AWriteWhoseRethPassesTheMrEndWritesNothing) {
  // rxe check_rkey checks va .. va + DMA length at the FIRST packet: a message that would end
  // outside the MR is refused before its first byte lands (NAK remote access, QP to ERR).
  packet::PacketHeaders first = Request(op::kRdmaWriteFirst, 0);
  first.reth = {Addr(kMrBytes - kMtu), mr_->rkey(), 2 * kMtu};
  Receive(first, kMtu);
  Receive(Request(op::kRdmaWriteLast, 1), kMtu);
  EXPECT_TRUE(Untouched());
  EXPECT_EQ(Responses(), (Sent{{op::kAcknowledge, transport::syndrome::kRemoteAccess}}));
  EXPECT_TRUE(InError());
}

TEST_F(RcResponderTest, AReadOfFourGibIsAnInvalidRequestAndAllocatesNothing) {
  // IBA 9.4.4 / rxe: a DMA length over 2^31 is a length error (NAK invalid request). It used to
  // allocate a buffer of the RETH's length before any check: 4 GiB per packet from anyone.
  packet::PacketHeaders read = Request(op::kRdmaReadRequest, 0);
  read.reth = {Addr(0), mr_->rkey(), 0xffffffffu};
  Receive(read);
  EXPECT_EQ(Responses(), (Sent{{op::kAcknowledge, transport::syndrome::kInvalidRequest}}));
  EXPECT_TRUE(InError());
}

TEST_F(RcResponderTest, AReadPastTheMrIsRefusedBeforeAnyResponse) {
  packet::PacketHeaders read = Request(op::kRdmaReadRequest, 0);
  read.reth = {Addr(0), mr_->rkey(), kMrBytes + 1};
  Receive(read);
  EXPECT_EQ(Responses(), (Sent{{op::kAcknowledge, transport::syndrome::kRemoteAccess}}));
  EXPECT_TRUE(Untouched());
}

TEST_F(RcResponderTest, AReadInPacketsSendsTheMrBytes) {
  for (size_t i = 0; i < kMrBytes; ++i) buf_[kGuard + i] = static_cast<uint8_t>(i * 13);
  packet::PacketHeaders read = Request(op::kRdmaReadRequest, 7);
  target_.e_.wire.epsn = 7;
  read.reth = {Addr(100), mr_->rkey(), 3 * kMtu - 10};
  Receive(read);
  ASSERT_EQ(sent_.size(), 3u);
  std::vector<uint8_t> got;
  for (size_t i = 0; i < sent_.size(); ++i) {
    auto p = packet::Parse(sent_[i], &flow_);
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(p->hdr.bth.psn, 7 + i);
    EXPECT_EQ(p->hdr.bth.opcode & 0x1f, i == 0 ? op::kRdmaReadResponseFirst
                                        : i == 2 ? op::kRdmaReadResponseLast : op::kRdmaReadResponseMiddle);
    got.insert(got.end(), p->payload.begin(), p->payload.end());
  }
  EXPECT_EQ(got, std::vector<uint8_t>(buf_ + kGuard + 100, buf_ + kGuard + 100 + 3 * kMtu - 10));
  EXPECT_EQ(target_.e_.wire.epsn, 10u);  // a READ takes one PSN per response packet
}

TEST_F(RcResponderTest, AMiddlePacketWithoutAFirstMovesTheQpToError) {
  // IBA 9.7.5.2.2 / rxe check_op_seq: a class C error -- NAK invalid request, the QP to ERR.
  Receive(Request(op::kSendMiddle, 0), kMtu);
  EXPECT_EQ(Responses(), (Sent{{op::kAcknowledge, transport::syndrome::kInvalidRequest}}));
  EXPECT_TRUE(InError());
  EXPECT_TRUE(Untouched());
}

TEST_F(RcResponderTest, AnOnlyPacketOverTheMtuMovesTheQpToError) {
  // rxe check_length: an ONLY packet carries at most the path MTU.
  packet::PacketHeaders w = Request(op::kRdmaWriteOnly, 0);
  w.reth = {Addr(0), mr_->rkey(), 2 * kMtu};
  Receive(w, 2 * kMtu);
  EXPECT_EQ(Responses(), (Sent{{op::kAcknowledge, transport::syndrome::kInvalidRequest}}));
  EXPECT_TRUE(InError());
  EXPECT_TRUE(Untouched());
}

TEST_F(RcResponderTest, ADuplicateReadOutsideTheOriginalIsDropped) {
  // IBA 9.7.5.1.1 / rxe duplicate_request: a repeated READ is served again only within the
  // range (and with the R_Key) of the READ it repeats.
  packet::PacketHeaders read = Request(op::kRdmaReadRequest, 0);
  read.reth = {Addr(0), mr_->rkey(), 64};
  Receive(read);
  ASSERT_EQ(sent_.size(), 1u);
  read.reth = {Addr(1024), mr_->rkey(), 64};  // same PSN, another range
  Receive(read);
  EXPECT_EQ(sent_.size(), 1u);
  read.reth = {Addr(0), mr_->rkey(), 64};  // the same READ: replayed
  Receive(read);
  EXPECT_EQ(sent_.size(), 2u);
}

}  // namespace
}  // namespace softverbs::core
