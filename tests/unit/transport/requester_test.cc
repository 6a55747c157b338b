// The requester role against fake links: which link a work request takes (the destination GID
// decides, never the QP number), what Request it hands over, and how it completes.
#include "transport/requester.h"

#include <gtest/gtest.h>

#include <cstring>
#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "core/mr.h"
#include "tests/unit/transport/requester_fixture.h"
#include "transport/codes.h"

namespace softverbs::core {
namespace {

using transport::Reply;
using transport::ReplyCode;
using transport::Request;
using transport::SendWr;
using transport::WrOpcode;

using transport::qp_type::kRc, transport::qp_type::kUd;
using transport::qp_state::kRts;

struct FakeLink : transport::Link {
  Reply Carry(const Request& r) override {
    seen.push_back(r);
    return answer ? answer(r) : next;
  }
  std::function<Reply(const Request&)> answer;  // when set: the reply to each request
  void CarryMulticast(const Request& r, uint32_t) override { multicast.push_back(r); }
  std::vector<Request> seen;
  std::vector<Request> multicast;
  Reply next = Reply::Of(ReplyCode::kAck);
};

class RequesterTest : public requester_testing::RequesterFixture<FakeLink, FakeLink, 256> {
 protected:
  transport::RequesterConfig Config(uint32_t type, bool on_host) {
    transport::RequesterConfig c = BaseConfig(type, /*timeout=*/14, /*retry_cnt=*/7);
    c.dest_on_host = on_host;
    c.max_rd_atomic = 1;
    c.max_send_wr = 16;
    c.max_send_sge = 4;
    c.max_inline = 64;
    c.qkey = 0x5555;
    return c;
  }
  SendWr Wr(WrOpcode op, uint32_t length = 8) { return MakeWr(1, op, length); }
};

TEST_F(RequesterTest, ADestinationOffThisHostNeverReachesALocalQp) {
  // Issue 11's defect: QP number 0x201 may exist here, but the GID is another host's.
  requester_.Configure(Config(kRc, /*on_host=*/false));
  ASSERT_TRUE(requester_.Post(Wr(WrOpcode::kRdmaWrite), kRts).ok());
  EXPECT_TRUE(host_.seen.empty());
  ASSERT_EQ(wire_.seen.size(), 1u);
  EXPECT_EQ(wire_.seen[0].dest_qp, 0x201u);
  requester_.Configure(Config(kRc, /*on_host=*/true));
  ASSERT_TRUE(requester_.Post(Wr(WrOpcode::kRdmaWrite), kRts).ok());
  EXPECT_EQ(host_.seen.size(), 1u);
}

TEST_F(RequesterTest, UdRoutesEachDatagramByItsAddressHandle) {
  requester_.Configure(Config(kUd, false));
  SendWr w = Wr(WrOpcode::kSend);
  w.ud.remote_qpn = 0x300;
  w.ud.remote_qkey = 0x80000000;  // IBA 10.2.5: the QP's own Q_Key
  w.ud.on_host = false;
  ASSERT_TRUE(requester_.Post(w, kRts).ok());
  w.ud.on_host = true;
  w.ud.remote_qkey = 0x42;
  ASSERT_TRUE(requester_.Post(w, kRts).ok());
  ASSERT_EQ(wire_.seen.size(), 1u);
  ASSERT_EQ(host_.seen.size(), 1u);
  EXPECT_EQ(wire_.seen[0].qkey, 0x5555u);
  EXPECT_EQ(host_.seen[0].qkey, 0x42u);
  EXPECT_EQ(host_.seen[0].dest_qp, 0x300u);
  EXPECT_EQ(host_.seen[0].src_qp, 0x200u);
}

TEST_F(RequesterTest, TheRequestCarriesTheMessage) {
  requester_.Configure(Config(kRc, true));
  memcpy(buf_, "abcdefgh", 8);
  SendWr w = Wr(WrOpcode::kRdmaWriteWithImm);
  w.rkey = 0x777;
  w.remote_addr = 0x1000;
  w.imm_data = 0x01020304;
  w.flags |= transport::send_flag::kSolicited;
  ASSERT_TRUE(requester_.Post(w, kRts).ok());
  ASSERT_EQ(host_.seen.size(), 1u);
  const Request& r = host_.seen[0];
  EXPECT_EQ(r.opcode, WrOpcode::kRdmaWriteWithImm);
  EXPECT_EQ(r.rkey, 0x777u);
  EXPECT_EQ(r.remote_addr, 0x1000u);
  EXPECT_EQ(r.imm_data, 0x01020304u);
  EXPECT_TRUE(r.solicited);
  EXPECT_EQ(r.length, 8u);
  ASSERT_EQ(qp_.completions.size(), 1u);
  EXPECT_EQ(qp_.completions[0].byte_len, 8u);
}

TEST_F(RequesterTest, InlineIsIgnoredOnReadsAndABadSgeIsALocalProtectionError) {
  // Issue 17 item 8: IBV_SEND_INLINE on an RDMA READ (mlx5 ignores it) with an SGE that no key
  // covers completes with IBV_WC_LOC_PROT_ERR; nothing is read from the address.
  requester_.Configure(Config(kRc, true));
  SendWr w = Wr(WrOpcode::kRdmaRead);
  w.flags |= transport::send_flag::kInline;
  w.sge[0] = {0x10, 8, mr_->lkey()};  // not inside the MR
  w.inline_length = 4096;  // what an unchecked inline copy would have claimed
  ASSERT_TRUE(requester_.Post(w, kRts).ok());
  EXPECT_TRUE(host_.seen.empty());
  ASSERT_EQ(qp_.completions.size(), 1u);
  EXPECT_EQ(qp_.completions[0].status, transport::wc_status::kLocProtErr);
  EXPECT_EQ(qp_.errors.load(), 1);
}

// Post decides most work requests by a quick test (PlainlyValid) and the rest by Check: each
// rule refuses with EINVAL on either side of it, nothing is carried and nothing completes, and
// the work requests at each bound are accepted.
TEST_F(RequesterTest, EachPostRuleRefusesWithEinvalAndItsBoundsPass) {
  using transport::qp_state::kRtr;
  using transport::qp_type::kUc;
  auto code = [&](uint32_t type, SendWr w, uint32_t state = kRts, uint8_t max_rd_atomic = 1) {
    transport::RequesterConfig c = Config(type, true);
    c.max_rd_atomic = max_rd_atomic;
    requester_.Configure(c);
    return requester_.Post(w, state).code();
  };
  auto inlined = [&](WrOpcode op, uint32_t length) {
    SendWr w = Wr(op);
    w.flags |= transport::send_flag::kInline;
    w.inline_data = buf_;
    w.inline_length = length;
    return w;
  };
  SendWr many = Wr(WrOpcode::kSend);
  many.num_sge = 5;  // max_send_sge 4
  for (uint32_t i = 1; i < 5; ++i) many.sge[i] = many.sge[0];
  EXPECT_EQ(code(kRc, Wr(WrOpcode::kSend), kRtr), EINVAL);
  EXPECT_EQ(code(kRc, many), EINVAL);
  EXPECT_EQ(code(kRc, inlined(WrOpcode::kSend, 65)), EINVAL);
  EXPECT_EQ(code(kRc, inlined(WrOpcode::kRdmaWrite, 65)), EINVAL);
  EXPECT_EQ(code(kUd, Wr(WrOpcode::kRdmaWrite)), EINVAL);
  EXPECT_EQ(code(kUc, Wr(WrOpcode::kRdmaRead)), EINVAL);
  EXPECT_EQ(code(kUc, Wr(WrOpcode::kAtomicFetchAdd)), EINVAL);
  EXPECT_EQ(code(kRc, Wr(WrOpcode::kAtomicCmpSwp), kRts, /*max_rd_atomic=*/0), EINVAL);
  EXPECT_EQ(code(kRc, Wr(static_cast<WrOpcode>(12))), EINVAL);
  EXPECT_TRUE(host_.seen.empty());
  EXPECT_TRUE(qp_.completions.empty());
  many.num_sge = 4;
  EXPECT_EQ(code(kRc, many), 0);
  EXPECT_EQ(code(kRc, inlined(WrOpcode::kSend, 64)), 0);
  EXPECT_EQ(code(kUc, inlined(WrOpcode::kRdmaWriteWithImm, 64)), 0);
  EXPECT_EQ(code(kRc, inlined(WrOpcode::kRdmaRead, 4096)), 0);  // inline ignored on a READ
  EXPECT_EQ(code(kRc, Wr(WrOpcode::kAtomicCmpSwp)), 0);
  SendWr datagram = Wr(WrOpcode::kSendWithImm);
  datagram.ud = {};
  datagram.ud.on_host = true;
  datagram.ud.remote_qpn = 0x300;
  EXPECT_EQ(code(kUd, datagram), 0);
  EXPECT_EQ(host_.seen.size(), 6u);
  EXPECT_EQ(qp_.completions.size(), 6u);
}

TEST_F(RequesterTest, AtomicOriginalLandsInTheLocalBuffer) {
  requester_.Configure(Config(kRc, true));
  host_.next = Reply::Of(ReplyCode::kAck);
  host_.next.original = 0x1122334455667788;
  ASSERT_TRUE(requester_.Post(Wr(WrOpcode::kAtomicFetchAdd), kRts).ok());
  uint64_t got;
  memcpy(&got, buf_, 8);
  EXPECT_EQ(got, 0x1122334455667788u);
}

TEST_F(RequesterTest, AtomicWriteCarriesEightBytesOnThisHostOnly) {
  // IBA 1.5 9.4.6: RC, 8 bytes; the wire peer (rxe 6.1) has no opcode 0x1D: EOPNOTSUPP there.
  requester_.Configure(Config(kRc, false));
  EXPECT_EQ(requester_.Post(Wr(WrOpcode::kAtomicWrite), kRts).code(), EOPNOTSUPP);
  EXPECT_TRUE(wire_.seen.empty());
  requester_.Configure(Config(kUd, false));
  EXPECT_EQ(requester_.Post(Wr(WrOpcode::kAtomicWrite), kRts).code(), EINVAL);
  requester_.Configure(Config(kRc, true));
  memcpy(buf_, "8 bytes!", 8);
  SendWr w = Wr(WrOpcode::kAtomicWrite);
  w.rkey = 0x99;
  w.remote_addr = 0x2000;
  ASSERT_TRUE(requester_.Post(w, kRts).ok());
  ASSERT_EQ(host_.seen.size(), 1u);
  EXPECT_EQ(host_.seen[0].opcode, WrOpcode::kAtomicWrite);
  EXPECT_EQ(host_.seen[0].length, 8u);
  ASSERT_EQ(qp_.completions.size(), 1u);
  EXPECT_EQ(qp_.completions[0].opcode, transport::wc_opcode::kAtomicWrite);
  EXPECT_EQ(qp_.completions[0].status, transport::wc_status::kSuccess);
  // Not 8 bytes: a local length error (an SGE) or a refusal at post (inline).
  ASSERT_TRUE(requester_.Post(Wr(WrOpcode::kAtomicWrite, 4), kRts).ok());
  EXPECT_EQ(qp_.completions.back().status, transport::wc_status::kLocLenErr);
  requester_.Configure(Config(kRc, true));
  SendWr in = Wr(WrOpcode::kAtomicWrite);
  in.flags |= transport::send_flag::kInline;
  in.inline_data = buf_;
  in.inline_length = 4;
  EXPECT_EQ(requester_.Post(in, kRts).code(), EINVAL);
}

TEST_F(RequesterTest, AFailureFlushesWhatFollows) {
  requester_.Configure(Config(kRc, true));
  host_.next = Reply::Of(ReplyCode::kRemoteAccess);
  ASSERT_TRUE(requester_.Post(Wr(WrOpcode::kRdmaWrite), kRts).ok());
  host_.next = Reply::Of(ReplyCode::kAck);
  SendWr w = Wr(WrOpcode::kRdmaWrite);
  w.wr_id = 2;
  ASSERT_TRUE(requester_.Post(w, kRts).ok());
  ASSERT_EQ(qp_.completions.size(), 2u);
  EXPECT_EQ(qp_.completions[0].status, transport::wc_status::kRemAccessErr);
  EXPECT_EQ(qp_.completions[1].status, transport::wc_status::kWrFlushErr);
  EXPECT_EQ(host_.seen.size(), 1u);  // the second never left
}

// mlx5dv_dci_stream_id_reset(3): on a DCI with streams, an error completion flushes the WRs of
// its stream only (those waiting and those posted until the reset); the other streams go on,
// and 2^log_num_errored streams in error take the DCI to ERR.
TEST_F(RequesterTest, ADciStreamErrorFlushesOnlyItsStream) {
  transport::RequesterConfig c = Config(kRc, true);
  c.dc_initiator = true;
  c.completer.dci_streams = {true, 4, 1};  // two streams in error stop the DCI
  requester_.Configure(c);
  constexpr uint32_t kBad = 0xbad, kGood = 0x201;
  std::atomic<int> bad_attempts{0};
  // The DCT kBad answers RNR once, then a remote access error (a bad rkey); kGood ACKs.
  host_.answer = [&](const Request& r) {
    if (r.dest_qp != kBad) return Reply::Of(ReplyCode::kAck);
    return bad_attempts++ == 0 ? Reply::Rnr(1) : Reply::Of(ReplyCode::kRemoteAccess);
  };
  auto wr = [&](uint64_t id, uint16_t stream, uint32_t dctn) {
    SendWr w = Wr(WrOpcode::kRdmaWrite);
    w.wr_id = id;
    w.dc.set = true;
    w.dc.stream_id = stream;
    w.dc.remote_dctn = dctn;
    w.dc.on_host = true;
    return w;
  };
  auto wait = [&](size_t n) {
    for (int i = 0; i < 5000 && qp_.count() < n; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return qp_.count();
  };
  auto completion = [&](size_t i) {
    std::lock_guard lock(qp_.mu);
    return qp_.completions.at(i);
  };
  ASSERT_TRUE(requester_.Post(wr(1, 1, kBad), kRts).ok());   // RNR: waits in the queue
  ASSERT_TRUE(requester_.Post(wr(2, 1, kGood), kRts).ok());  // behind it, same stream
  ASSERT_TRUE(requester_.Post(wr(3, 2, kGood), kRts).ok());  // behind it, another stream
  ASSERT_EQ(wait(3), 3u);
  EXPECT_EQ(completion(0).wr_id, 1u);
  EXPECT_EQ(completion(0).status, transport::wc_status::kRemAccessErr);
  EXPECT_EQ(completion(1).wr_id, 2u);
  EXPECT_EQ(completion(1).status, transport::wc_status::kWrFlushErr);
  EXPECT_EQ(completion(2).wr_id, 3u);
  EXPECT_EQ(completion(2).status, transport::wc_status::kSuccess);
  EXPECT_EQ(qp_.errors, 0);
  size_t good_carried = 0;
  for (const Request& r : host_.seen) good_carried += r.dest_qp == kGood ? 1 : 0;
  EXPECT_EQ(good_carried, 1u);  // WR 2 never left
  // Posted to the stream in error: flushed without being carried, until the stream is reset.
  ASSERT_TRUE(requester_.Post(wr(4, 1, kGood), kRts).ok());
  ASSERT_EQ(wait(4), 4u);
  EXPECT_EQ(completion(3).status, transport::wc_status::kWrFlushErr);
  EXPECT_EQ(requester_.ResetStream(2).code(), EINVAL);  // not in error
  ASSERT_TRUE(requester_.ResetStream(1).ok());
  ASSERT_TRUE(requester_.Post(wr(5, 1, kGood), kRts).ok());
  ASSERT_EQ(wait(5), 5u);
  EXPECT_EQ(completion(4).status, transport::wc_status::kSuccess);
  // Streams 3 and 4 fail: the second stream in error takes the DCI to ERR; all is flushed.
  ASSERT_TRUE(requester_.Post(wr(6, 3, kBad), kRts).ok());
  EXPECT_EQ(qp_.errors, 0);
  ASSERT_TRUE(requester_.Post(wr(7, 4, kBad), kRts).ok());
  EXPECT_EQ(qp_.errors, 1);
  ASSERT_TRUE(requester_.Post(wr(8, 5, kGood), kRts).ok());
  ASSERT_EQ(wait(8), 8u);
  EXPECT_EQ(completion(5).status, transport::wc_status::kRemAccessErr);
  EXPECT_EQ(completion(6).status, transport::wc_status::kRemAccessErr);
  EXPECT_EQ(completion(7).status, transport::wc_status::kWrFlushErr);
}

TEST_F(RequesterTest, MulticastGoesToTheHostsMembers) {
  requester_.Configure(Config(kUd, false));
  SendWr w = Wr(WrOpcode::kSend);
  const uint8_t group[16] = {0xff, 0x0e, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  memcpy(w.ud.dgid, group, 16);
  w.ud.remote_qpn = 0xffffff;
  ASSERT_TRUE(requester_.Post(w, kRts).ok());
  EXPECT_EQ(host_.multicast.size(), 1u);
  EXPECT_TRUE(wire_.seen.empty());
}

}  // namespace
}  // namespace softverbs::core

namespace softverbs::core {
namespace {

// A link that answers later, as the wire does: everything carried is kPending; the test plays
// the responder through the sink.
struct AsyncLink : transport::Link {
  void Attach(transport::ReplySink* s) override { sink = s; }
  Reply Carry(const Request& r) override {
    std::lock_guard lock(mu);
    seen.push_back(r);
    return Reply::Of(ReplyCode::kPending);
  }
  void CarryMulticast(const Request&, uint32_t) override {}
  size_t count() {
    std::lock_guard lock(mu);
    return seen.size();
  }
  Request at(size_t i) {
    std::lock_guard lock(mu);
    return seen.at(i);
  }
  std::mutex mu;
  std::vector<Request> seen;
  transport::ReplySink* sink = nullptr;
};

class AsyncRequesterTest : public requester_testing::RequesterFixture<FakeLink, AsyncLink, 4096> {
 protected:
  // The default local ACK timeout (code 20, about 4 s) expires during no test that does not
  // ask for one: at 14 (67 ms) a test counting carried requests saw a retransmission under
  // ThreadSanitizer on a loaded machine.
  void Configure(uint8_t timeout = 20, uint8_t retry_cnt = 7) {
    transport::RequesterConfig c = BaseConfig(kRc, timeout, retry_cnt);
    c.dest_on_host = false;  // the wire
    c.path_mtu = 1024;
    c.max_rd_atomic = 4;
    c.max_send_wr = 64;
    c.max_send_sge = 4;
    requester_.Configure(c);
    requester_.SetPsn(100);
  }
  SendWr Wr(uint64_t id, WrOpcode op, uint32_t length = 8) { return MakeWr(id, op, length); }
};

TEST_F(AsyncRequesterTest, MessagesPipelineAndCompleteInOrder) {
  Configure();
  for (uint64_t id = 1; id <= 3; ++id) ASSERT_TRUE(requester_.Post(Wr(id, WrOpcode::kSend, 2048), kRts).ok());
  ASSERT_EQ(wire_.count(), 3u);  // all three carried before any reply
  EXPECT_EQ(wire_.at(0).psn, 100u);
  EXPECT_EQ(wire_.at(1).psn, 102u);  // 2048 bytes at MTU 1024: two PSNs each
  EXPECT_EQ(wire_.at(2).psn, 104u);
  EXPECT_TRUE(qp_.completions.empty());
  wire_.sink->OnReply(wire_.at(1).ticket, Reply::Of(ReplyCode::kAck));  // not the oldest: stale
  EXPECT_TRUE(qp_.completions.empty());
  for (size_t i = 0; i < 3; ++i) wire_.sink->OnReply(wire_.at(i).ticket, Reply::Of(ReplyCode::kAck));
  ASSERT_EQ(qp_.completions.size(), 3u);
  for (uint64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(qp_.completions[i].wr_id, i + 1);
    EXPECT_EQ(qp_.completions[i].byte_len, 2048u);
  }
}

TEST_F(AsyncRequesterTest, SequenceNakCarriesEverythingAgainWithTheSamePsns) {
  Configure();
  for (uint64_t id = 1; id <= 2; ++id) ASSERT_TRUE(requester_.Post(Wr(id, WrOpcode::kRdmaWrite), kRts).ok());
  wire_.sink->OnReply(wire_.at(0).ticket, Reply::Of(ReplyCode::kSequenceError));
  ASSERT_EQ(wire_.count(), 4u);  // go-back-N, at once
  EXPECT_EQ(wire_.at(2).psn, wire_.at(0).psn);
  EXPECT_EQ(wire_.at(3).psn, wire_.at(1).psn);
  EXPECT_EQ(wire_.at(2).ticket, wire_.at(0).ticket);
  wire_.sink->OnReply(wire_.at(2).ticket, Reply::Of(ReplyCode::kAck));
  wire_.sink->OnReply(wire_.at(3).ticket, Reply::Of(ReplyCode::kAck));
  EXPECT_EQ(qp_.completions.size(), 2u);
}

TEST_F(AsyncRequesterTest, ReadResponseBytesStartTheRetryCountAgain) {
  // rxe resets its retry counters on every READ response: a READ whose responses keep getting
  // overtaken on a reordering path retries as long as each attempt gets further; only
  // retry_cnt + 1 attempts in a row without a byte fail it.
  Configure(14, 1);
  ASSERT_TRUE(requester_.Post(Wr(7, WrOpcode::kRdmaRead, 6), kRts).ok());
  const uint8_t data[] = {'r', 'e', 's', 'p', 'o', 'n'};
  for (size_t attempt = 0; attempt < 5; ++attempt) {
    ASSERT_EQ(wire_.count(), attempt + 1);
    wire_.sink->OnResponseData(wire_.at(attempt).ticket, 0, {data, 3});
    wire_.sink->OnReply(wire_.at(attempt).ticket, Reply::Of(ReplyCode::kSequenceError));
  }
  EXPECT_TRUE(qp_.completions.empty());  // each retry followed bytes: never more than 1 in a row
  wire_.sink->OnReply(wire_.at(5).ticket, Reply::Of(ReplyCode::kSequenceError));  // no byte: the 2nd in a row
  ASSERT_EQ(qp_.completions.size(), 1u);
  EXPECT_EQ(qp_.completions[0].status, transport::wc_status::kRetryExcErr);
}

TEST_F(AsyncRequesterTest, AnAckGivesTheNextMessageAWholeTimeout) {
  // IBA 9.7.6.1.3 / rxe: the ACK timer restarts with every response. Deadlines only, from the
  // monotonic clock: the second message's is at least one timeout after the first's ACK.
  Configure(14);
  ASSERT_TRUE(requester_.Post(Wr(1, WrOpcode::kRdmaWrite), kRts).ok());
  ASSERT_TRUE(requester_.Post(Wr(2, WrOpcode::kRdmaWrite), kRts).ok());
  ASSERT_EQ(wire_.count(), 2u);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const auto acked = std::chrono::steady_clock::now();
  wire_.sink->OnReply(wire_.at(0).ticket, Reply::Of(ReplyCode::kAck));
  EXPECT_GE(requester_.Progress(), acked + transport::AckTimeout(14));
  EXPECT_EQ(wire_.count(), 2u);
}

TEST_F(AsyncRequesterTest, AtMostMaxRdAtomicReadsAreOutstanding) {
  // IBA 9.7.5.1.4: the responder keeps max_dest_rd_atomic READ/atomic resources to answer
  // duplicates; a requester with more outstanding would lose its oldest READ for good.
  Configure();  // max_rd_atomic 4
  for (uint64_t id = 1; id <= 6; ++id) ASSERT_TRUE(requester_.Post(Wr(id, WrOpcode::kRdmaRead, 6), kRts).ok());
  ASSERT_TRUE(requester_.Post(Wr(7, WrOpcode::kRdmaWrite), kRts).ok());
  EXPECT_EQ(wire_.count(), 4u);  // the fifth READ waits, and the WRITE behind it
  wire_.sink->OnReply(wire_.at(0).ticket, Reply::Of(ReplyCode::kAck));
  EXPECT_EQ(wire_.count(), 5u);
  for (size_t i = 1; i < 5; ++i) wire_.sink->OnReply(wire_.at(i).ticket, Reply::Of(ReplyCode::kAck));
  EXPECT_EQ(wire_.count(), 7u);
}

TEST_F(AsyncRequesterTest, ReadResponseBytesLandInTheLocalBuffer) {
  Configure();
  ASSERT_TRUE(requester_.Post(Wr(7, WrOpcode::kRdmaRead, 6), kRts).ok());
  const uint8_t data[] = {'r', 'e', 's', 'p', 'o', 'n'};
  wire_.sink->OnResponseData(wire_.at(0).ticket, 0, {data, 3});
  wire_.sink->OnResponseData(wire_.at(0).ticket, 3, {data + 3, 3});
  wire_.sink->OnReply(wire_.at(0).ticket, Reply::Of(ReplyCode::kAck));
  ASSERT_EQ(qp_.completions.size(), 1u);
  EXPECT_EQ(qp_.completions[0].status, transport::wc_status::kSuccess);
  EXPECT_EQ(memcmp(buf_, "respon", 6), 0);
}

TEST_F(AsyncRequesterTest, AtomicOriginalArrivesWithItsAcknowledgement) {
  Configure();
  ASSERT_TRUE(requester_.Post(Wr(8, WrOpcode::kAtomicCmpSwp), kRts).ok());
  Reply ack = Reply::Of(ReplyCode::kAck);
  ack.original = 0xabcdef;
  wire_.sink->OnReply(wire_.at(0).ticket, ack);
  uint64_t got;
  memcpy(&got, buf_, 8);
  EXPECT_EQ(got, 0xabcdefu);
  ASSERT_EQ(qp_.completions.size(), 1u);
  EXPECT_EQ(qp_.completions[0].byte_len, 8u);
}

TEST_F(AsyncRequesterTest, AnAcknowledgementRestartsTheTimerOfWhatRemains) {
  // rxe re-arms its retransmission timer on each ACK that leaves requests outstanding
  // (rxe_comp.c): the next request's timeout counts from that ACK, not from when it was sent.
  Configure(/*timeout=*/20);  // about 4 s: nothing expires during the test
  ASSERT_TRUE(requester_.Post(Wr(1, WrOpcode::kSend), kRts).ok());
  ASSERT_TRUE(requester_.Post(Wr(2, WrOpcode::kSend), kRts).ok());
  ASSERT_EQ(wire_.count(), 2u);  // both in flight
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const auto before_ack = std::chrono::steady_clock::now();
  wire_.sink->OnReply(wire_.at(0).ticket, Reply::Of(ReplyCode::kAck));
  ASSERT_EQ(qp_.completions.size(), 1u);
  // Progress() answers when the head (the second message) is next due: a full timeout after
  // the acknowledgement, no earlier.
  EXPECT_GE(requester_.Progress(), before_ack + transport::AckTimeout(20));
  EXPECT_EQ(wire_.count(), 2u);
}

TEST_F(AsyncRequesterTest, SilenceEndsInRetryExceededAndFlushesTheRest) {
  // IBA 9.7.6.1.3: sent once, retried retry_cnt times; each attempt waits its timeout (8 us).
  Configure(/*timeout=*/1, /*retry_cnt=*/2);
  ASSERT_TRUE(requester_.Post(Wr(1, WrOpcode::kSend), kRts).ok());
  ASSERT_TRUE(requester_.Post(Wr(2, WrOpcode::kSend), kRts).ok());
  ASSERT_TRUE(WaitFor([&] { return qp_.count() == 2; }));
  EXPECT_EQ(qp_.completions[0].status, transport::wc_status::kRetryExcErr);
  EXPECT_EQ(qp_.completions[1].status, transport::wc_status::kWrFlushErr);
  size_t first = 0;  // the first message was carried once and retried retry_cnt times
  for (size_t i = 0; i < wire_.count(); ++i) first += wire_.at(i).ticket == wire_.at(0).ticket;
  EXPECT_EQ(first, 3u);
  EXPECT_EQ(qp_.errors.load(), 1);
}

}  // namespace
}  // namespace softverbs::core

namespace softverbs::core {
namespace {

// A long SEND or WRITE to another host slides through the 128-PSN window (as rxe's requester):
// a part is carried, and each acknowledgement inside the message lets the next packets go.
class SlidingRequesterTest : public AsyncRequesterTest {
 protected:
  static constexpr uint32_t kMtu = 256, kPackets = 300;
  SlidingRequesterTest() : big_(kMtu * kPackets, 0x5a) {
    big_mr_ = std::move(Mr::Register(*pd_, {reinterpret_cast<uint64_t>(big_.data()), big_.size(),
                                            reinterpret_cast<uint64_t>(big_.data()), access::kLocalWrite})
                            .value());
  }
  void ConfigureMtu(uint8_t timeout = 14) {
    Configure(timeout);
    transport::RequesterConfig c = BaseConfig(kRc, timeout, /*retry_cnt=*/7);
    c.path_mtu = kMtu;
    c.max_rd_atomic = 4;
    c.max_send_wr = 64;
    c.max_send_sge = 4;
    requester_.Configure(c);
  }
  SendWr Big(uint64_t id) {
    SendWr w = Wr(id, WrOpcode::kRdmaWrite);
    w.sge[0] = {reinterpret_cast<uint64_t>(big_.data()), static_cast<uint32_t>(big_.size()), big_mr_->lkey()};
    return w;
  }
  Reply Partial(uint32_t acked) {
    Reply r = Reply::Of(ReplyCode::kPartial);
    r.acked = acked;
    return r;
  }
  std::vector<uint8_t> big_;
  std::unique_ptr<Mr> big_mr_;
};

TEST_F(SlidingRequesterTest, ALongWriteSlidesThroughTheWindowAsItsPartsAreAcknowledged) {
  ConfigureMtu();
  ASSERT_TRUE(requester_.Post(Big(1), kRts).ok());
  ASSERT_TRUE(requester_.Post(Wr(2, WrOpcode::kSend), kRts).ok());
  ASSERT_EQ(wire_.count(), 1u);  // the window is full: the SEND waits
  const Request first = wire_.at(0);
  EXPECT_EQ(first.psn, 100u);
  EXPECT_EQ(first.first_packet, 0u);
  EXPECT_EQ(first.packets, 128u);
  EXPECT_GT(first.ack_every, 0u);
  wire_.sink->OnReply(first.ticket, Partial(32));
  ASSERT_EQ(wire_.count(), 2u);
  EXPECT_EQ(wire_.at(1).ticket, first.ticket);
  EXPECT_EQ(wire_.at(1).psn, 100u);  // the message's first PSN; the part starts further
  EXPECT_EQ(wire_.at(1).first_packet, 128u);
  EXPECT_EQ(wire_.at(1).packets, 32u);
  wire_.sink->OnReply(first.ticket, Partial(20));  // a late, older ACK: nothing moves
  EXPECT_EQ(wire_.count(), 2u);
  wire_.sink->OnReply(first.ticket, Partial(150));  // 10 outstanding: 118 more may go
  ASSERT_EQ(wire_.count(), 3u);
  EXPECT_EQ(wire_.at(2).first_packet, 160u);
  EXPECT_EQ(wire_.at(2).packets, 118u);
  wire_.sink->OnReply(first.ticket, Partial(250));
  ASSERT_EQ(wire_.count(), 5u);  // the rest of the WRITE (22 packets), then the SEND
  EXPECT_EQ(wire_.at(3).first_packet, 278u);
  EXPECT_EQ(wire_.at(3).packets, 22u);
  EXPECT_EQ(wire_.at(4).psn, 100u + kPackets);
  EXPECT_EQ(wire_.at(4).packets, 1u);
  EXPECT_TRUE(qp_.completions.empty());
  wire_.sink->OnReply(first.ticket, Reply::Of(ReplyCode::kAck));
  wire_.sink->OnReply(wire_.at(4).ticket, Reply::Of(ReplyCode::kAck));
  ASSERT_EQ(qp_.completions.size(), 2u);
  EXPECT_EQ(qp_.completions[0].wr_id, 1u);
  EXPECT_EQ(qp_.completions[0].byte_len, kMtu * kPackets);
  EXPECT_EQ(qp_.completions[1].wr_id, 2u);
}

TEST_F(SlidingRequesterTest, ASequenceNakInsideAMessageResumesAtItsGap) {
  ConfigureMtu();
  ASSERT_TRUE(requester_.Post(Big(1), kRts).ok());
  Reply nak = Reply::Of(ReplyCode::kSequenceError);
  nak.acked = 40;  // packets 0..39 taken, 40 missing
  nak.progress = true;
  wire_.sink->OnReply(wire_.at(0).ticket, nak);
  ASSERT_EQ(wire_.count(), 2u);  // go-back-N from the gap, at once
  EXPECT_EQ(wire_.at(1).ticket, wire_.at(0).ticket);
  EXPECT_EQ(wire_.at(1).psn, 100u);
  EXPECT_EQ(wire_.at(1).first_packet, 40u);
  EXPECT_EQ(wire_.at(1).packets, 128u);
  EXPECT_TRUE(qp_.completions.empty());
}

TEST_F(SlidingRequesterTest, ATimeoutResumesAtTheFirstPacketNotAcknowledged) {
  // ~67 ms: long enough that the timer cannot fire between the post and the partial ACK below
  // (at ~1 ms it did, under ThreadSanitizer), short enough to wait for.
  ConfigureMtu(/*timeout=*/14);
  ASSERT_TRUE(requester_.Post(Big(1), kRts).ok());
  wire_.sink->OnReply(wire_.at(0).ticket, Partial(64));
  ASSERT_EQ(wire_.count(), 2u);  // packets 128..191
  ASSERT_TRUE(WaitFor([&] { return wire_.count() >= 3; }));  // silence: carried again
  EXPECT_EQ(wire_.at(2).first_packet, 64u);
  EXPECT_EQ(wire_.at(2).packets, 128u);
}

// A part after the first reads the local side again: if its MR is gone by then, nothing more
// is carried, and the WRITE completes in error (once) when its ACK timeout expires.
TEST_F(SlidingRequesterTest, AnMrWithdrawnMidMessageFailsItOnceAtItsTimeout) {
  // 17 ms (4.096 us << 12): at 1 ms, a test thread descheduled between the post and the
  // deregistration (a loaded CI machine) saw the first part carried again before the MR went.
  ConfigureMtu(/*timeout=*/12);
  ASSERT_TRUE(requester_.Post(Big(1), kRts).ok());
  big_mr_.reset();  // ibv_dereg_mr while the WRITE is in flight
  wire_.sink->OnReply(wire_.at(0).ticket, Partial(64));
  EXPECT_EQ(wire_.count(), 1u);
  ASSERT_TRUE(WaitFor([&] { return qp_.count() >= 1; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_EQ(qp_.count(), 1u);
  EXPECT_EQ(qp_.completions[0].status, transport::wc_status::kLocProtErr);
  EXPECT_EQ(wire_.count(), 1u);
}

// Packet pacing (ibv_modify_qp_rate_limit(3)): the requester consults its pacer before each
// message, with a clock the test moves. The fake clock runs an hour ahead of the real one, so
// the progress thread, scheduled in its terms, stays asleep while the test calls Progress().
class PacedRequesterTest : public RequesterTest {
 protected:
  using TimePoint = std::chrono::steady_clock::time_point;
  PacedRequesterTest() { requester_.SetPacingClock([this] { return now_; }); }
  // 8000 kbps: one byte per microsecond; a bucket of 100 bytes.
  void Configure(uint32_t rate_kbps) {
    transport::RequesterConfig c = Config(kRc, /*on_host=*/true);
    c.rate_limit_kbps = rate_kbps;
    c.max_burst_sz = 100;
    requester_.Configure(c);
  }
  void PostSends(int n) {
    for (int i = 1; i <= n; ++i) {
      SendWr w = Wr(WrOpcode::kSend, 100);
      w.wr_id = static_cast<uint64_t>(i);
      ASSERT_TRUE(requester_.Post(w, kRts).ok()) << i;
    }
  }
  const TimePoint t0_ = std::chrono::steady_clock::now() + std::chrono::hours(1);
  TimePoint now_ = t0_;
};

TEST_F(PacedRequesterTest, EachMessageLeavesWhenTheBucketAllowsAndCompletesOnce) {
  Configure(8000);
  PostSends(3);
  // The first empties the bucket; the others wait, delayed and not failed.
  EXPECT_EQ(host_.seen.size(), 1u);
  EXPECT_EQ(qp_.count(), 1u);
  // Nothing changes until the pacing clock moves; the queue is due when the bucket holds the
  // next message's 100 bytes again.
  EXPECT_EQ(requester_.Progress(), t0_ + std::chrono::microseconds(100));
  EXPECT_EQ(host_.seen.size(), 1u);
  now_ = t0_ + std::chrono::microseconds(100) - std::chrono::nanoseconds(1);  // one ns early
  requester_.Progress();
  EXPECT_EQ(host_.seen.size(), 1u);
  now_ += std::chrono::nanoseconds(1);
  EXPECT_EQ(requester_.Progress(), t0_ + std::chrono::microseconds(200));
  EXPECT_EQ(host_.seen.size(), 2u);
  now_ = t0_ + std::chrono::microseconds(200);
  EXPECT_EQ(requester_.Progress(), TimePoint::max());
  ASSERT_EQ(host_.seen.size(), 3u);
  ASSERT_EQ(qp_.count(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(qp_.completions[i].wr_id, i + 1);
    EXPECT_EQ(qp_.completions[i].status, transport::wc_status::kSuccess);
    EXPECT_EQ(qp_.completions[i].byte_len, 100u);
  }
}

TEST_F(PacedRequesterTest, TheWireIsPacedTheSameWay) {
  // The requester paces before it picks a link: UD datagrams to another host wait alike.
  transport::RequesterConfig c = Config(kUd, /*on_host=*/false);
  c.rate_limit_kbps = 8000;
  c.max_burst_sz = 100;
  requester_.Configure(c);
  for (int i = 1; i <= 2; ++i) {
    SendWr w = Wr(WrOpcode::kSend, 100);
    w.wr_id = static_cast<uint64_t>(i);
    w.ud.remote_qpn = 0x300;
    w.ud.on_host = false;
    ASSERT_TRUE(requester_.Post(w, kRts).ok());
  }
  EXPECT_EQ(wire_.seen.size(), 1u);
  EXPECT_EQ(requester_.Progress(), t0_ + std::chrono::microseconds(100));
  now_ = t0_ + std::chrono::microseconds(100);
  requester_.Progress();
  EXPECT_EQ(wire_.seen.size(), 2u);
  EXPECT_TRUE(host_.seen.empty());
  ASSERT_EQ(qp_.count(), 2u);
  EXPECT_EQ(qp_.completions[1].wr_id, 2u);
}

TEST_F(PacedRequesterTest, UnlimitedSendsEverythingAtOnce) {
  Configure(0);
  PostSends(3);
  EXPECT_EQ(host_.seen.size(), 3u);
  EXPECT_EQ(qp_.count(), 3u);
}

TEST_F(PacedRequesterTest, LocalOperationsAreNotPaced) {
  Configure(8000);
  PostSends(1);
  // BIND_MW of a window that does not exist: executed (and failed) at once, not held back.
  SendWr bind;
  bind.wr_id = 9;
  bind.opcode = WrOpcode::kBindMw;
  bind.flags = transport::send_flag::kSignaled;
  ASSERT_TRUE(requester_.Post(bind, kRts).ok());
  ASSERT_EQ(qp_.count(), 2u);
  EXPECT_EQ(qp_.completions[1].wr_id, 9u);
}

TEST_F(PacedRequesterTest, WhatWaitsForThePacerIsFlushedOnceWhenTheQpFails) {
  Configure(8000);
  PostSends(3);
  requester_.Flush();
  ASSERT_EQ(qp_.count(), 3u);
  EXPECT_EQ(qp_.completions[0].status, transport::wc_status::kSuccess);
  EXPECT_EQ(qp_.completions[1].status, transport::wc_status::kWrFlushErr);
  EXPECT_EQ(qp_.completions[2].status, transport::wc_status::kWrFlushErr);
  now_ += std::chrono::hours(1);
  EXPECT_EQ(requester_.Progress(), TimePoint::max());
  EXPECT_EQ(qp_.count(), 3u);
  EXPECT_EQ(host_.seen.size(), 1u);
}

TEST_F(PacedRequesterTest, ANewRateTakesEffectOnTheNextMessage) {
  Configure(8000);
  PostSends(2);
  ASSERT_EQ(host_.seen.size(), 1u);
  Configure(0);  // ibv_modify_qp_rate_limit(rate_limit 0): unlimited from now on
  requester_.Progress();
  EXPECT_EQ(host_.seen.size(), 2u);
  EXPECT_EQ(qp_.count(), 2u);
}

}  // namespace
}  // namespace softverbs::core
