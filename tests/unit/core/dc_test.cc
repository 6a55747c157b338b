// The DC transport in the core (core/dc.h): creation rules, the DCI/DCT columns of the modify
// table, and traffic between DCIs and a DCT in one process (every opcode, wrong key, unknown DCT,
// a DCT destroyed, a non-DC QP knocking on a DCT).
#include "core/dc.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <tuple>
#include <vector>

#include "core/mr.h"
#include "core/qp.h"
#include "core/qp_state_machine.h"
#include "core/srq.h"
#include "tests/unit/core/test_context.h"

namespace softverbs::core {
namespace {

using transport::Completion;
using transport::RecvSge;
using transport::SendWr;
using transport::WrOpcode;

constexpr uint64_t kKey = 0x0123456789abcdefull;

// --- the modify table -----------------------------------------------------------------------

Result<QpState> Modify(DcRole role, QpState from, QpState to, uint32_t mask) {
  ModifyContext ctx;
  ctx.type = QpType::kDriver;
  ctx.dc = role;
  ctx.current = from;
  ctx.valid_gids = 0x3;
  QpAttributes a;
  a.qp_state = to;
  a.port_num = 1;
  a.path_mtu = Mtu::k1024;
  a.ah_attr.is_global = true;
  a.ah_attr.port_num = 1;
  a.ah_attr.sgid_index = 1;
  a.ah_attr.dgid[15] = 1;
  return CheckModify(ctx, a, mask | attr::kState);
}

TEST(DcStateTable, DciNeedsRcRequesterAttributesAndNoDestination) {
  using namespace attr;
  EXPECT_TRUE(Modify(DcRole::kDci, QpState::kReset, QpState::kInit, kPkeyIndex | kPort).ok());
  auto missing = Modify(DcRole::kDci, QpState::kReset, QpState::kInit, kPort);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().rule(), "DCI RESET->INIT is missing IBV_QP_PKEY_INDEX");
  EXPECT_TRUE(Modify(DcRole::kDci, QpState::kInit, QpState::kRtr, kPathMtu).ok());
  EXPECT_TRUE(Modify(DcRole::kDci, QpState::kInit, QpState::kRtr, kPathMtu | kAv).ok());
  // No connection: a destination QP number or receive PSN has no meaning for a DCI.
  auto dest = Modify(DcRole::kDci, QpState::kInit, QpState::kRtr, kPathMtu | kDestQpn);
  ASSERT_FALSE(dest.ok());
  EXPECT_EQ(dest.status().code(), EINVAL);
  EXPECT_EQ(dest.status().rule(), "DCI INIT->RTR does not accept IBV_QP_DEST_QPN");
  const uint32_t rts = kTimeout | kRetryCnt | kRnrRetry | kSqPsn | kMaxQpRdAtomic;
  EXPECT_TRUE(Modify(DcRole::kDci, QpState::kRtr, QpState::kRts, rts).ok());
  auto no_retry = Modify(DcRole::kDci, QpState::kRtr, QpState::kRts, rts & ~kRetryCnt);
  ASSERT_FALSE(no_retry.ok());
  EXPECT_EQ(no_retry.status().rule(), "DCI RTR->RTS is missing IBV_QP_RETRY_CNT");
  EXPECT_FALSE(Modify(DcRole::kDci, QpState::kRtr, QpState::kRts, rts | kMaxDestRdAtomic).ok());
}

TEST(DcStateTable, DctServesInRtrAndHasNoSendStates) {
  using namespace attr;
  auto no_access = Modify(DcRole::kDct, QpState::kReset, QpState::kInit, kPkeyIndex | kPort);
  ASSERT_FALSE(no_access.ok());
  EXPECT_EQ(no_access.status().rule(), "DCT RESET->INIT is missing IBV_QP_ACCESS_FLAGS");
  EXPECT_TRUE(Modify(DcRole::kDct, QpState::kReset, QpState::kInit, kPkeyIndex | kPort | kAccessFlags).ok());
  auto no_rnr = Modify(DcRole::kDct, QpState::kInit, QpState::kRtr, kAv | kPathMtu);
  ASSERT_FALSE(no_rnr.ok());
  EXPECT_EQ(no_rnr.status().rule(), "DCT INIT->RTR is missing IBV_QP_MIN_RNR_TIMER");
  EXPECT_TRUE(Modify(DcRole::kDct, QpState::kInit, QpState::kRtr, kAv | kPathMtu | kMinRnrTimer).ok());
  for (QpState to : {QpState::kRts, QpState::kSqd}) {
    auto r = Modify(DcRole::kDct, QpState::kRtr, to, 0);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), EINVAL);
    EXPECT_EQ(r.status().rule(), std::string("DCT RTR->") + QpStateName(to) + " is not a valid transition");
  }
  EXPECT_TRUE(Modify(DcRole::kDct, QpState::kRtr, QpState::kErr, 0).ok());
  EXPECT_TRUE(Modify(DcRole::kDct, QpState::kRtr, QpState::kReset, 0).ok());
}

