// UD multicast through the core's objects (ibv_attach_mcast(3), IBA 10.5): a datagram sent to a
// group's GID with the multicast QPN reaches every attached QP once, with its GRH, and nobody
// else; the sender's own attachment loops back unless IBV_QP_CREATE_BLOCK_SELF_MCAST_LB.
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "core/mr.h"
#include "core/qp.h"
#include "tests/unit/core/test_context.h"
#include "transport/mcast_table.h"

namespace softverbs::core {
namespace {

using transport::Completion;
using transport::SendWr;
using transport::WrOpcode;

constexpr uint32_t kQkey = 0x11111111;
// A group of this process alone (::ffff:239.x.y.z from the pid): ctest runs the test cases as
// parallel processes on one host registry, and multicast reaches every process of the host.
Gid GroupOfThisProcess() {
  const uint32_t pid = static_cast<uint32_t>(getpid());
  return {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 239, static_cast<uint8_t>(pid >> 16), static_cast<uint8_t>(pid >> 8),
          static_cast<uint8_t>(pid)};
}
const Gid kGroup = GroupOfThisProcess();

class McastTest : public CoreTest {
 protected:
  struct Member {
    std::unique_ptr<Cq> cq;
    std::unique_ptr<Qp> qp;
  };

  McastTest() {
    mr_ = std::move(Mr::Register(*pd_, {reinterpret_cast<uint64_t>(buf_), sizeof(buf_), reinterpret_cast<uint64_t>(buf_),
                                        access::kLocalWrite})
                        .value());
  }
  Member MakeUd(uint32_t qkey = kQkey, uint32_t create_flags = 0) {
    Member m;
    m.cq = std::move(Cq::Create(*context_, 64, nullptr, 0).value());
    QpInitAttributes a;
    a.type = QpType::kUd;
    a.pd = pd_.get();
    a.send_cq = a.recv_cq = m.cq.get();
    a.cap = {16, 16, 1, 1, 64};
    a.has_create_flags = create_flags != 0;
    a.create_flags = create_flags;
    m.qp = std::move(Qp::Create(*context_, a).value());
    QpAttributes s;
    s.qp_state = QpState::kInit;
    s.port_num = 1;
    s.qkey = qkey;
    EXPECT_TRUE(m.qp->Modify(s, attr::kState | attr::kPkeyIndex | attr::kPort | attr::kQkey).ok());
    s.qp_state = QpState::kRtr;
    EXPECT_TRUE(m.qp->Modify(s, attr::kState).ok());
    s.qp_state = QpState::kRts;
    EXPECT_TRUE(m.qp->Modify(s, attr::kState | attr::kSqPsn).ok());
    return m;
  }
  // Posts one 256-byte receive at `slot` of the buffer.
  void PostRecv(Member& m, uint64_t slot) {
    transport::RecvSge sge{reinterpret_cast<uint64_t>(buf_) + slot * 256, 256, mr_->lkey()};
    ASSERT_TRUE(m.qp->PostRecv(slot, &sge, 1).ok());
  }
  // Sends `text` from `from` to the group (or to `qpn`).
  void Send(Member& from, const char* text, uint32_t qpn = transport::kMulticastQpn) {
    memcpy(buf_ + 4096, text, strlen(text));
    SendWr w;
    w.wr_id = 99;
    w.opcode = WrOpcode::kSend;
    w.flags = transport::send_flag::kSignaled;
    w.num_sge = 1;
    w.sge[0] = {reinterpret_cast<uint64_t>(buf_) + 4096, static_cast<uint32_t>(strlen(text)), mr_->lkey()};
    memcpy(w.ud.dgid, kGroup.data(), 16);
    memcpy(w.ud.sgid, context_->gids().at(1).gid.data(), 16);
    w.ud.remote_qpn = qpn;
    w.ud.remote_qkey = kQkey;
    ASSERT_TRUE(from.qp->PostSend(w).ok());
  }
  // The receive completions of `m` that arrive within `wait`.
  std::vector<Completion> Receives(Member& m, std::chrono::milliseconds wait = std::chrono::milliseconds(50)) {
    std::vector<Completion> got;
    auto deadline = std::chrono::steady_clock::now() + wait;
    Completion c[8];
    while (std::chrono::steady_clock::now() < deadline) {
      int n = m.cq->Poll(c, 8);
      for (int i = 0; i < n; ++i)
        if (c[i].opcode == transport::wc_opcode::kRecv) got.push_back(c[i]);
    }
    return got;
  }
  std::string Payload(uint64_t slot, size_t n) { return std::string(reinterpret_cast<char*>(buf_) + slot * 256 + 40, n); }

