#include "transport/rendezvous.h"

#include <unistd.h>

#include <mutex>
#include <unordered_map>

#include "base/big_endian.h"
#include "base/log.h"

namespace softverbs::transport {
namespace {

// The FIN (internal): the 16 bytes it sends live with it, a failure is only logged (the data is
// in place at the receiver whatever the sender makes of it).
class FinWork final : public InternalWork {
 public:
  explicit FinWork(const RendezvousRead& read) : qp_num_(read.qp_num), tag_(read.tag) {
    WriteTmh(TmHeader{kTmhFin, read.app_ctx, read.tag}, bytes_);
  }
  uint8_t* bytes() { return bytes_; }
  std::optional<SendWr> Finished(uint32_t status) override {
    if (status != wc_status::kSuccess)
      SV_LOG(kError, "tag matching rendezvous at qp 0x%x (tag 0x%llx): the FIN to the sender failed (wc status %u)",
             qp_num_, static_cast<unsigned long long>(tag_), status);
    return std::nullopt;
  }

 private:
  uint32_t qp_num_;
  uint64_t tag_;
  uint8_t bytes_[kTmhBytes];
};

// The READ (internal): its completion is the tag's second one; on success the FIN follows.
class ReadWork final : public InternalWork {
 public:
  ReadWork(const RendezvousRead& read, std::function<void(const Completion&)> complete)
      : read_(read), complete_(std::move(complete)) {}
  std::optional<SendWr> Finished(uint32_t status) override {
    if (status != wc_status::kSuccess && status != wc_status::kWrFlushErr)
      SV_LOG(kError, "tag matching rendezvous at qp 0x%x (tag 0x%llx): READ of [0x%llx, +%u) rkey 0x%x from the "
             "sender failed (wc status %u)", read_.qp_num, static_cast<unsigned long long>(read_.tag),
             static_cast<unsigned long long>(read_.va), read_.len, read_.rkey, status);
    complete_(RendezvousCompletion(read_, status));
    if (status != wc_status::kSuccess) return std::nullopt;
    auto fin = std::make_shared<FinWork>(read_);
    SendWr wr{};
    wr.opcode = WrOpcode::kSend;
    wr.flags = send_flag::kInline;
    wr.inline_data = fin->bytes();
    wr.inline_length = kTmhBytes;
    wr.internal = std::move(fin);
    return wr;
  }

 private:
  RendezvousRead read_;
  std::function<void(const Completion&)> complete_;
};

struct Issuers {
  std::mutex mu;  // held while an issuer is called: unregistering waits for it
  std::unordered_map<uint32_t, RendezvousIssuer*> by_qpn;
  pid_t pid = 0;  // a child of fork() inherits the map, not the QPs
};

Issuers& TheIssuers() {
  static Issuers* issuers = new Issuers;  // (never destroyed: QPs may outlive static destructors)
  return *issuers;
}

RendezvousIssuer* FindLocked(Issuers& s, uint32_t qpn) {
  if (s.pid != getpid()) return nullptr;
  auto it = s.by_qpn.find(qpn);
  return it == s.by_qpn.end() ? nullptr : it->second;
}

}  // namespace

void ParseRvh(const uint8_t* tmh_and_rvh, RendezvousRead* out) {
  const uint8_t* rvh = tmh_and_rvh + kTmhBytes;  // struct ibv_rvh: __be64 va, __be32 rkey, __be32 len
  out->va = Be64(rvh);
  out->rkey = Be32(rvh + 8);
  out->len = Be32(rvh + 12);
}

Completion RendezvousCompletion(const RendezvousRead& read, uint32_t status) {
  Completion c;
  c.wr_id = read.wr_id;
  c.status = status;
  c.opcode = wc_opcode::kTmRecv;
  c.qp_num = read.qp_num;
  c.src_qp = read.src_qp;
  if (status == wc_status::kSuccess) {
    c.wc_flags = wc_flag::kTmDataValid;
    c.byte_len = read.len;
  }
  return c;
}

SendWr RendezvousReadWr(const RendezvousRead& read, std::function<void(const Completion&)> complete) {
  SendWr wr{};
  wr.opcode = WrOpcode::kRdmaRead;
  wr.num_sge = read.len > 0 ? 1 : 0;
  wr.sge[0] = {read.buffer.addr, read.len, read.buffer.lkey};
  wr.remote_addr = read.va;
  wr.rkey = read.rkey;
  wr.internal = std::make_shared<ReadWork>(read, std::move(complete));
  return wr;
}

void RegisterRendezvousIssuer(uint32_t qpn, RendezvousIssuer* issuer) {
  Issuers& s = TheIssuers();
  std::lock_guard lock(s.mu);
  if (s.pid != getpid()) {
    s.by_qpn.clear();
    s.pid = getpid();
  }
  s.by_qpn[qpn] = issuer;
}

void UnregisterRendezvousIssuer(uint32_t qpn, RendezvousIssuer* issuer) {
  Issuers& s = TheIssuers();
  std::lock_guard lock(s.mu);
  if (auto it = s.by_qpn.find(qpn); it != s.by_qpn.end() && it->second == issuer) s.by_qpn.erase(it);
}

bool RendezvousReady(uint32_t qpn) {
  Issuers& s = TheIssuers();
  std::lock_guard lock(s.mu);
  RendezvousIssuer* issuer = FindLocked(s, qpn);
  return issuer != nullptr && issuer->CanIssueRendezvous();
}

bool IssueRendezvous(const RendezvousRead& read) {
  Issuers& s = TheIssuers();
  std::lock_guard lock(s.mu);
  RendezvousIssuer* issuer = FindLocked(s, read.qp_num);
  return issuer != nullptr && issuer->IssueRendezvous(read);
}

}  // namespace softverbs::transport