TEST(DcStateTable, DriverQpWithoutRoleIsNotModifiedHere) {
  auto r = Modify(DcRole::kNone, QpState::kReset, QpState::kInit, attr::kPort);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), EOPNOTSUPP);
}

// --- creation ----------------------------------------------------------------------------------

class DcTest : public CoreTest {
 protected:
  DcTest() {
    cq_ = std::move(Cq::Create(*context_, 4096, nullptr, 0).value());
    SrqAttributes sa{256, 2, 0};
    srq_ = std::move(Srq::Create(*pd_, sa).value());
    mr_ = std::move(Mr::Register(*pd_, {reinterpret_cast<uint64_t>(buf_), sizeof(buf_), reinterpret_cast<uint64_t>(buf_),
                                        access::kLocalWrite | access::kRemoteWrite | access::kRemoteRead |
                                            access::kRemoteAtomic})
                        .value());
  }
  QpInitAttributes Init(DcRole role) {
    QpInitAttributes a;
    a.type = QpType::kDriver;
    a.dc.role = role;
    a.dc.dct_access_key = kKey;
    a.pd = pd_.get();
    a.send_cq = a.recv_cq = cq_.get();
    a.cap = {64, 64, 2, 2, 64};
    if (role == DcRole::kDct) a.srq = srq_.get();
    return a;
  }
  std::unique_ptr<Qp> Dct(uint64_t key = kKey) {
    QpInitAttributes a = Init(DcRole::kDct);
    a.dc.dct_access_key = key;
    auto qp = Qp::Create(*context_, a);
    EXPECT_TRUE(qp.ok()) << qp.status().rule();
    QpAttributes m;
    m.qp_state = QpState::kInit;
    m.port_num = 1;
    m.qp_access_flags = access::kRemoteWrite | access::kRemoteRead | access::kRemoteAtomic;
    EXPECT_TRUE((*qp)->Modify(m, attr::kState | attr::kPkeyIndex | attr::kPort | attr::kAccessFlags).ok());
    m.qp_state = QpState::kRtr;
    m.path_mtu = Mtu::k4096;
    m.min_rnr_timer = 1;
    m.ah_attr.is_global = true;
    m.ah_attr.port_num = 1;
    m.ah_attr.sgid_index = 1;
    m.ah_attr.dgid = context_->gids().at(1).gid;
    EXPECT_TRUE((*qp)->Modify(m, attr::kState | attr::kAv | attr::kPathMtu | attr::kMinRnrTimer).ok());
    return std::move(qp.value());
  }
  // A DCI in RTS; `streams`: created with mlx5dv_dci_streams {log_concurrent, log_errored}.
  std::unique_ptr<Qp> Dci(bool streams = false, uint8_t log_concurrent = 0, uint8_t log_errored = 0) {
    QpInitAttributes a = Init(DcRole::kDci);
    a.dc.has_streams = streams;
    a.dc.log_num_concurrent = log_concurrent;
    a.dc.log_num_errored = log_errored;
    auto qp = Qp::Create(*context_, a);
    EXPECT_TRUE(qp.ok()) << qp.status().rule();
    QpAttributes m;
    m.qp_state = QpState::kInit;
    m.port_num = 1;
    EXPECT_TRUE((*qp)->Modify(m, attr::kState | attr::kPkeyIndex | attr::kPort).ok());
    m.qp_state = QpState::kRtr;
    m.path_mtu = Mtu::k4096;
    EXPECT_TRUE((*qp)->Modify(m, attr::kState | attr::kPathMtu).ok());
    m.qp_state = QpState::kRts;
    m.timeout = 1;  // 8 us: a silent target is given up on quickly
    m.retry_cnt = 2;
    m.rnr_retry = 7;
    m.max_rd_atomic = 4;
    EXPECT_TRUE((*qp)->Modify(m, attr::kState | attr::kTimeout | attr::kRetryCnt | attr::kRnrRetry | attr::kSqPsn |
                                     attr::kMaxQpRdAtomic).ok());
    return std::move(qp.value());
  }
  SendWr Wr(WrOpcode op, uint64_t id, uint64_t local_off, uint32_t len, uint32_t dctn, uint64_t key = kKey) {
    SendWr w;
    w.wr_id = id;
    w.opcode = op;
    w.flags = transport::send_flag::kSignaled;
    w.num_sge = 1;
    w.sge[0] = {reinterpret_cast<uint64_t>(buf_) + local_off, len, mr_->lkey()};
    w.rkey = mr_->rkey();
    w.dc.set = true;
    w.dc.remote_dctn = dctn;
    w.dc.access_key = key;
    // The DCT is on this host: the address handle's GID is one of its own (core::Ah::on_host).
    memcpy(w.dc.dgid, context_->gids().at(1).gid.data(), 16);
    w.dc.on_host = true;
    return w;
  }
  void PostRecv(uint64_t id, uint64_t off, uint32_t len) {
    RecvSge s{reinterpret_cast<uint64_t>(buf_) + off, len, mr_->lkey()};
    ASSERT_TRUE(srq_->queue().Post(id, &s, 1).ok());
  }
  std::vector<Completion> Drain(size_t n) {
    std::vector<Completion> got;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    Completion c[16];
    while (got.size() < n && std::chrono::steady_clock::now() < deadline) {
      int k = cq_->Poll(c, 16);
      got.insert(got.end(), c, c + k);
      if (k == 0) std::this_thread::yield();
    }
    return got;
  }
  uint64_t Addr(uint64_t off) const { return reinterpret_cast<uint64_t>(buf_) + off; }

