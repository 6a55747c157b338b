// The scaffolding the requester's tests share: a QP that records what the requester reports, and
// a fixture holding a requester between two links (the host's, the wire's) with one registered
// buffer, the configuration every test starts from, and a bounded wait.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/mr.h"
#include "tests/unit/core/test_context.h"
#include "transport/completer.h"
#include "transport/requester.h"

namespace softverbs::core::requester_testing {

// The QP the requester and its completer report to; the progress thread reports too, so it
// takes a lock.
struct FakeQp : transport::RequesterHost {
  void Complete(const transport::Completion& c) override {
    std::lock_guard lock(mu);
    completions.push_back(c);
  }
  void EnterError() override { ++errors; }
  void EnterSendQueueError() override {}
  void PathMigrated() override { ++migrations; }
  size_t count() {
    std::lock_guard lock(mu);
    return completions.size();
  }
  std::mutex mu;
  std::vector<transport::Completion> completions;
  std::atomic<int> errors{0};
  std::atomic<int> migrations{0};
};

// A requester whose host and wire links the test supplies, over a registered buffer (aligned to
// kBufAlign: a test that registers it at an iova of its own needs the page offsets to agree).
template <typename HostLink, typename WireLink, size_t kBufBytes, size_t kBufAlign = 1>
class RequesterFixture : public CoreTest {
 protected:
  RequesterFixture() : requester_(context_->local(), qp_, {&host_, &wire_}) {
    mr_ = std::move(Mr::Register(*pd_, {reinterpret_cast<uint64_t>(buf_), sizeof(buf_),
                                        reinterpret_cast<uint64_t>(buf_), access::kLocalWrite})
                        .value());
  }
  // QP 0x200 to QP 0x201 of this test's PD and process; each test sets the rest.
  transport::RequesterConfig BaseConfig(uint32_t type, uint8_t timeout, uint8_t retry_cnt) {
    transport::RequesterConfig c;
    c.completer.qp_num = 0x200;
    c.completer.type = type;
    c.completer.timeout = timeout;
    c.completer.retry_cnt = retry_cnt;
    c.completer.rnr_retry = 7;
    c.pd = pd_->host_id();
    c.process_slot = context_->local().slot();
    c.dest_qp_num = 0x201;
    return c;
  }
  // A signaled work request of one SGE at the start of the buffer.
  transport::SendWr MakeWr(uint64_t id, transport::WrOpcode op, uint32_t length) {
    transport::SendWr w;
    w.wr_id = id;
    w.opcode = op;
    w.flags = transport::send_flag::kSignaled;
    w.num_sge = 1;
    w.sge[0] = {reinterpret_cast<uint64_t>(buf_), length, mr_->lkey()};
    return w;
  }
  // Waits (bounded, about 5 s) until `done` holds; says whether it does.
  static bool WaitFor(const std::function<bool()>& done) {
    for (int i = 0; i < 5000 && !done(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return done();
  }
  alignas(kBufAlign) uint8_t buf_[kBufBytes] = {};
  FakeQp qp_;
  HostLink host_;
  WireLink wire_;
  std::unique_ptr<Mr> mr_;
  transport::Requester requester_;
};

}  // namespace softverbs::core::requester_testing
