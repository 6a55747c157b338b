// The same-host route kept across work requests (transport/host/direct_route.h): an initiator in
// a child process (a host member of its own after fork) reaches this process's QP and a memfd
// registration; the route is used only while the QP, its process and the key are as learned.
#include "transport/host/direct_route.h"

#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <optional>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/cq.h"
#include "core/mr.h"
#include "core/qp.h"
#include "tests/unit/core/test_context.h"
#include "transport/host/host_link.h"
#include "transport/host/host_target.h"
#include "transport/responder.h"

namespace softverbs::core {
namespace {

using transport::ReplyCode;
using transport::WrOpcode;

constexpr size_t kRouteMemBytes = 1 << 20;
constexpr uint64_t kRouteIova = 0x40000;
// One step of ExecuteDirect and part of another (DirectRoute::MoveInSteps), within the key.
constexpr uint64_t kLongWrite = transport::Responder::kDirectMaxBytes + 4096 + 3;
static_assert(kLongWrite < kRouteMemBytes / 2);

// An RC request of `op` to QP `qpn` at [addr, +local->iov_len) of `rkey`.
transport::Request RouteRequest(WrOpcode op, uint32_t qpn, iovec* local, uint32_t rkey, uint64_t addr) {
  transport::Request r;
  r.qp_type = transport::qp_type::kRc;
  r.opcode = op;
  r.dest_qp = qpn;
  r.local = local;
  r.local_count = 1;
  r.length = local->iov_len;
  r.remote_addr = addr;
  r.rkey = rkey;
  return r;
}

class DirectRouteTest : public CoreTest {
 protected:
  DirectRouteTest() {
    cq_ = std::move(Cq::Create(*context_, 64, nullptr, 0).value());
    qp_ = NewRcQp(*cq_);
    ToRtr(*qp_, qp_->qp_num(), access::kRemoteWrite | access::kRemoteRead | access::kRemoteAtomic);
    memfd_ = memfd_create("sv-direct-route-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    EXPECT_GE(memfd_, 0);
    EXPECT_EQ(ftruncate(memfd_, kRouteMemBytes), 0);
    EXPECT_EQ(fcntl(memfd_, F_ADD_SEALS, F_SEAL_SHRINK), 0);  // copied unguarded: the route may keep it
    mem_ = static_cast<uint8_t*>(mmap(nullptr, kRouteMemBytes, PROT_READ | PROT_WRITE, MAP_SHARED, memfd_, 0));
    EXPECT_NE(mem_, MAP_FAILED);
    mr_ = Register(0);
  }
  ~DirectRouteTest() override {
    if (child_ > 0) {
      kill(child_, SIGKILL);
      waitpid(child_, nullptr, 0);
    }
    for (int fd : {to_child_, from_child_, memfd_})
      if (fd >= 0) close(fd);
    mr_.reset();
    munmap(mem_, kRouteMemBytes);
  }
  std::unique_ptr<Mr> Register(uint64_t offset) {
    MrLayout l{reinterpret_cast<uint64_t>(mem_ + offset), kRouteMemBytes / 2, kRouteIova,
               access::kLocalWrite | access::kRemoteWrite | access::kRemoteRead | access::kRemoteAtomic};
    return std::move(Mr::Register(*pd_, l).value());
  }

  // The initiator: commands in, one answer byte out. 'r' v: a WRITE of byte v through the route
  // only ('N' if it did not take it, else the reply code); 'u' v: the usual way (HostTarget::Find,
  // Responder::Execute), the route learning from a kAck; 'h' v: 'Y' if the route holds the QP for
  // a SEND (HeldTarget), else 'N'; 'k' rkey, address (12 bytes): where to
  // write from now on; 'l' lkey (4 bytes): from now on 'r' names that key as the local buffer's
  // (DirectRequest::local_key) -- answered 'Y' once learned; 'a' v: a fetch-and-add of v at the
  // key's 64th byte through the route with that lkey, answered with the low byte of the original
  // value found in the local buffer (or 'N'); 'b' v: a WRITE of kLongWrite bytes of v at the key's
  // start through the route only, longer than one step of ExecuteDirect (answered as 'r').
  void StartInitiator() {
    int in[2], out[2];
    ASSERT_EQ(pipe(in), 0);
    ASSERT_EQ(pipe(out), 0);
    const uint32_t qpn = qp_->qp_num();
    uint32_t rkey = mr_->rkey();
    uint64_t remote_addr = kRouteIova + 7;
    child_ = fork();
    if (child_ == 0) {
      close(in[1]);
      close(out[0]);
      alarm(60);
      auto local = fabric::LocalProcess::Get();
      if (!local.ok()) _exit(1);
      transport::DirectRoute route(*local.value());
      transport::PeerHint hint;
      transport::HeldKey lkey;
      uint64_t lkey_epoch = ~0ull;
      for (uint8_t cmd, v; read(in[0], &cmd, 1) == 1;) {
        if (cmd == 'k') {
          if (read(in[0], &rkey, 4) != 4 || read(in[0], &remote_addr, 8) != 8) _exit(1);
          continue;
        }
        if (cmd == 'l') {
          uint32_t key = 0;
          if (read(in[0], &key, 4) != 4) _exit(1);
          const uint8_t learned = lkey.Learn(local.value()->registry(), key) ? 'Y' : 'N';
          if (write(out[1], &learned, 1) != 1) _exit(1);
          continue;
        }
        if (read(in[0], &v, 1) != 1) _exit(1);
        iovec iov{&v, 1};
        const transport::Request r = RouteRequest(WrOpcode::kRdmaWrite, qpn, &iov, rkey, remote_addr);
        transport::Reply reply;
        uint8_t answer = 'N';
        transport::DirectRequest d{WrOpcode::kRdmaWrite, qpn, &v, 1, remote_addr, rkey};
        if (lkey.key() != 0) {
          d.local_key = &lkey;
          d.local_epoch = &lkey_epoch;
        }
        if (cmd == 'r') {
          if (route.Carry(d, &reply)) answer = static_cast<uint8_t>(reply.code);
        } else if (cmd == 'b') {
          std::vector<uint8_t> bytes(kLongWrite, v);
          d = {WrOpcode::kRdmaWrite, qpn, bytes.data(), kLongWrite, kRouteIova, rkey};
          if (route.Carry(d, &reply)) answer = static_cast<uint8_t>(reply.code);
        } else if (cmd == 'a') {
          uint64_t original = 0;
          d = {WrOpcode::kAtomicFetchAdd, qpn, &original, 8, kRouteIova + 64, rkey, v, 0, &lkey, &lkey_epoch};
          if (route.Carry(d, &reply) && reply.code == ReplyCode::kAck) answer = static_cast<uint8_t>(original);
        } else if (cmd == 'h') {  // the kept QP held for a SEND: 'Y' if it is, as learned
          transport::Request send = r;
          send.opcode = WrOpcode::kSend;
          std::optional<transport::HostTarget> held = route.HeldTarget(send);
          if (held) answer = held->endpoint().qp_num == qpn ? 'Y' : 'X';
        } else {
          auto target = transport::HostTarget::Find(*local.value(), qpn, &hint);
          answer = static_cast<uint8_t>(target.ok() ? transport::Responder::Execute(*target, r).code
                                                    : ReplyCode::kNoAnswer);
          if (answer == static_cast<uint8_t>(ReplyCode::kAck)) route.Learn(r, hint);
        }
        if (write(out[1], &answer, 1) != 1) _exit(1);
      }
      _exit(0);
    }
    close(in[0]);
    close(out[1]);
    to_child_ = in[1];
    from_child_ = out[0];
  }
  int Ask(uint8_t cmd, uint8_t v) {
    uint8_t msg[2] = {cmd, v};
    if (write(to_child_, msg, 2) != 2) return -1;
    pollfd p{from_child_, POLLIN, 0};
    if (poll(&p, 1, 10000) != 1) return -1;
    uint8_t answer;
    return read(from_child_, &answer, 1) == 1 ? answer : -1;
  }
  int LearnLkey(uint32_t lkey) {
    uint8_t msg[5] = {'l'};
    memcpy(msg + 1, &lkey, 4);
    if (write(to_child_, msg, 5) != 5) return -1;
    pollfd p{from_child_, POLLIN, 0};
    uint8_t answer;
    return poll(&p, 1, 10000) == 1 && read(from_child_, &answer, 1) == 1 ? answer : -1;
  }
  void UseKey(uint32_t rkey, uint64_t remote_addr) {
    uint8_t msg[13] = {'k'};
    memcpy(msg + 1, &rkey, 4);
    memcpy(msg + 5, &remote_addr, 8);
    ASSERT_EQ(write(to_child_, msg, 13), 13);
  }
  static constexpr int kAck = static_cast<int>(ReplyCode::kAck);

  std::unique_ptr<Cq> cq_;
  std::unique_ptr<Qp> qp_;
  int memfd_ = -1;
  uint8_t* mem_ = nullptr;
  std::unique_ptr<Mr> mr_;
  pid_t child_ = -1;
  int to_child_ = -1, from_child_ = -1;
};

TEST_F(DirectRouteTest, AnAcknowledgedWriteTeachesTheRouteAndTheNextGoesThroughIt) {
  transport::KeyView view;
  ASSERT_TRUE(transport::KeyPin::Peek(context_->registry(), mr_->rkey(), &view));
  ASSERT_NE(view.access & transport::kSharedBacking, 0u) << "the memfd must be a shared backing";
  StartInitiator();
  EXPECT_EQ(Ask('r', 0x11), 'N') << "nothing learned yet";
  EXPECT_EQ(Ask('h', 0), 'N');
  EXPECT_EQ(mem_[7], 0);
  EXPECT_EQ(Ask('u', 0x22), kAck);
  EXPECT_EQ(mem_[7], 0x22);
  EXPECT_EQ(Ask('r', 0x33), kAck);
  EXPECT_EQ(mem_[7], 0x33);
  EXPECT_EQ(Ask('h', 0), 'Y') << "a SEND to the kept QP skips the lookup";
}

TEST_F(DirectRouteTest, AReregisteredKeyOrADestroyedQpIsNotReachedThroughTheRoute) {
  StartInitiator();
  ASSERT_EQ(Ask('u', 0x01), kAck);
  ASSERT_EQ(Ask('r', 0x02), kAck);
  // Same key, another place (ibv_rereg_mr; the iova becomes the new address): the kept view is
  // stale, even for an address the new registration covers.
  uint8_t* half = mem_ + kRouteMemBytes / 2;
  MrLayout moved{reinterpret_cast<uint64_t>(half), kRouteMemBytes / 2, 0, access::kLocalWrite | access::kRemoteWrite};
  ASSERT_TRUE(mr_->Reregister(rereg::kChangeTranslation | rereg::kChangeAccess, nullptr, moved).ok());
  UseKey(mr_->rkey(), reinterpret_cast<uint64_t>(half) + 7);
  EXPECT_EQ(Ask('r', 0x03), 'N');
  EXPECT_EQ(mem_[7], 0x02);
  EXPECT_EQ(mem_[kRouteMemBytes / 2 + 7], 0);
  EXPECT_EQ(Ask('u', 0x04), kAck);  // the usual way, into the new place, and learned again
  EXPECT_EQ(mem_[kRouteMemBytes / 2 + 7], 0x04);
  EXPECT_EQ(Ask('r', 0x05), kAck);
  EXPECT_EQ(mem_[kRouteMemBytes / 2 + 7], 0x05);
  // Deregistered: neither way reaches it (IBA 10.6.3).
  const uint32_t old_rkey = mr_->rkey();
  mr_.reset();
  EXPECT_EQ(Ask('r', 0x06), 'N');
  EXPECT_EQ(Ask('u', 0x06), static_cast<int>(ReplyCode::kRemoteAccess));
  EXPECT_EQ(mem_[kRouteMemBytes / 2 + 7], 0x05);
  // A new registration and key; then the QP destroyed: nothing answers (IBA 9.6.1.1).
  mr_ = Register(0);
  ASSERT_NE(mr_->rkey(), old_rkey);
  UseKey(mr_->rkey(), kRouteIova + 7);
  ASSERT_EQ(Ask('u', 0x07), kAck);
  ASSERT_EQ(Ask('r', 0x08), kAck);
  ASSERT_EQ(Ask('h', 0), 'Y');
  qp_.reset();
  EXPECT_EQ(Ask('h', 0), 'N') << "a destroyed QP held for a SEND";
  EXPECT_EQ(Ask('r', 0x09), 'N');
  EXPECT_EQ(Ask('u', 0x09), static_cast<int>(ReplyCode::kNoAnswer));
  EXPECT_EQ(mem_[7], 0x08);
}

// The QP moved to ERR by its owner (ibv_modify_qp): the route's checks of its state are found
// again (the modify bumps the route epoch), and the usual way answers.
TEST_F(DirectRouteTest, AQpMovedToErrorIsNotReachedThroughTheRoute) {
  StartInitiator();
  ASSERT_EQ(Ask('u', 0x01), kAck);
  ASSERT_EQ(Ask('r', 0x02), kAck);
  QpAttributes err;
  err.qp_state = QpState::kErr;
  ASSERT_TRUE(qp_->Modify(err, attr::kState).ok());
  EXPECT_EQ(Ask('r', 0x03), 'N');
  EXPECT_NE(Ask('u', 0x03), kAck);  // IBA 10.3.1: a QP in ERR takes nothing
  EXPECT_EQ(mem_[7], 0x02);
}

// What a route trusts between changes: the rules it checked (the QP, its state and access, the
// key) stand while the route epoch reads the value they were checked under; a bump makes the
// next request check them again. (A change written without a bump -- which no verb does --
// shows which is which.)
TEST_F(DirectRouteTest, TheRouteChecksAgainOnlyWhenTheRouteEpochMoves) {
  StartInitiator();
  ASSERT_EQ(Ask('u', 0x01), kAck);
  ASSERT_EQ(Ask('r', 0x02), kAck);
  QpEndpoint& e = qp_->endpoint();
  const uint32_t access = e.access;
  e.access = 0;  // (no bump)
  EXPECT_EQ(Ask('r', 0x03), kAck) << "checked under the same epoch: trusted";
  context_->registry().BumpRouteEpoch();
  EXPECT_EQ(Ask('r', 0x04), 'N') << "the epoch moved: the QP's access is read again";
  EXPECT_EQ(mem_[7], 0x03);
  e.access = access;
  context_->registry().BumpRouteEpoch();
  EXPECT_EQ(Ask('r', 0x05), kAck);
  EXPECT_EQ(mem_[7], 0x05);
  // The QP held for a SEND (HeldTarget) likewise: its number cleared without a bump is not
  // seen; after one, the QP is not the one learned.
  ASSERT_EQ(Ask('h', 0), 'Y');
  const uint32_t qpn = e.qp_num;
  std::atomic_ref<uint32_t>(e.qp_num).store(0);
  EXPECT_EQ(Ask('h', 0), 'X') << "checked under the same epoch: trusted (held, though it reads 0)";
  context_->registry().BumpRouteEpoch();
  EXPECT_EQ(Ask('h', 0), 'N');
  std::atomic_ref<uint32_t>(e.qp_num).store(qpn);
  context_->registry().BumpRouteEpoch();
  EXPECT_EQ(Ask('h', 0), 'Y');
}

// A WRITE longer than one step of ExecuteDirect goes through the route a step at a time, whole.
TEST_F(DirectRouteTest, AWriteLongerThanAStepLandsWholeThroughTheRoute) {
  StartInitiator();
  ASSERT_EQ(Ask('u', 0x01), kAck);
  EXPECT_EQ(Ask('b', 0x5c), kAck);
  size_t wrong = 0;
  for (uint64_t i = 0; i < kLongWrite; ++i) wrong += mem_[i] != 0x5c;
  EXPECT_EQ(wrong, 0u);
  EXPECT_EQ(mem_[kLongWrite], 0) << "not a byte beyond the message";
}

// Between steps the route epoch is read again: a change (a withdrawal or a destroy waiting for
// the announcements) stops the WRITE after the step in progress, and the usual way takes it
// (answered 'N' here) -- the bound the usual way's copies keep (mapped_copy.h). A thread bumps
// the epoch without pause while the initiator writes; once it stops, the route goes on whole.
TEST_F(DirectRouteTest, AMovedEpochStopsALongWriteBetweenSteps) {
  StartInitiator();
  ASSERT_EQ(Ask('u', 0x01), kAck);
  std::atomic<bool> stop{false};
  std::thread bumper([&] {
    while (!stop.load(std::memory_order_relaxed)) context_->registry().BumpRouteEpoch();
  });
  int stopped = 0, whole = 0;
  for (int i = 0; i < 50 && stopped == 0; ++i) {
    const int answer = Ask('b', static_cast<uint8_t>(0x10 + i));
    stopped += answer == 'N';
    whole += answer == kAck;
  }
  stop = true;
  bumper.join();
  EXPECT_GT(stopped, 0) << "no long WRITE stopped between steps in " << whole << " under a moving epoch";
  EXPECT_EQ(Ask('b', 0x7e), kAck);
  EXPECT_EQ(mem_[0], 0x7e);
  EXPECT_EQ(mem_[kLongWrite - 1], 0x7e);
}

// The requester's lane hands the route its kept lkey (DirectRequest::local_key): announced with
// the QP and the R_Key, found current once per route epoch, and an atomic's original value lands
// in the local buffer while it is held; once deregistered (a bump), the route does not use it.
TEST_F(DirectRouteTest, TheLocalKeyIsHeldWithTheRouteAndFoundCurrentPerEpoch) {
  auto local_mr = Register(kRouteMemBytes / 2);  // (the initiator's lkey: any registration)
  StartInitiator();
  ASSERT_EQ(Ask('u', 0x01), kAck);
  ASSERT_EQ(LearnLkey(local_mr->lkey()), 'Y');
  EXPECT_EQ(Ask('r', 0x02), kAck);
  EXPECT_EQ(mem_[7], 0x02);
  const uint64_t forty = 40;
  memcpy(mem_ + 64, &forty, 8);
  EXPECT_EQ(Ask('a', 2), 40) << "the original value lands in the local buffer";
  uint64_t now = 0;
  memcpy(&now, mem_ + 64, 8);
  EXPECT_EQ(now, 42u);
  local_mr.reset();  // ibv_dereg_mr of the local key: the epoch moves, the key is not current
  EXPECT_EQ(Ask('r', 0x03), 'N');
  EXPECT_EQ(Ask('a', 2), 'N');
  EXPECT_EQ(mem_[7], 0x02);
  memcpy(&now, mem_ + 64, 8);
  EXPECT_EQ(now, 42u);
}

// A file that may shrink (not sealed) is kept too, and copied under the SIGBUS guard: truncated
// under the registration, the access is a remote operational error (the usual way's answer),
// never a crash, and the route lets the window go.
TEST_F(DirectRouteTest, ATruncatedFileIsAnErrorThroughTheRouteNotASignal) {
  constexpr size_t kSize = 64 << 10;
  const int fd = memfd_create("sv-direct-route-shrinks", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, kSize), 0);
  auto* mem = static_cast<uint8_t*>(mmap(nullptr, kSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  ASSERT_NE(mem, MAP_FAILED);
  auto mr = std::move(Mr::Register(*pd_, {reinterpret_cast<uint64_t>(mem), kSize, kRouteIova,
                                          access::kLocalWrite | access::kRemoteWrite})
                          .value());
  StartInitiator();
  UseKey(mr->rkey(), kRouteIova + 7);
  ASSERT_EQ(Ask('u', 0x41), kAck);
  ASSERT_EQ(Ask('r', 0x42), kAck) << "a file that may shrink is kept (guarded)";
  EXPECT_EQ(mem[7], 0x42);
  ASSERT_EQ(ftruncate(fd, 0), 0);  // the owner's bug: the registered pages leave the file
  EXPECT_EQ(Ask('r', 0x43), static_cast<int>(ReplyCode::kRemoteOp));
  EXPECT_EQ(Ask('r', 0x44), 'N') << "the faulted window was not let go";
  EXPECT_EQ(Ask('u', 0x45), static_cast<int>(ReplyCode::kRemoteOp));  // the usual way agrees
  mr.reset();
  munmap(mem, kSize);
  close(fd);
}

// IBV_ATOMIC_HCA across the two ways: the child's fetch-adds go through the route (CPU atomics
// in the mapping), this process's own through a read-modify-write with process_vm (its own QP
// as the target): both hold the same stripe lock, so no increment is lost.
TEST_F(DirectRouteTest, AtomicsThroughTheRouteAndAProcessVmUpdateStayExact) {
  constexpr int kAdds = 3000;
  const uint32_t qpn = qp_->qp_num();
  const uint32_t rkey = mr_->rkey();
  uint64_t original = 0;
  iovec iov{&original, 8};
  transport::Request r = RouteRequest(WrOpcode::kAtomicFetchAdd, qpn, &iov, rkey, kRouteIova + 64);
  r.compare_add = 1;
  int done[2];
  ASSERT_EQ(pipe(done), 0);
  child_ = fork();
  if (child_ == 0) {
    alarm(60);
    auto local = fabric::LocalProcess::Get();
    if (!local.ok()) _exit(1);
    transport::DirectRoute route(*local.value());
    transport::PeerHint hint;
    int routed = 0, acked = 0;
    for (int i = 0; i < kAdds; ++i) {
      transport::Reply reply;
      if (route.Carry(r, &reply)) {
        ++routed;
      } else if (auto target = transport::HostTarget::Find(*local.value(), qpn, &hint); target.ok()) {
        reply = transport::Responder::Execute(*target, r);
        if (reply.code == ReplyCode::kAck) route.Learn(r, hint);
      }
      acked += reply.code == ReplyCode::kAck ? 1 : 0;
    }
    // (all acknowledged, and all but the first through the route)
    uint8_t ok = acked == kAdds && routed == kAdds - 1 ? 1 : 0;
    if (write(done[1], &ok, 1) != 1) _exit(1);
    _exit(0);
  }
  close(done[1]);
  from_child_ = done[0];
  transport::HostLink mine(context_->local());  // this process's own QP: the usual way, process_vm
  int acked = 0;
  for (int i = 0; i < kAdds; ++i) acked += mine.Carry(r).code == ReplyCode::kAck ? 1 : 0;
  EXPECT_EQ(acked, kAdds);
  pollfd p{done[0], POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 30000), 1);
  uint8_t ok = 0;
  ASSERT_EQ(read(done[0], &ok, 1), 1);
  EXPECT_EQ(ok, 1);
  uint64_t total = 0;
  memcpy(&total, mem_ + 64, 8);
  EXPECT_EQ(total, 2u * kAdds);
}

}  // namespace
}  // namespace softverbs::core