  std::unique_ptr<Cq> cq_;
  std::unique_ptr<Srq> srq_;
  std::unique_ptr<Mr> mr_;
  alignas(64) uint8_t buf_[1 << 16] = {};
};

TEST_F(DcTest, CreationRules) {
  QpInitAttributes no_srq = Init(DcRole::kDct);
  no_srq.srq = nullptr;
  auto r = Qp::Create(*context_, no_srq);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), EINVAL);
  EXPECT_EQ(r.status().rule(), "a DCT receives through an SRQ: srq is NULL");

  QpInitAttributes dct_ops = Init(DcRole::kDct);
  dct_ops.has_send_ops_flags = true;
  dct_ops.send_ops_flags = send_op::kSend;
  EXPECT_EQ(Qp::Create(*context_, dct_ops).status().code(), EINVAL);

  QpInitAttributes dct = Init(DcRole::kDct);
  ASSERT_TRUE(Qp::Create(*context_, dct).ok());
  EXPECT_EQ(dct.cap.max_send_wr, 0u);  // no send queue
  QpInitAttributes dci = Init(DcRole::kDci);
  ASSERT_TRUE(Qp::Create(*context_, dci).ok());
  EXPECT_EQ(dci.cap.max_recv_wr, 0u);  // no receive queue
  EXPECT_EQ(dci.cap.max_send_wr, 64u);

  QpInitAttributes driver = Init(DcRole::kNone);
  EXPECT_EQ(Qp::Create(*context_, driver).status().code(), EOPNOTSUPP);
  QpInitAttributes rc_dc = Init(DcRole::kDci);
  rc_dc.type = QpType::kRc;
  EXPECT_EQ(Qp::Create(*context_, rc_dc).status().code(), EINVAL);
}