  std::unique_ptr<Mr> mr_;
  alignas(64) uint8_t buf_[8192] = {};
};

TEST_F(McastTest, EveryMemberReceivesOneCopyWithItsGrh) {
  Member sender = MakeUd(), b = MakeUd(), c = MakeUd(), outsider = MakeUd();
  ASSERT_TRUE(b.qp->AttachMcast(kGroup, 0).ok());
  ASSERT_TRUE(b.qp->AttachMcast(kGroup, 0).ok());  // twice: still one copy
  ASSERT_TRUE(c.qp->AttachMcast(kGroup, 0).ok());
  PostRecv(b, 0);
  PostRecv(b, 1);
  PostRecv(c, 2);
  PostRecv(outsider, 3);
  Send(sender, "to the group");
  auto at_b = Receives(b), at_c = Receives(c);
  ASSERT_EQ(at_b.size(), 1u);
  ASSERT_EQ(at_c.size(), 1u);
  EXPECT_TRUE(Receives(outsider).empty());
  EXPECT_EQ(at_b[0].src_qp, sender.qp->qp_num());
  EXPECT_EQ(at_b[0].byte_len, 40u + 12);
  EXPECT_EQ(Payload(0, 12), "to the group");
  EXPECT_EQ(Payload(2, 12), "to the group");
  // The GRH holds the IPv4 header (RoCE v2): the group's IPv4 address as destination.
  EXPECT_EQ(memcmp(buf_ + 36, kGroup.data() + 12, 4), 0);
  ASSERT_TRUE(b.qp->DetachMcast(kGroup).ok());
  ASSERT_TRUE(c.qp->DetachMcast(kGroup).ok());
}

TEST_F(McastTest, OnlyTheMulticastQpnAndTheRightQkeyReachMembers) {
  Member sender = MakeUd(), good = MakeUd(), other_qkey = MakeUd(0x2222);
  ASSERT_TRUE(good.qp->AttachMcast(kGroup, 0).ok());
  ASSERT_TRUE(other_qkey.qp->AttachMcast(kGroup, 0).ok());
  PostRecv(good, 0);
  PostRecv(other_qkey, 1);
  Send(sender, "not multicast", good.qp->qp_num());  // a multicast GID needs QPN 0xffffff
  EXPECT_TRUE(Receives(good).empty());
  Send(sender, "multicast");
  EXPECT_EQ(Receives(good).size(), 1u);
  EXPECT_TRUE(Receives(other_qkey).empty());  // IBA 10.2.5: Q_Key mismatch drops
  ASSERT_TRUE(good.qp->DetachMcast(kGroup).ok());
  PostRecv(good, 2);
  Send(sender, "after detach");
  EXPECT_TRUE(Receives(good).empty());
  ASSERT_TRUE(other_qkey.qp->DetachMcast(kGroup).ok());
}

TEST_F(McastTest, SelfLoopbackUnlessBlocked) {
  Member looping = MakeUd(), blocking = MakeUd(kQkey, create_flag::kBlockSelfMcastLb);
  ASSERT_TRUE(looping.qp->AttachMcast(kGroup, 0).ok());
  ASSERT_TRUE(blocking.qp->AttachMcast(kGroup, 0).ok());
  PostRecv(looping, 0);
  PostRecv(blocking, 1);
  Send(blocking, "from the blocking QP");
  EXPECT_TRUE(Receives(blocking).empty());
  EXPECT_EQ(Receives(looping).size(), 1u);
  PostRecv(looping, 2);
  Send(looping, "from the looping QP");
  EXPECT_EQ(Receives(looping).size(), 1u);
  EXPECT_EQ(Receives(blocking).size(), 1u);
  ASSERT_TRUE(looping.qp->DetachMcast(kGroup).ok());
  ASSERT_TRUE(blocking.qp->DetachMcast(kGroup).ok());
}

TEST_F(McastTest, MulticastGidForms) {
  uint8_t gid[16] = {};
  EXPECT_FALSE(transport::IsMulticastGid(gid));
  gid[0] = 0xff;
  EXPECT_TRUE(transport::IsMulticastGid(gid));  // ff00::/8
  const uint8_t v4_unicast[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1};
  EXPECT_FALSE(transport::IsMulticastGid(v4_unicast));
  EXPECT_TRUE(transport::IsMulticastGid(kGroup.data()));  // ::ffff:239.x.y.z
}

}  // namespace
}  // namespace softverbs::core
