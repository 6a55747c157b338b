// The requester's one-sided lane (transport/requester_lane.cc) against a fake link: what it takes
// (a WRITE, READ or atomic of one SGE through a kept lkey, nothing waiting, the link able to run
// it at once) and what it leaves to Post untouched; that both ways number messages from one PSN
// counter and complete through one completer.
#include <gtest/gtest.h>

#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/mr.h"
#include "tests/unit/transport/requester_fixture.h"
#include "transport/codes.h"
#include "transport/requester.h"

namespace softverbs::core {
namespace {

using transport::DirectRequest;
using transport::LaneWr;
using transport::Reply;
using transport::ReplyCode;
using transport::Request;
using transport::SendWr;
using transport::WrOpcode;
using transport::qp_state::kRts, transport::qp_state::kSqd;
using transport::qp_type::kRc, transport::qp_type::kUc;

// A same-host link that runs direct requests on a buffer of its own ("the target's memory") when
// `direct` allows, and answers everything else (Carry) with `next`. The progress thread carries
// retries: what Carry touches is under `mu` (Answer, Last).
struct LaneLink : transport::Link {
  Reply Carry(const Request& r) override {
    std::lock_guard lock(mu);
    carried.push_back(r);
    std::string payload;  // (the request's pieces live only during the call)
    for (size_t i = 0; i < r.local_count; ++i) payload.append(static_cast<const char*>(r.local[i].iov_base), r.local[i].iov_len);
    payloads.push_back(payload);
    return next;
  }
  bool CarryDirect(const DirectRequest& r, Reply* reply) override {
    if (!direct) return false;
    // The contract of DirectRequest::local_key (a real link announces it first and trusts it
    // per route epoch: DirectRouteTest): a key no longer current is not used.
    if (r.local_key != nullptr && !r.local_key->Current()) return false;
    direct_seen.push_back(r);
    *reply = Reply::Of(direct_code);
    uint8_t* at = target + (r.remote_addr - 0x9000);
    if (r.opcode == WrOpcode::kRdmaWrite) memcpy(at, r.local, r.length);
    if (r.opcode == WrOpcode::kRdmaRead) memcpy(r.local, at, r.length);
    if (r.opcode == WrOpcode::kAtomicFetchAdd) {
      memcpy(&reply->original, at, 8);
      const uint64_t next_value = reply->original + r.compare_add;
      memcpy(at, &next_value, 8);
      if (r.local_key != nullptr) memcpy(r.local, &reply->original, 8);  // (landed while held)
    }
    return true;
  }
  void CarryMulticast(const Request&, uint32_t) override {}
  void Answer(const Reply& reply) {
    std::lock_guard lock(mu);
    next = reply;
  }
  // The last request carried and its payload.
  std::pair<Request, std::string> Last() {
    std::lock_guard lock(mu);
    return {carried.back(), payloads.back()};
  }
  std::mutex mu;
  bool direct = true;
  ReplyCode direct_code = ReplyCode::kAck;
  Reply next = Reply::Of(ReplyCode::kAck);
  std::vector<Request> carried;
  std::vector<std::string> payloads;
  std::vector<DirectRequest> direct_seen;
  uint8_t target[4096] = {};
};

class RequesterLaneTest : public requester_testing::RequesterFixture<LaneLink, LaneLink, 8192> {
 protected:
  RequesterLaneTest() { requester_.Configure(Config()); }
  transport::RequesterConfig Config() {
    transport::RequesterConfig c = BaseConfig(kRc, /*timeout=*/14, /*retry_cnt=*/7);
    c.dest_on_host = true;
    c.max_rd_atomic = 4;
    c.max_send_wr = 16;
    c.max_send_sge = 4;
    c.max_inline = 64;
    c.path_mtu = 1024;
    return c;
  }
  LaneWr Lane(WrOpcode op, uint32_t length, uint64_t id = 7) {
    LaneWr w{};
    w.wr_id = id;
    w.opcode = op;
    w.flags = transport::send_flag::kSignaled;
    w.sge = {reinterpret_cast<uint64_t>(buf_), length, mr_->lkey()};
    w.remote_addr = 0x9000;
    w.rkey = 0x1234;
    return w;
  }
  // The general way's WRITE, through which the requester learns (keeps) the lkey.
  void LearnLkey() {
    SendWr w = MakeWr(1, WrOpcode::kRdmaWrite, 8);
    w.remote_addr = 0x9000;
    w.rkey = 0x1234;
    ASSERT_TRUE(requester_.Post(w, kRts).ok());
  }
  // Taken or not; when not, nothing may have happened.
  bool Take(const LaneWr& w, uint32_t state = kRts) {
    const size_t completions = qp_.count(), direct = host_.direct_seen.size();
    const bool taken = requester_.PostOnLane(w, state);
    if (!taken) {
      EXPECT_EQ(qp_.count(), completions) << "a WR the lane left completed";
      EXPECT_EQ(host_.direct_seen.size(), direct) << "a WR the lane left reached the link";
    }
    return taken;
  }
};

TEST_F(RequesterLaneTest, AWriteThroughAKeptLkeyRunsAtOnceAndCompletes) {
  EXPECT_FALSE(Take(Lane(WrOpcode::kRdmaWrite, 8))) << "the lkey is learned by the general way first";
  LearnLkey();
  memcpy(buf_, "lane-ok!", 8);
  ASSERT_TRUE(Take(Lane(WrOpcode::kRdmaWrite, 8, 42)));
  ASSERT_EQ(host_.direct_seen.size(), 1u);
  const DirectRequest& d = host_.direct_seen[0];
  EXPECT_EQ(d.dest_qp, 0x201u);
  EXPECT_EQ(d.local, static_cast<void*>(buf_));
  EXPECT_EQ(d.length, 8u);
  EXPECT_EQ(d.rkey, 0x1234u);
  EXPECT_EQ(memcmp(host_.target, "lane-ok!", 8), 0);
  ASSERT_EQ(qp_.count(), 2u);
  const transport::Completion& c = qp_.completions[1];
  EXPECT_EQ(c.wr_id, 42u);
  EXPECT_EQ(c.status, transport::wc_status::kSuccess);
  EXPECT_EQ(c.opcode, transport::wc_opcode::kRdmaWrite);
  EXPECT_EQ(c.byte_len, 8u);
  EXPECT_EQ(c.qp_num, 0x200u);
  // ibv_post_send(3): an unsignaled success produces no completion (sq_sig_all is off).
  LaneWr quiet = Lane(WrOpcode::kRdmaWrite, 8);
  quiet.flags = 0;
  ASSERT_TRUE(Take(quiet));
  EXPECT_EQ(qp_.count(), 2u);
}

TEST_F(RequesterLaneTest, ReadAndAtomicLandInTheLocalBuffer) {
  LearnLkey();
  memcpy(host_.target + 16, "remote!!", 8);
  LaneWr rd = Lane(WrOpcode::kRdmaRead, 8);
  rd.remote_addr = 0x9010;
  ASSERT_TRUE(Take(rd));
  EXPECT_EQ(memcmp(buf_, "remote!!", 8), 0);
  const uint64_t start = 40;
  memcpy(host_.target + 64, &start, 8);
  LaneWr fa = Lane(WrOpcode::kAtomicFetchAdd, 8);
  fa.remote_addr = 0x9040;
  fa.compare_add = 2;
  ASSERT_TRUE(Take(fa));
  uint64_t original = 0;
  memcpy(&original, buf_, 8);
  EXPECT_EQ(original, 40u) << "the original value (AtomicAckETH) lands in the SGE";
  EXPECT_EQ(qp_.completions.back().opcode, transport::wc_opcode::kFetchAdd);
  EXPECT_EQ(qp_.completions.back().byte_len, 8u);
  // IBA 9.4.5: an atomic's local buffer is its 8-byte original; any other length is the
  // general way's to fail (IBV_WC_LOC_LEN_ERR).
  EXPECT_FALSE(Take(Lane(WrOpcode::kAtomicFetchAdd, 4)));
}

TEST_F(RequesterLaneTest, BothWaysNumberMessagesFromOnePsnCounter) {
  requester_.SetPsn(100);
  LearnLkey();  // PSN 100, one packet
  ASSERT_TRUE(Take(Lane(WrOpcode::kRdmaWrite, 2500)));  // PSNs 101..103 (path MTU 1024)
  ASSERT_TRUE(Take(Lane(WrOpcode::kAtomicFetchAdd, 8)));  // PSN 104
  SendWr send = MakeWr(2, WrOpcode::kSend, 8);
  ASSERT_TRUE(requester_.Post(send, kRts).ok());
  ASSERT_EQ(host_.carried.size(), 2u);
  EXPECT_EQ(host_.carried[0].psn, 100u);
  EXPECT_EQ(host_.carried[1].psn, 105u);
}

TEST_F(RequesterLaneTest, InlineBytesAreReadWhereTheApplicationHasThem) {
  // No lkey: IBV_SEND_INLINE reads the bytes at post time (ibv_post_send(3)), up to max_inline_data.
  uint8_t bytes[16];
  memcpy(bytes, "inline-bytes", 12);
  LaneWr w = Lane(WrOpcode::kRdmaWrite, 12);
  w.flags |= transport::send_flag::kInline;
  w.sge = {reinterpret_cast<uint64_t>(bytes), 12, 0};
  ASSERT_TRUE(Take(w));
  EXPECT_EQ(memcmp(host_.target, "inline-bytes", 12), 0);
  w.sge.length = 65;  // beyond max_inline_data (64): the general way refuses it with EINVAL
  EXPECT_FALSE(Take(w));
}

TEST_F(RequesterLaneTest, WhatTheLaneDoesNotTakeIsLeftUntouched) {
  LearnLkey();
  const LaneWr w = Lane(WrOpcode::kRdmaWrite, 8);
  EXPECT_FALSE(Take(w, kSqd)) << "not RTS: Post queues it";
  LaneWr zero = w;
  zero.sge.length = 0;
  EXPECT_FALSE(Take(zero)) << "zero-length: the general way's";
  LaneWr imm_write = w;
  imm_write.opcode = WrOpcode::kRdmaWriteWithImm;  // consumes a receive WQE: the general way's
  EXPECT_FALSE(Take(imm_write));
  LaneWr other_key = w;
  other_key.sge.lkey ^= 0x100;
  EXPECT_FALSE(Take(other_key)) << "an lkey not kept: the general way looks it up (and logs a bad one)";
  LaneWr beyond = w;
  beyond.sge.addr = reinterpret_cast<uint64_t>(buf_) + sizeof(buf_) - 4;
  EXPECT_FALSE(Take(beyond)) << "beyond the MR (IBA 10.6.3.1): the general way fails it with LOC_PROT_ERR";
  host_.direct = false;
  EXPECT_FALSE(Take(w)) << "a link that cannot run it at once";
  host_.direct = true;

  transport::RequesterConfig c = Config();
  c.max_rd_atomic = 0;  // IBA 11.2.4.2: this QP may not initiate READ or atomics
  requester_.Configure(c);
  EXPECT_FALSE(Take(Lane(WrOpcode::kRdmaRead, 8)));
  c = Config();
  c.dest_on_host = false;  // the wire has no lane
  requester_.Configure(c);
  EXPECT_FALSE(Take(w));
  c = Config();
  c.completer.type = kUc;
  requester_.Configure(c);
  EXPECT_FALSE(Take(w));
  c = Config();
  c.rate_limit_kbps = 1000;  // paced: the pacer decides when it leaves
  requester_.Configure(c);
  EXPECT_FALSE(Take(w));
  requester_.Configure(Config());
  EXPECT_TRUE(Take(w));
}

TEST_F(RequesterLaneTest, AnLkeyDeregisteredSinceIsNotUsed) {
  LearnLkey();
  const LaneWr w = Lane(WrOpcode::kRdmaWrite, 8);
  mr_.reset();  // ibv_dereg_mr: the kept lkey no longer names a registration
  EXPECT_FALSE(Take(w));
}

// IBA 10.6.3.1: a READ or an atomic writes its local buffer, which needs LOCAL_WRITE; a WRITE
// through the same kept lkey only reads it.
TEST_F(RequesterLaneTest, AKeptLkeyWithoutLocalWriteTakesNoReadOrAtomic) {
  alignas(8) static uint8_t ro[64];
  auto mr = Mr::Register(*pd_, {reinterpret_cast<uint64_t>(ro), sizeof(ro), reinterpret_cast<uint64_t>(ro), 0});
  ASSERT_TRUE(mr.ok());
  SendWr w = MakeWr(1, WrOpcode::kRdmaWrite, 8);
  w.sge[0] = {reinterpret_cast<uint64_t>(ro), 8, mr.value()->lkey()};
  ASSERT_TRUE(requester_.Post(w, kRts).ok());  // the general way keeps the lkey
  LaneWr lw = Lane(WrOpcode::kRdmaWrite, 8);
  lw.sge = w.sge[0];
  EXPECT_TRUE(Take(lw));
  LaneWr rd = lw;
  rd.opcode = WrOpcode::kRdmaRead;
  EXPECT_FALSE(Take(rd)) << "the general way fails it (IBV_WC_LOC_PROT_ERR) and says why";
  LaneWr fa = lw;
  fa.opcode = WrOpcode::kAtomicFetchAdd;
  EXPECT_FALSE(Take(fa));
}

TEST_F(RequesterLaneTest, AWaitingWorkRequestKeepsTheLaneShut) {
  LearnLkey();
  host_.Answer(Reply::Rnr(1));  // the next general WR waits in the queue (RNR)
  SendWr send = MakeWr(2, WrOpcode::kSend, 8);
  ASSERT_TRUE(requester_.Post(send, kRts).ok());
  EXPECT_FALSE(Take(Lane(WrOpcode::kRdmaWrite, 8))) << "a WR may not pass one queued before it";
}

TEST_F(RequesterLaneTest, ANakFailsTheWorkRequestAndStopsTheQueue) {
  LearnLkey();
  host_.direct_code = ReplyCode::kRemoteOp;  // the owner's memory was not there (IBA 9.7.5.2.4)
  ASSERT_TRUE(Take(Lane(WrOpcode::kRdmaWrite, 8, 9)));
  ASSERT_EQ(qp_.count(), 2u);
  EXPECT_EQ(qp_.completions[1].wr_id, 9u);
  EXPECT_EQ(qp_.completions[1].status, transport::wc_status::kRemOpErr);
  EXPECT_EQ(qp_.errors.load(), 1) << "IBA 10.8.3: an RC completion in error takes the QP to ERR";
  host_.direct_code = ReplyCode::kAck;
  EXPECT_FALSE(Take(Lane(WrOpcode::kRdmaWrite, 8))) << "the queue is stopped: Post flushes what follows";
}

TEST_F(RequesterLaneTest, ASendIsCarriedAsTheGeneralWayBuildsIt) {
  requester_.SetPsn(7);
  LearnLkey();  // PSN 7
  LaneWr send = Lane(WrOpcode::kSendWithImm, 2048, 11);
  send.imm_data = 0xabcd;
  send.flags |= transport::send_flag::kSolicited;
  ASSERT_TRUE(Take(send));
  ASSERT_EQ(host_.carried.size(), 2u);
  const Request& r = host_.carried[1];
  EXPECT_EQ(r.qp_type, kRc);
  EXPECT_EQ(r.opcode, WrOpcode::kSendWithImm);
  EXPECT_EQ(r.src_qp, 0x200u);
  EXPECT_EQ(r.dest_qp, 0x201u);
  EXPECT_EQ(r.psn, 8u);
  EXPECT_EQ(r.mtu, 1024u);
  EXPECT_EQ(r.length, 2048u);
  EXPECT_EQ(r.local_count, 1u);
  EXPECT_EQ(r.imm_data, 0xabcdu);
  EXPECT_TRUE(r.solicited);
  EXPECT_NE(r.addressing, nullptr);
  ASSERT_EQ(qp_.count(), 2u);
  EXPECT_EQ(qp_.completions[1].wr_id, 11u);
  EXPECT_EQ(qp_.completions[1].opcode, transport::wc_opcode::kSend);
  EXPECT_EQ(qp_.completions[1].byte_len, 2048u);
  // Two packets at MTU 1024: the next message starts at PSN 10.
  ASSERT_TRUE(Take(Lane(WrOpcode::kSend, 8)));
  EXPECT_EQ(host_.carried.back().psn, 10u);
}

// IBA 9.7.5.2.8: a SEND the target has no receive WQE for (RNR NAK) waits in the queue with its
// PSN and is retried after the RNR delay; nothing posted after it passes it.
TEST_F(RequesterLaneTest, ASendTheTargetCannotTakeYetWaitsInTheQueue) {
  requester_.SetPsn(20);
  LearnLkey();  // PSN 20
  host_.Answer(Reply::Rnr(1));  // 10 us (IBA table 45)
  memcpy(buf_, "first!", 6);
  ASSERT_TRUE(Take(Lane(WrOpcode::kSend, 6, 31)));
  EXPECT_EQ(qp_.count(), 1u) << "not completed: it waits";
  EXPECT_FALSE(Take(Lane(WrOpcode::kRdmaWrite, 8))) << "a WR may not pass one queued before it";
  host_.Answer(Reply::Of(ReplyCode::kAck));
  ASSERT_TRUE(WaitFor([&] { return qp_.count() == 2; })) << "the progress thread retries it";
  {
    std::lock_guard lock(qp_.mu);
    EXPECT_EQ(qp_.completions[1].wr_id, 31u);
    EXPECT_EQ(qp_.completions[1].status, transport::wc_status::kSuccess);
  }
  const auto [retry, payload] = host_.Last();
  EXPECT_EQ(retry.psn, 21u) << "the retry carries the PSN of its first attempt";
  EXPECT_EQ(payload, "first!");
}

TEST_F(RequesterLaneTest, AnInlineSendThatMustWaitKeepsItsBytes) {
  uint8_t bytes[8];
  memcpy(bytes, "inline1", 8);
  LaneWr w = Lane(WrOpcode::kSend, 8, 41);
  w.flags |= transport::send_flag::kInline;
  w.sge = {reinterpret_cast<uint64_t>(bytes), 8, 0};
  host_.Answer(Reply::Rnr(1));
  ASSERT_TRUE(Take(w));
  memcpy(bytes, "changed", 8);  // ibv_post_send(3): the buffer may be reused once it returns
  host_.Answer(Reply::Of(ReplyCode::kAck));
  ASSERT_TRUE(WaitFor([&] { return qp_.count() == 1; }));
  EXPECT_EQ(host_.Last().second, std::string("inline1", 8)) << "the queue entry copied the inline bytes";
}

}  // namespace
}  // namespace softverbs::core