TEST_F(DcTest, Mlx5CreateFlagsAcceptedWhereTheyApply) {
  using namespace mlx5_create_flag;
  struct Case {
    QpType type;
    DcRole role;
    uint32_t flags;
    int expect;  // 0 or errno
  };
  const Case cases[] = {
      {QpType::kRc, DcRole::kNone, kDisableScatterToCqe, 0},
      {QpType::kUd, DcRole::kNone, kDisableScatterToCqe, 0},
      {QpType::kDriver, DcRole::kDct, kDisableScatterToCqe, 0},
      {QpType::kRc, DcRole::kNone, kAllowScatterToCqe, 0},
      {QpType::kDriver, DcRole::kDci, kAllowScatterToCqe, 0},
      {QpType::kUc, DcRole::kNone, kAllowScatterToCqe, EINVAL},
      {QpType::kDriver, DcRole::kDct, kAllowScatterToCqe, EINVAL},
      {QpType::kRc, DcRole::kNone, kAllowScatterToCqe | kDisableScatterToCqe, EINVAL},
      {QpType::kRc, DcRole::kNone, kPacketBasedCreditMode, 0},
      {QpType::kUd, DcRole::kNone, kPacketBasedCreditMode, EINVAL},
      {QpType::kDriver, DcRole::kDci, kPacketBasedCreditMode, EINVAL},
      {QpType::kRc, DcRole::kNone, kTunnelOffloads, EINVAL},
      {QpType::kUd, DcRole::kNone, kTirAllowSelfLoopbackUc, EINVAL},
      {QpType::kUd, DcRole::kNone, kTirAllowSelfLoopbackMc, EINVAL},
      {QpType::kRc, DcRole::kNone, kSigPipelining, 0},  // (any type: mlx5 sets drain_sigerr whatever it is)
      {QpType::kUd, DcRole::kNone, kSigPipelining, 0},
      {QpType::kRc, DcRole::kNone, 1u << 7, EINVAL},
  };
  for (const Case& c : cases) {
    QpInitAttributes a = Init(c.role);
    a.type = c.type;
    if (c.role != DcRole::kDct) a.srq = nullptr;
    a.has_mlx5_create_flags = true;
    a.mlx5_create_flags = c.flags;
    auto qp = Qp::Create(*context_, a);
    EXPECT_EQ(qp.ok() ? 0 : qp.status().code(), c.expect)
        << QpTypeName(c.type) << " " << DcRoleName(c.role) << " flags 0x" << std::hex << c.flags << ": "
        << (qp.ok() ? "" : qp.status().rule());
  }
}

// --- traffic ----------------------------------------------------------------------------------

TEST_F(DcTest, EveryOpcodeReachesTheDctFromTwoDcis) {
  auto dct = Dct();
  auto dci1 = Dci();
  auto dci2 = Dci();
  memcpy(buf_, "DC send payload!", 16);
  PostRecv(100, 8192, 64);
  ASSERT_TRUE(dci1->PostSend(Wr(WrOpcode::kSend, 1, 0, 16, dct->qp_num())).ok());
  SendWr write = Wr(WrOpcode::kRdmaWriteWithImm, 2, 0, 16, dct->qp_num());
  write.remote_addr = Addr(1000);
  write.imm_data = 0x11223344;
  PostRecv(101, 9000, 64);
  ASSERT_TRUE(dci2->PostSend(write).ok());
  SendWr read = Wr(WrOpcode::kRdmaRead, 3, 2000, 16, dct->qp_num());
  read.remote_addr = Addr(1000);
  ASSERT_TRUE(dci1->PostSend(read).ok());
  uint64_t v = 7;
  memcpy(buf_ + 4096, &v, 8);
  SendWr add = Wr(WrOpcode::kAtomicFetchAdd, 4, 4104, 8, dct->qp_num());
  add.remote_addr = Addr(4096);
  add.compare_add = 5;
  ASSERT_TRUE(dci2->PostSend(add).ok());
  SendWr cas = Wr(WrOpcode::kAtomicCmpSwp, 5, 4112, 8, dct->qp_num());
  cas.remote_addr = Addr(4096);
  cas.compare_add = 12;
  cas.swap = 99;
  ASSERT_TRUE(dci1->PostSend(cas).ok());

  auto got = Drain(7);  // 5 send completions + 2 receives at the DCT
  ASSERT_EQ(got.size(), 7u);
  int receives = 0;
  for (const Completion& c : got) {
    EXPECT_EQ(c.status, 0u) << c.wr_id;
    if (c.qp_num == dct->qp_num()) {
      ++receives;
      EXPECT_TRUE(c.src_qp == dci1->qp_num() || c.src_qp == dci2->qp_num());
      if (c.wr_id == 101) {
        EXPECT_EQ(c.imm_data, 0x11223344u);
      }
    }
  }
  EXPECT_EQ(receives, 2);
  EXPECT_EQ(memcmp(buf_ + 8192, "DC send payload!", 16), 0);
  EXPECT_EQ(memcmp(buf_ + 1000, "DC send payload!", 16), 0);
  EXPECT_EQ(memcmp(buf_ + 2000, "DC send payload!", 16), 0);
  uint64_t fetched, swapped, final_value;
  memcpy(&fetched, buf_ + 4104, 8);
  memcpy(&swapped, buf_ + 4112, 8);
  memcpy(&final_value, buf_ + 4096, 8);
  EXPECT_EQ(fetched, 7u);
  EXPECT_EQ(swapped, 12u);
  EXPECT_EQ(final_value, 99u);
}

