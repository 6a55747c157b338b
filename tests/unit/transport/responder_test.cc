// The responder role against a fake fabric: a TargetQp in this process whose bytes move with
// memcpy, so each rule of the responder is seen without any fabric's mechanism.
#include "transport/responder.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/cq.h"
#include "core/mr.h"
#include "tests/unit/core/test_context.h"
#include "tests/unit/transport/fake_target.h"
#include "transport/codes.h"
#include "transport/key_table.h"

namespace softverbs::core {
namespace {

using transport::Reply;
using transport::ReplyCode;
using transport::Request;
using transport::WrOpcode;

using transport::qp_type::kRc, transport::qp_type::kUc, transport::qp_type::kUd;
using transport::qp_state::kRts, transport::qp_state::kInit;

class ResponderTest : public CoreTest {
 protected:
  ResponderTest() : target_(context_->local()) {
    cq_ = std::move(Cq::Create(*context_, 64, nullptr, 0).value());
    rq_ = std::move(transport::RecvQueue::Create(context_->local(), 16, 4).value());
    mr_ = std::move(Mr::Register(*pd_, {reinterpret_cast<uint64_t>(buf_), sizeof(buf_), reinterpret_cast<uint64_t>(buf_),
                                        access::kLocalWrite | access::kRemoteWrite | access::kRemoteRead |
                                            access::kRemoteAtomic})
                        .value());
    transport::QpEndpoint& e = target_.e_;
    e.state.store(kRts);
    e.qp_num = 0x1234;
    e.type = kRc;
    e.access = access::kRemoteWrite | access::kRemoteRead | access::kRemoteAtomic;
    e.max_dest_rd_atomic = 4;
    e.min_rnr_timer = 12;
    e.pd = pd_->host_id();
    e.recv_cq = cq_->ring_ref();
    e.recv_queue = rq_->ref();
    e.async_fd = -1;
  }
  Request Make(WrOpcode op, uint32_t type = kRc) {
    Request r;
    r.qp_type = type;
    r.opcode = op;
    r.src_qp = 0x99;
    r.dest_qp = 0x1234;
    r.local = &local_;
    r.local_count = 1;
    r.length = local_.iov_len;
    r.rkey = mr_->rkey();
    r.remote_addr = reinterpret_cast<uint64_t>(buf_);
    return r;
  }
  void PostRecv(uint64_t id, uint32_t offset, uint32_t length) {
    transport::RecvSge s{reinterpret_cast<uint64_t>(buf_) + offset, length, mr_->lkey()};
    ASSERT_TRUE(rq_->Post(id, &s, 1).ok());
  }
  int Poll(transport::Completion* c) { return cq_->Poll(c, 1); }

