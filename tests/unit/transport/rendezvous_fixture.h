// The scaffolding the rendezvous responder tests share (responder_rendezvous_test.cc on the
// responder's role, wire/rc_responder_rendezvous_test.cc on the RC packet front end): an issuer
// standing for the QP's owner, and a fixture holding RC QP kQpn in RTS whose receive queue has a
// tag matching table over one registered buffer, with that issuer registered for it.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "base/big_endian.h"
#include "core/cq.h"
#include "core/mr.h"
#include "tests/unit/core/test_context.h"
#include "tests/unit/transport/fake_target.h"
#include "transport/recv_queue.h"
#include "transport/request.h"
#include "transport/rendezvous.h"
#include "transport/tag_matcher.h"

namespace softverbs::core::rendezvous_testing {

// The QP's owner: records every READ handed to it; `ready` and `accept` say what it answers.
struct RecordingIssuer : transport::RendezvousIssuer {
  bool CanIssueRendezvous() const override { return ready; }
  bool IssueRendezvous(const transport::RendezvousRead& read) override {
    issued.push_back(read);
    return accept;
  }
  bool ready = true, accept = true;
  std::vector<transport::RendezvousRead> issued;
};

// The first bytes of a tag matching message: its TMH, then an RVH naming (va, rkey, len).
inline void WriteTmhAndRvh(uint8_t* out, const transport::TmHeader& tmh, uint64_t va, uint32_t rkey, uint32_t len) {
  transport::WriteTmh(tmh, out);
  PutBe64(out + transport::kTmhBytes, va);
  PutBe32(out + transport::kTmhBytes + 8, rkey);
  PutBe32(out + transport::kTmhBytes + 12, len);
}

// RC QP kQpn in RTS with a receive CQ and a receive queue of `cq_entries` / `rq_entries`, a
// table of 4 tags on that queue, buf_ registered with `mr_access`.
class TmRcQpFixture : public CoreTest {
 protected:
  static constexpr uint32_t kQpn = 0x1234;

  TmRcQpFixture(int cq_entries, uint32_t rq_entries, uint32_t mr_access) : target_(context_->local()) {
    cq_ = std::move(Cq::Create(*context_, cq_entries, nullptr, 0).value());
    rq_ = std::move(transport::RecvQueue::Create(context_->local(), rq_entries, 1).value());
    mr_ = std::move(Mr::Register(*pd_, {reinterpret_cast<uint64_t>(buf_), sizeof(buf_), reinterpret_cast<uint64_t>(buf_),
                                        mr_access})
                        .value());
    table_ref_ = context_->local().Allocate(transport::TagTableBytes(4)).value();
    table_ = static_cast<transport::TagTable*>(context_->local().At(table_ref_));
    memset(static_cast<void*>(table_), 0, transport::TagTableBytes(4));
    transport::TagTableInit(*table_, 4);
    rq_->ring().tm = table_ref_;
    transport::QpEndpoint& e = target_.e_;
    e.state.store(transport::qp_state::kRts);
    e.qp_num = kQpn;
    e.type = transport::qp_type::kRc;
    e.pd = pd_->host_id();
    e.recv_cq = cq_->ring_ref();
    e.recv_queue = rq_->ref();
    e.async_fd = -1;
    transport::RegisterRendezvousIssuer(kQpn, &issuer_);
  }
  ~TmRcQpFixture() override {
    transport::UnregisterRendezvousIssuer(kQpn, &issuer_);
    rq_->ring().tm = {};
    context_->local().Free(table_ref_, transport::TagTableBytes(4));
  }
  // Posts a tag matching `tag` exactly, of `length` bytes at the start of buf_.
  void AddTag(uint64_t tag, uint32_t length, uint64_t wr_id) {
    const uint64_t addr = reinterpret_cast<uint64_t>(buf_);
    ASSERT_TRUE(transport::TagAdd(*table_, {tag, ~0ull, wr_id, addr, length, mr_->lkey(), 1}).ok);
  }
  // A SEND to kQpn of the one piece `piece` (which must outlive the request).
  static transport::Request SendOf(const iovec* piece) {
    transport::Request r;
    r.qp_type = transport::qp_type::kRc;
    r.opcode = transport::WrOpcode::kSend;
    r.dest_qp = kQpn;
    r.local = piece;
    r.local_count = 1;
    r.length = piece->iov_len;
    return r;
  }

  uint8_t buf_[256] = {};
  RecordingIssuer issuer_;
  transport::FakeTarget target_;
  std::unique_ptr<Cq> cq_;
  std::unique_ptr<transport::RecvQueue> rq_;
  std::unique_ptr<Mr> mr_;
  fabric::SharedRef table_ref_{};
  transport::TagTable* table_ = nullptr;
};

}  // namespace softverbs::core::rendezvous_testing