// A wrong key, an unknown DCT, a destroyed DCT: the target stays silent and the DCI gives up after
// its retries with IBV_WC_RETRY_EXC_ERR (transport/dc_access.h); the DCI is then in ERR.
TEST_F(DcTest, SilentTargetsEndInRetryExceeded) {
  auto dct = Dct();
  const uint32_t dctn = dct->qp_num();
  struct Case {
    const char* what;
    uint32_t dctn;
    uint64_t key;
  };
  auto gone = Dct();
  const uint32_t gone_num = gone->qp_num();
  gone.reset();
  for (const Case& c : {Case{"wrong key", dctn, kKey ^ 1}, Case{"unknown DCT", 0xfffff0, kKey},
                        Case{"destroyed DCT", gone_num, kKey}}) {
    auto dci = Dci();
    SendWr w = Wr(WrOpcode::kRdmaWrite, 9, 0, 8, c.dctn, c.key);
    w.remote_addr = Addr(3000);
    memcpy(buf_ + 3000, "untouch!", 8);
    memcpy(buf_, "OVERWRIT", 8);
    ASSERT_TRUE(dci->PostSend(w).ok()) << c.what;
    auto got = Drain(1);
    ASSERT_EQ(got.size(), 1u) << c.what;
    EXPECT_EQ(got[0].status, transport::wc_status::kRetryExcErr) << c.what;
    EXPECT_EQ(memcmp(buf_ + 3000, "untouch!", 8), 0) << c.what;
    EXPECT_EQ(dci->state(), QpState::kErr) << c.what;
  }
}

TEST_F(DcTest, DciWorkRequestNeedsItsDestination) {
  auto dct = Dct();
  auto dci = Dci();
  SendWr w = Wr(WrOpcode::kSend, 1, 0, 8, dct->qp_num());
  w.dc.set = false;
  Status s = dci->PostSend(w);
  EXPECT_EQ(s.code(), EINVAL);
  EXPECT_NE(s.rule().find("mlx5dv_wr_set_dc_addr"), std::string::npos) << s.rule();
}

TEST_F(DcTest, DctDoesNotSend) {
  auto dct = Dct();
  EXPECT_EQ(dct->PostSend(Wr(WrOpcode::kSend, 1, 0, 8, dct->qp_num())).code(), EINVAL);
}

// --- DCI streams (mlx5dv_dci_stream_id_reset(3), transport/dci_streams.h) --------------------

TEST_F(DcTest, DciStreamsWithinTheCaps) {
  for (auto [conc, err, expect] : {std::tuple{16, 16, 0}, std::tuple{0, 0, 0}, std::tuple{17, 0, EINVAL},
                                   std::tuple{0, 17, EINVAL}}) {
    QpInitAttributes a = Init(DcRole::kDci);
    a.dc.has_streams = true;
    a.dc.log_num_concurrent = static_cast<uint8_t>(conc);
    a.dc.log_num_errored = static_cast<uint8_t>(err);
    auto qp = Qp::Create(*context_, a);
    EXPECT_EQ(qp.ok() ? 0 : qp.status().code(), expect) << conc << "/" << err;
    if (!qp.ok()) {
      EXPECT_NE(qp.status().rule().find("exceeds dci_streams_caps"), std::string::npos) << qp.status().rule();
    }
  }
}