  uint8_t buf_[4096] = {};
  uint8_t payload_[64] = {'h', 'e', 'l', 'l', 'o'};
  iovec local_{payload_, 5};
  transport::FakeTarget target_;
  std::unique_ptr<Cq> cq_;
  std::unique_ptr<transport::RecvQueue> rq_;
  std::unique_ptr<Mr> mr_;
};

TEST_F(ResponderTest, WriteLandsThroughTheRkey) {
  Request r = Make(WrOpcode::kRdmaWrite);
  r.remote_addr += 100;
  EXPECT_EQ(transport::Responder::Execute(target_, r).code, ReplyCode::kAck);
  EXPECT_EQ(memcmp(buf_ + 100, "hello", 5), 0);
}

TEST_F(ResponderTest, TransportMismatchIsDiscardedUntouched) {
  // Issue 17 item 3: an RC WRITE into a UC QP, and a UC WRITE into an RC QP, are dropped as a NIC
  // drops a packet whose opcode's transport is not its QP's (IBA 9.6.1.1).
  target_.e_.type = kUc;
  EXPECT_EQ(transport::Responder::Execute(target_, Make(WrOpcode::kRdmaWrite, kRc)).code, ReplyCode::kNoAnswer);
  target_.e_.type = kRc;
  EXPECT_EQ(transport::Responder::Execute(target_, Make(WrOpcode::kRdmaWrite, kUc)).code, ReplyCode::kDropped);
  EXPECT_EQ(target_.moves, 0);
  EXPECT_EQ(buf_[0], 0);
}

TEST_F(ResponderTest, QpNotReceivingIsSilent) {
  target_.e_.state.store(kInit);
  EXPECT_EQ(transport::Responder::Execute(target_, Make(WrOpcode::kRdmaWrite)).code, ReplyCode::kNoAnswer);
  EXPECT_EQ(target_.moves, 0);
}

TEST_F(ResponderTest, WriteOutsideTheKeyIsRemoteAccessAndErrsTheTarget) {
  Request r = Make(WrOpcode::kRdmaWrite);
  r.remote_addr += sizeof(buf_) - 2;  // 5 bytes from 2 before the end
  EXPECT_EQ(transport::Responder::Execute(target_, r).code, ReplyCode::kRemoteAccess);
  EXPECT_EQ(target_.moves, 0);
  EXPECT_EQ(target_.e_.remote_error.load(), 1u);  // IBA 9.9.3: the RC responder enters ERR
}

TEST_F(ResponderTest, AccessTheQpDoesNotGrantIsRefused) {
  target_.e_.access = access::kRemoteRead;
  EXPECT_EQ(transport::Responder::Execute(target_, Make(WrOpcode::kRdmaWrite)).code, ReplyCode::kRemoteAccess);
}

TEST_F(ResponderTest, SendWithoutAWqeIsRnrWithTheTargetsTimer) {
  Reply reply = transport::Responder::Execute(target_, Make(WrOpcode::kSend));
  EXPECT_EQ(reply.code, ReplyCode::kRnr);
  EXPECT_EQ(reply.rnr_timer, 12);
  target_.alive = false;  // a dead owner answers nothing
  EXPECT_EQ(transport::Responder::Execute(target_, Make(WrOpcode::kSend)).code, ReplyCode::kNoAnswer);
}

TEST_F(ResponderTest, SendScattersIntoTheWqeAndCompletesAtTheTarget) {
  PostRecv(7, 200, 64);
  Request r = Make(WrOpcode::kSendWithImm);
  r.imm_data = 0xabcd;
  EXPECT_EQ(transport::Responder::Execute(target_, r).code, ReplyCode::kAck);
  EXPECT_EQ(memcmp(buf_ + 200, "hello", 5), 0);
  transport::Completion c;
  ASSERT_EQ(Poll(&c), 1);
  EXPECT_EQ(c.wr_id, 7u);
  EXPECT_EQ(c.byte_len, 5u);
  EXPECT_EQ(c.src_qp, 0x99u);
  EXPECT_EQ(c.imm_data, 0xabcdu);
  EXPECT_TRUE(c.wc_flags & transport::wc_flag::kWithImm);
}

TEST_F(ResponderTest, SendTooLargeForTheWqeFailsBothSides) {
  PostRecv(7, 200, 4);
  EXPECT_EQ(transport::Responder::Execute(target_, Make(WrOpcode::kSend)).code, ReplyCode::kInvalidRequest);
  transport::Completion c;
  ASSERT_EQ(Poll(&c), 1);
  EXPECT_EQ(c.status, transport::wc_status::kLocLenErr);
  EXPECT_EQ(buf_[200], 0);
}

TEST_F(ResponderTest, SmallSendLandsInTheCompletionWhenTheFabricAsks) {
  target_.lands = true;
  PostRecv(7, 200, 64);
  EXPECT_EQ(transport::Responder::Execute(target_, Make(WrOpcode::kSend)).code, ReplyCode::kAck);
  EXPECT_EQ(target_.moves, 0);  // carried in the completion entry
  transport::Completion c;
  ASSERT_EQ(Poll(&c), 1);  // the owner's poll scatters it
  EXPECT_EQ(memcmp(buf_ + 200, "hello", 5), 0);
}

TEST_F(ResponderTest, UdDatagramsNeedTheQkeyAndCarryTheGrh) {
  target_.e_.type = kUd;
  target_.e_.qkey = 0x11;
  PostRecv(7, 0, 64);
  uint8_t grh[40];
  memset(grh, 0xee, sizeof grh);
  Request r = Make(WrOpcode::kSend, kUd);
  r.qkey = 0x12;
  EXPECT_EQ(transport::Responder::Execute(target_, r, grh).code, ReplyCode::kDropped);
  transport::Completion c;
  EXPECT_EQ(Poll(&c), 0);  // IBA 10.2.5: dropped, the WQE still posted
  r.qkey = 0x11;
  EXPECT_EQ(transport::Responder::Execute(target_, r, grh).code, ReplyCode::kAck);
  ASSERT_EQ(Poll(&c), 1);
  EXPECT_EQ(c.byte_len, 45u);
  EXPECT_TRUE(c.wc_flags & transport::wc_flag::kGrh);
  EXPECT_EQ(buf_[39], 0xee);
  EXPECT_EQ(memcmp(buf_ + 40, "hello", 5), 0);
}

TEST_F(ResponderTest, ReadFetchesAndNeedsResponderResources) {
  memcpy(buf_ + 300, "world", 5);
  uint8_t into[5] = {};
  iovec l{into, 5};
  Request r = Make(WrOpcode::kRdmaRead);
  r.local = &l;
  r.remote_addr += 300;
  EXPECT_EQ(transport::Responder::Execute(target_, r).code, ReplyCode::kAck);
  EXPECT_EQ(memcmp(into, "world", 5), 0);
  target_.e_.max_dest_rd_atomic = 0;  // IBA 9.7.5.1.4
  EXPECT_EQ(transport::Responder::Execute(target_, r).code, ReplyCode::kInvalidRequest);
}

TEST_F(ResponderTest, AtomicsReturnTheOriginalAndNeedAlignment) {
  uint64_t word = 40;
  memcpy(buf_ + 512, &word, 8);
  Request r = Make(WrOpcode::kAtomicFetchAdd);
  r.remote_addr += 512;
  r.compare_add = 2;
  Reply reply = transport::Responder::Execute(target_, r);
  ASSERT_EQ(reply.code, ReplyCode::kAck);
  EXPECT_EQ(reply.original, 40u);
  memcpy(&word, buf_ + 512, 8);
  EXPECT_EQ(word, 42u);
  r.opcode = WrOpcode::kAtomicCmpSwp;
  r.compare_add = 42;
  r.swap = 7;
  EXPECT_EQ(transport::Responder::Execute(target_, r).original, 42u);
  memcpy(&word, buf_ + 512, 8);
  EXPECT_EQ(word, 7u);
  r.remote_addr += 4;  // IBA 9.4.5: naturally aligned only
  EXPECT_EQ(transport::Responder::Execute(target_, r).code, ReplyCode::kInvalidRequest);
}

TEST_F(ResponderTest, AtomicWriteStoresEightBytesUnderRemoteWrite) {
  // IBA 1.5 9.4.6, checked as rxe_resp.c: REMOTE_WRITE (not REMOTE_ATOMIC), 8 aligned bytes.
  memcpy(payload_, "ATOMIC!!", 8);
  local_.iov_len = 8;
  Request r = Make(WrOpcode::kAtomicWrite);
  r.remote_addr += 1024;
  target_.e_.access = access::kRemoteWrite;
  ASSERT_EQ(transport::Responder::Execute(target_, r).code, ReplyCode::kAck);
  EXPECT_EQ(memcmp(buf_ + 1024, "ATOMIC!!", 8), 0);
  EXPECT_EQ(buf_[1032], 0);
  r.remote_addr += 4;  // misaligned: an invalid request, nothing written
  EXPECT_EQ(transport::Responder::Execute(target_, r).code, ReplyCode::kInvalidRequest);
  EXPECT_EQ(memcmp(buf_ + 1024, "ATOMIC!!\0\0\0\0", 12), 0);
  r.remote_addr += 4;
  target_.e_.access = access::kRemoteAtomic;  // atomics granted, writes not
  EXPECT_EQ(transport::Responder::Execute(target_, r).code, ReplyCode::kRemoteAccess);
  EXPECT_EQ(buf_[1032], 0);
  target_.e_.access = access::kRemoteWrite;
  r.length = 4;  // not 8 bytes
  EXPECT_EQ(transport::Responder::Execute(target_, r).code, ReplyCode::kInvalidRequest);
}

TEST_F(ResponderTest, DctAdmitsOnlyDcisWithItsKey) {
  target_.e_.dct = 1;
  target_.e_.dc_access_key = 77;
  Request r = Make(WrOpcode::kRdmaWrite);
  EXPECT_EQ(transport::Responder::Execute(target_, r).code, ReplyCode::kNoAnswer);  // not a DCI
  r.from_dci = true;
  r.dc_access_key = 78;
  EXPECT_EQ(transport::Responder::Execute(target_, r).code, ReplyCode::kNoAnswer);  // wrong key
  r.dc_access_key = 77;
  EXPECT_EQ(transport::Responder::Execute(target_, r).code, ReplyCode::kAck);
}


// Tag matching (transport/tag_matcher.h): the receive ring of a TM SRQ names its tag table.
class ResponderTagTest : public ResponderTest {
 protected:
  ResponderTagTest() {
    auto block = context_->local().Allocate(transport::TagTableBytes(4));
    ref_ = block.value();
    table_ = static_cast<transport::TagTable*>(context_->local().At(ref_));
    memset(static_cast<void*>(table_), 0, transport::TagTableBytes(4));
    transport::TagTableInit(*table_, 4);
    rq_->ring().tm = ref_;
  }
  ~ResponderTagTest() override {
    rq_->ring().tm = {};
    context_->local().Free(ref_, transport::TagTableBytes(4));
  }
  // A message of a TMH (`op`, `tag`, app_ctx 0x55) and `body`.
  Request Tagged(uint8_t op, uint64_t tag, const char* body) {
    transport::WriteTmh(transport::TmHeader{op, 0x55, tag}, payload_);
    const size_t n = strlen(body);
    memcpy(payload_ + transport::kTmhBytes, body, n);
    local_.iov_len = transport::kTmhBytes + n;
    return Make(WrOpcode::kSend);
  }
  void AddTag(uint64_t tag, uint32_t offset, uint32_t length, uint64_t wr_id) {
    ASSERT_TRUE(transport::TagAdd(*table_, {tag, ~0ull, wr_id, reinterpret_cast<uint64_t>(buf_) + offset, length,
                                            mr_->lkey(), 1})
                    .ok);
  }
  transport::TagTable* table_ = nullptr;
  fabric::SharedRef ref_{};
};

TEST_F(ResponderTagTest, EagerMatchPlacesThePayloadAfterTheTmh) {
  AddTag(0x42, 100, 32, 9);
  EXPECT_EQ(transport::Responder::Execute(target_, Tagged(transport::kTmhEager, 0x42, "abc")).code, ReplyCode::kAck);
  EXPECT_EQ(memcmp(buf_ + 100, "abc", 3), 0);
  EXPECT_EQ(buf_[103], 0);
  transport::Completion c;
  transport::TmInfo tm;
  ASSERT_EQ(cq_->Poll(&c, 1, &tm), 1);
  EXPECT_EQ(c.opcode, transport::wc_opcode::kTmRecv);
  EXPECT_EQ(c.wr_id, 9u);
  EXPECT_EQ(c.byte_len, 3u);
  EXPECT_EQ(c.wc_flags, transport::wc_flag::kTmMatch | transport::wc_flag::kTmDataValid);
  EXPECT_EQ(tm.tag, 0x42u);
  EXPECT_EQ(tm.priv, 0x55u);
}

TEST_F(ResponderTagTest, UnmatchedTakesAWqeWholeAndIsCounted) {
  AddTag(0x42, 100, 32, 9);
  PostRecv(7, 200, 64);
  EXPECT_EQ(transport::Responder::Execute(target_, Tagged(transport::kTmhEager, 0x43, "xyz")).code, ReplyCode::kAck);
  EXPECT_EQ(memcmp(buf_ + 200 + transport::kTmhBytes, "xyz", 3), 0);
  EXPECT_EQ(buf_[200], transport::kTmhEager);
  transport::Completion c;
  transport::TmInfo tm{1, 1};
  ASSERT_EQ(cq_->Poll(&c, 1, &tm), 1);
  EXPECT_EQ(c.opcode, transport::wc_opcode::kTmRecv);
  EXPECT_EQ(c.wr_id, 7u);
  EXPECT_EQ(c.wc_flags, 0u);
  EXPECT_EQ(tm.tag, 0u);
  EXPECT_EQ(table_->hw_unexpected, 1u);
  EXPECT_EQ(transport::TagPosted(*table_), 1u);  // the tag is still there
}

TEST_F(ResponderTagTest, NoTagIsAnOrdinaryReceiveNotCounted) {
  PostRecv(7, 200, 64);
  EXPECT_EQ(transport::Responder::Execute(target_, Tagged(transport::kTmhNoTag, 1, "n")).code, ReplyCode::kAck);
  transport::Completion c;
  ASSERT_EQ(Poll(&c), 1);
  EXPECT_EQ(c.opcode, transport::wc_opcode::kTmNoTag);
  EXPECT_EQ(c.byte_len, transport::kTmhBytes + 1);
  EXPECT_EQ(table_->hw_unexpected, 0u);
}

TEST_F(ResponderTagTest, RendezvousTheFabricCannotDoIsLeftToTheApplication) {
  // The fake fabric reaches no requester (TargetQp::Requester): mlx5's software rendezvous.
  AddTag(0x42, 100, 64, 9);
  EXPECT_EQ(transport::Responder::Execute(target_, Tagged(transport::kTmhRndv, 0x42, "0123456789abcdefRVH")).code,
            ReplyCode::kAck);
  EXPECT_EQ(memcmp(buf_ + 100, "0123456789abcdefRVH", 19), 0);
  transport::Completion c;
  ASSERT_EQ(Poll(&c), 1);
  EXPECT_EQ(c.status, transport::wc_status::kTmRndvIncomplete);
  EXPECT_EQ(c.wr_id, 9u);
}

// Responder::ExecuteDirect (a route kept across work requests, transport/host/direct_route.h):
// the success case of Execute's rules for WRITE, READ and atomics; anything any rule refuses is
// left untouched for Execute to answer.
class ResponderDirectTest : public ResponderTest {
 protected:
  ResponderDirectTest() { EXPECT_TRUE(transport::KeyPin::Peek(context_->registry(), mr_->rkey(), &view_)); }
  transport::DirectTarget Target() {
    transport::DirectTarget t;
    t.endpoint = &target_.e_;
    t.process_slot = target_.process_slot();
    t.key = &view_;
    t.grants = transport::Responder::DirectGrants(target_.e_, target_.process_slot(), view_);
    t.base = reinterpret_cast<uint8_t*>(view_.addr);
    t.move = [](const void* ctx, bool write, uint8_t* at, void* local, size_t n) {
      auto* self = static_cast<ResponderDirectTest*>(const_cast<void*>(ctx));
      if (write)
        memcpy(at, local, n);
      else
        memcpy(local, at, n);
      return !self->fault_;
    };
    t.atomic = [](const void* ctx, uint64_t va, uint64_t* word, uint64_t (*op)(uint64_t, const void*),
                  const void* arg, uint64_t* before) {
      auto* self = static_cast<ResponderDirectTest*>(const_cast<void*>(ctx));
      ++self->atomics_;
      EXPECT_EQ(va, reinterpret_cast<uint64_t>(word));  // (the owner's memory is this process's here)
      *before = *word;
      *word = op(*before, arg);
      return !self->fault_;
    };
    t.ctx = this;
    return t;
  }
  // The one-piece request a route hands over (DirectRoute::Carry's conversion).
  static transport::DirectRequest ToDirect(const Request& r) {
    EXPECT_EQ(r.local_count, 1u);
    return {r.opcode, r.dest_qp, r.local[0].iov_base, r.length, r.remote_addr, r.rkey, r.compare_add, r.swap};
  }
  // Runs `r` directly; whether it was taken. Refused: the buffer must be as it was.
  bool Direct(const Request& r, Reply* reply) {
    uint8_t before[sizeof(buf_)];
    memcpy(before, buf_, sizeof(buf_));
    const bool taken = transport::Responder::ExecuteDirect(Target(), ToDirect(r), reply);
    if (!taken) {
      EXPECT_EQ(memcmp(before, buf_, sizeof(buf_)), 0) << "a refused request changed memory";
    }
    return taken;
  }
  transport::KeyView view_;
  iovec empty_{nullptr, 0};
  int atomics_ = 0;
  bool fault_ = false;  // the fabric's moves report the owner's memory gone
};

TEST_F(ResponderDirectTest, WriteReadAndAtomicsAreDoneAndAcknowledged) {
  Reply reply;
  Request w = Make(WrOpcode::kRdmaWrite);
  w.remote_addr += 200;
  ASSERT_TRUE(Direct(w, &reply));
  EXPECT_EQ(reply.code, ReplyCode::kAck);
  EXPECT_EQ(memcmp(buf_ + 200, "hello", 5), 0);

  uint8_t into[5] = {};
  iovec to{into, 5};
  Request rd = Make(WrOpcode::kRdmaRead);
  rd.local = &to;
  rd.remote_addr += 200;
  ASSERT_TRUE(Direct(rd, &reply));
  EXPECT_EQ(memcmp(into, "hello", 5), 0);

  uint64_t word = 40, original = 0;
  memcpy(buf_ + 64, &word, 8);
  iovec orig{&original, 8};
  Request fa = Make(WrOpcode::kAtomicFetchAdd);
  fa.local = &orig;
  fa.length = 8;
  fa.remote_addr += 64;
  fa.compare_add = 2;
  ASSERT_TRUE(Direct(fa, &reply));
  EXPECT_EQ(reply.original, 40u);
  Request cs = fa;
  cs.opcode = WrOpcode::kAtomicCmpSwp;
  cs.compare_add = 42;
  cs.swap = 7;
  ASSERT_TRUE(Direct(cs, &reply));
  EXPECT_EQ(reply.original, 42u);
  memcpy(&word, buf_ + 64, 8);
  EXPECT_EQ(word, 7u);
  EXPECT_EQ(atomics_, 2) << "atomics go through the fabric's exclusion";
}

// The key's rules found once for a kept key (DirectTarget::grants): its access flags, a plain
// key only, the endpoint's PD.
TEST_F(ResponderDirectTest, GrantsAreTheKeysRulesAtTheEndpoint) {
  using transport::access_bit::kRemoteAtomic, transport::access_bit::kRemoteRead, transport::access_bit::kRemoteWrite;
  const uint32_t slot = target_.process_slot();
  transport::KeyView k = view_;
  k.access = kRemoteRead;
  EXPECT_EQ(transport::Responder::DirectGrants(target_.e_, slot, k), kRemoteRead);
  k.access = kRemoteWrite | kRemoteAtomic;
  EXPECT_EQ(transport::Responder::DirectGrants(target_.e_, slot, k), kRemoteWrite | kRemoteAtomic);
  k.access |= transport::kNullKey;  // ibv_alloc_null_mr(3): never an R_Key
  EXPECT_EQ(transport::Responder::DirectGrants(target_.e_, slot, k), 0u);
  k = view_;
  EXPECT_EQ(transport::Responder::DirectGrants(target_.e_, slot + 1, k), 0u) << "another process's key";
  transport::QpEndpoint other_pd;
  other_pd.pd = target_.e_.pd ^ 1;
  EXPECT_EQ(transport::Responder::DirectGrants(other_pd, slot, k), 0u) << "a QP of another PD";
}

// A mapping that cannot lose its pages (no `move`): the responder copies itself, both ways.
TEST_F(ResponderDirectTest, WithoutAMoveTheResponderCopiesItself) {
  transport::DirectTarget t = Target();
  t.move = nullptr;
  fault_ = true;  // (not consulted: no move is called)
  Reply reply;
  Request w = Make(WrOpcode::kRdmaWrite);
  w.remote_addr += 300;
  ASSERT_TRUE(transport::Responder::ExecuteDirect(t, ToDirect(w), &reply));
  EXPECT_EQ(reply.code, ReplyCode::kAck);
  EXPECT_EQ(memcmp(buf_ + 300, "hello", 5), 0);
  uint8_t into[5] = {};
  iovec to{into, 5};
  Request rd = Make(WrOpcode::kRdmaRead);
  rd.local = &to;
  rd.remote_addr += 300;
  ASSERT_TRUE(transport::Responder::ExecuteDirect(t, ToDirect(rd), &reply));
  EXPECT_EQ(reply.code, ReplyCode::kAck);
  EXPECT_EQ(memcmp(into, "hello", 5), 0);
  // Every length around the in-place copy of 8 to 16 bytes, both ways: exactly its bytes move,
  // not one before or after.
  for (uint32_t n = 1; n <= 20; ++n) {
    uint8_t src[24], back[24];
    for (uint32_t i = 0; i < sizeof(src); ++i) src[i] = static_cast<uint8_t>(0xa0 + i + n);
    memset(buf_ + 400, 0x5a, 32);
    iovec piece{src, n};
    Request wn = Make(WrOpcode::kRdmaWrite);
    wn.local = &piece;
    wn.length = n;
    wn.remote_addr += 401;
    ASSERT_TRUE(transport::Responder::ExecuteDirect(t, ToDirect(wn), &reply)) << n;
    EXPECT_EQ(buf_[400], 0x5a) << n;
    EXPECT_EQ(memcmp(buf_ + 401, src, n), 0) << n;
    EXPECT_EQ(buf_[401 + n], 0x5a) << n;
    memset(back, 0x33, sizeof(back));
    iovec into_n{back + 1, n};
    Request rn = Make(WrOpcode::kRdmaRead);
    rn.local = &into_n;
    rn.length = n;
    rn.remote_addr += 401;
    ASSERT_TRUE(transport::Responder::ExecuteDirect(t, ToDirect(rn), &reply)) << n;
    EXPECT_EQ(back[0], 0x33) << n;
    EXPECT_EQ(memcmp(back + 1, src, n), 0) << n;
    EXPECT_EQ(back[1 + n], 0x33) << n;
  }
}

// The owner's memory not there (a file truncated under the registration): answered as Execute
// answers it, a remote operational error (IBA 9.7.5.2.4), the QP left as it is.
TEST_F(ResponderDirectTest, MemoryThatIsNotThereIsARemoteOperationalError) {
  fault_ = true;
  Reply reply;
  ASSERT_TRUE(transport::Responder::ExecuteDirect(Target(), ToDirect(Make(WrOpcode::kRdmaWrite)), &reply));
  EXPECT_EQ(reply.code, ReplyCode::kRemoteOp);
  uint64_t original = 0;
  iovec orig{&original, 8};
  Request fa = Make(WrOpcode::kAtomicFetchAdd);
  fa.local = &orig;
  fa.length = 8;
  ASSERT_TRUE(transport::Responder::ExecuteDirect(Target(), ToDirect(fa), &reply));
  EXPECT_EQ(reply.code, ReplyCode::kRemoteOp);
  EXPECT_EQ(target_.e_.remote_error.load(), 0u) << "Execute moves no QP to ERR for it either";
}

TEST_F(ResponderDirectTest, WhatAnyRuleRefusesIsLeftToExecute) {
  Reply reply;
  Request base = Make(WrOpcode::kRdmaWrite);
  auto refused = [&](Request r) { return !Direct(r, &reply); };
  Request r = base;
  r.rkey ^= 0x1;  // another key than the one the route keeps
  EXPECT_TRUE(refused(r));
  r = base;
  r.remote_addr = view_.iova + sizeof(buf_) - 2;  // leaves the region (IBA 10.6.3)
  EXPECT_TRUE(refused(r));
  r = base;
  r.opcode = WrOpcode::kSend;  // not one-sided
  EXPECT_TRUE(refused(r));
  r = base;
  r.length = 0;  // zero-length: Execute's (no R_Key check)
  r.local = &empty_;
  EXPECT_TRUE(refused(r));
  std::vector<uint8_t> big(transport::Responder::kDirectMaxBytes + 1);
  iovec large{big.data(), big.size()};
  r = base;
  r.local = &large;
  r.length = big.size();
  EXPECT_TRUE(refused(r));  // beyond one bounded chunk: Execute's copies re-check between chunks

  Request fa = Make(WrOpcode::kAtomicFetchAdd);
  uint64_t original = 0;
  iovec orig{&original, 8};
  fa.local = &orig;
  fa.length = 8;
  fa.remote_addr += 4;  // not naturally aligned (IBA 9.4.5)
  EXPECT_TRUE(refused(fa));
  EXPECT_EQ(atomics_, 0);

  // The QP's side, read live on every request.
  transport::QpEndpoint& e = target_.e_;
  e.type = kUc;  // another transport than the request's, RC (IBA 9.6.1.1)
  EXPECT_TRUE(refused(base));
  e.type = kRc;
  e.access = access::kRemoteRead;  // no REMOTE_WRITE granted
  EXPECT_TRUE(refused(base));
  e.access = access::kRemoteWrite | access::kRemoteRead | access::kRemoteAtomic;
  e.state.store(kInit);  // not receiving (IBA 10.3.1)
  EXPECT_TRUE(refused(base));
  e.state.store(kRts);
  e.max_dest_rd_atomic = 0;  // no responder resources for READ (IBA 9.7.5.1.4)
  Request rd = Make(WrOpcode::kRdmaRead);
  EXPECT_TRUE(refused(rd));
  e.max_dest_rd_atomic = 4;
  e.pd ^= 1;  // the key is not of the QP's PD
  EXPECT_TRUE(refused(base));
  e.pd ^= 1;
  EXPECT_TRUE(Direct(base, &reply));  // and with everything restored, it is taken
}

// The rules that do not depend on the request, found once (what a route keeps per epoch):
// DirectAdmitted answers the accesses the endpoint's state, its access flags, its responder
// resources and the key's grants allow; ExecuteDirect given them checks only the request's own.
TEST_F(ResponderDirectTest, WhatTheEndpointAndTheKeyAdmitIsFoundApartFromTheRequest) {
  using transport::access_bit::kRemoteAtomic, transport::access_bit::kRemoteRead, transport::access_bit::kRemoteWrite;
  transport::QpEndpoint& e = target_.e_;
  const uint32_t all = kRemoteWrite | kRemoteRead | kRemoteAtomic;
  EXPECT_EQ(transport::Responder::DirectAdmitted(Target()), all);
  e.max_dest_rd_atomic = 0;  // IBA 9.7.5.1.4: WRITEs only
  EXPECT_EQ(transport::Responder::DirectAdmitted(Target()), kRemoteWrite);
  e.max_dest_rd_atomic = 4;
  e.access = access::kRemoteRead;
  EXPECT_EQ(transport::Responder::DirectAdmitted(Target()), kRemoteRead);
  e.access = access::kRemoteWrite | access::kRemoteRead | access::kRemoteAtomic;
  e.state.store(kInit);  // IBA 10.3.1: not receiving
  EXPECT_EQ(transport::Responder::DirectAdmitted(Target()), 0u);
  e.state.store(kRts);

  Reply reply;
  const Request w = Make(WrOpcode::kRdmaWrite);
  EXPECT_FALSE(transport::Responder::ExecuteDirect(Target(), kRemoteRead, ToDirect(w), &reply))
      << "a WRITE where only READ was admitted";
  Request out = w;
  out.remote_addr = view_.iova + sizeof(buf_) - 2;  // the request's own rule: leaves the region
  EXPECT_FALSE(transport::Responder::ExecuteDirect(Target(), all, ToDirect(out), &reply));
  EXPECT_TRUE(transport::Responder::ExecuteDirect(Target(), kRemoteWrite, ToDirect(w), &reply));
  EXPECT_EQ(reply.code, ReplyCode::kAck);
}

}  // namespace
}  // namespace softverbs::core