// A bad rkey on stream 1 puts only stream 1 in error: stream 2 keeps writing, byte for byte, the
// DCI stays in RTS; stream 1 flushes until it is reset, then writes again.
TEST_F(DcTest, AStreamInErrorDoesNotStopTheOtherStreams) {
  auto dct = Dct();
  const uint32_t dctn = dct->qp_num();
  auto dci = Dci(true, 2, 1);  // 4 concurrent streams; 2 in error stop the DCI
  auto write = [&](uint64_t id, uint16_t stream, uint64_t local, uint64_t remote, uint32_t rkey) {
    SendWr w = Wr(WrOpcode::kRdmaWrite, id, local, 8, dctn);
    w.dc.stream_id = stream;
    w.remote_addr = Addr(remote);
    w.rkey = rkey;
    return dci->PostSend(w);
  };
  memcpy(buf_, "stream-1", 8);
  memcpy(buf_ + 8, "stream-2", 8);
  ASSERT_TRUE(write(1, 1, 0, 4096, mr_->rkey() ^ 0x80).ok());  // a bad rkey
  ASSERT_TRUE(write(2, 1, 0, 4104, mr_->rkey()).ok());         // stream 1: flushed
  ASSERT_TRUE(write(3, 2, 8, 4112, mr_->rkey()).ok());         // stream 2: goes on
  auto got = Drain(3);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].wr_id, 1u);
  EXPECT_EQ(got[0].status, transport::wc_status::kRemAccessErr);
  EXPECT_EQ(got[1].wr_id, 2u);
  EXPECT_EQ(got[1].status, transport::wc_status::kWrFlushErr);
  EXPECT_EQ(got[2].wr_id, 3u);
  EXPECT_EQ(got[2].status, transport::wc_status::kSuccess);
  EXPECT_EQ(dci->state(), QpState::kRts);  // ibv_query_qp tells a stream error from a QP error
  const uint8_t zero[16] = {};
  EXPECT_EQ(memcmp(buf_ + 4096, zero, 16), 0);  // nothing of stream 1 landed
  EXPECT_EQ(memcmp(buf_ + 4112, "stream-2", 8), 0);
  // Resetting a stream that is not in error is refused; stream 1's reset brings it back.
  EXPECT_EQ(dci->ResetDciStream(2).code(), EINVAL);
  ASSERT_TRUE(dci->ResetDciStream(1).ok());
  ASSERT_TRUE(write(4, 1, 0, 4104, mr_->rkey()).ok());
  got = Drain(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, transport::wc_status::kSuccess);
  EXPECT_EQ(memcmp(buf_ + 4104, "stream-1", 8), 0);
  // Two streams in error: the DCI enters ERR and flushes everything, any stream.
  ASSERT_TRUE(write(5, 3, 0, 4096, mr_->rkey() ^ 0x80).ok());
  ASSERT_TRUE(write(6, 1, 0, 4096, mr_->rkey() ^ 0x80).ok());
  ASSERT_TRUE(write(7, 2, 8, 4112, mr_->rkey()).ok());
  got = Drain(3);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].status, transport::wc_status::kRemAccessErr);
  EXPECT_EQ(got[1].status, transport::wc_status::kRemAccessErr);
  EXPECT_EQ(got[2].status, transport::wc_status::kWrFlushErr);
  EXPECT_EQ(dci->state(), QpState::kErr);
  // Outside RTS there is no stream to reset (mlx5: EOPNOTSUPP).
  EXPECT_EQ(dci->ResetDciStream(1).code(), EOPNOTSUPP);
}

TEST_F(DcTest, StreamResetNeedsADciWithStreams) {
  auto dct = Dct();
  auto plain = Dci();
  EXPECT_EQ(plain->ResetDciStream(0).code(), EINVAL);  // no streams
  EXPECT_EQ(dct->ResetDciStream(0).code(), EOPNOTSUPP);  // a DCT is never in RTS (mlx5's first check)
}

}  // namespace
}  // namespace softverbs::core
