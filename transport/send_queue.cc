#include "transport/send_queue.h"

#include <arpa/inet.h>

#include <cstring>

#include "base/log.h"
#include "transport/dc_access.h"
#include "transport/indirect_key.h"
#include "transport/key_table.h"
#include "transport/mcast_table.h"
#include "transport/progress_thread.h"
#include "transport/target.h"
#include "transport/window_key.h"

namespace softverbs::transport {
namespace {

using Clock = std::chrono::steady_clock;

// enum ibv_qp_type / ibv_qp_state values.
constexpr uint32_t kRc = 2, kUc = 3, kUd = 4;
constexpr uint32_t kRts = 3, kSqd = 4, kSqe = 5, kErr = 6;
constexpr uint32_t kLocalWrite = 1u << 0;

// IBA 9.7.5.2.8 table 45: the RNR timer codes, in microseconds (code 0 is the longest).
constexpr uint32_t kRnrDelayUs[32] = {655360, 10,    20,    30,    40,    60,    80,    120,
                                      160,    240,   320,   480,   640,   960,   1280,  1920,
                                      2560,   3840,  5120,  7680,  10240, 15360, 20480, 30720,
                                      40960,  61440, 81920, 122880, 163840, 245760, 327680, 491520};

// IBA 9.7.6.1.3: the local ACK timeout is 4.096 us * 2^timeout; 0 means "wait forever", which
// is retried once a second here.
Clock::duration AckTimeout(uint8_t timeout) {
  if (timeout == 0) return std::chrono::seconds(1);
  return std::chrono::nanoseconds(static_cast<int64_t>(4096.0 * static_cast<double>(1ull << std::min<uint8_t>(timeout, 31))));
}

bool IsIpv4Mapped(const uint8_t* gid) {
  static const uint8_t kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return memcmp(gid, kPrefix, 12) == 0;
}

// The 40-byte GRH area of a UD receive (ibv_post_recv(3)): for RoCE v2 over IPv4 the IPv4 header
// sits in its last 20 bytes, otherwise it holds the IPv6 header (IBA annex A17.4.5.2).
void BuildGrh(uint8_t out[40], const UdDestination& d, uint32_t payload) {
  memset(out, 0, 40);
  if (IsIpv4Mapped(d.sgid) && IsIpv4Mapped(d.dgid)) {
    uint8_t* ip = out + 20;
    ip[0] = 0x45;
    ip[1] = d.traffic_class;
    const uint16_t total = htons(static_cast<uint16_t>(20 + 8 + 12 + payload + 4));  // IP+UDP+BTH+DETH+ICRC
    memcpy(ip + 2, &total, 2);
    ip[8] = d.hop_limit ? d.hop_limit : 64;
    ip[9] = 17;  // UDP
    memcpy(ip + 12, d.sgid + 12, 4);
    memcpy(ip + 16, d.dgid + 12, 4);
    return;
  }
  const uint32_t vtf = htonl(6u << 28 | static_cast<uint32_t>(d.traffic_class) << 20 | (d.flow_label & 0xfffff));
  memcpy(out, &vtf, 4);
  const uint16_t len = htons(static_cast<uint16_t>(8 + 12 + payload + 4));
  memcpy(out + 4, &len, 2);
  out[6] = 17;  // next header: UDP
  out[7] = d.hop_limit;
  memcpy(out + 8, d.sgid, 16);
  memcpy(out + 24, d.dgid, 16);
}

uint32_t WcOpcode(WrOpcode op) {
  switch (op) {
    case WrOpcode::kRdmaWrite:
    case WrOpcode::kRdmaWriteWithImm: return wc_opcode::kRdmaWrite;
    case WrOpcode::kRdmaRead: return wc_opcode::kRdmaRead;
    case WrOpcode::kAtomicCmpSwp: return wc_opcode::kCompSwap;
    case WrOpcode::kAtomicFetchAdd: return wc_opcode::kFetchAdd;
    case WrOpcode::kBindMw: return wc_opcode::kBindMw;
    case WrOpcode::kLocalInv: return wc_opcode::kLocalInv;
    case WrOpcode::kDriver1: return wc_opcode::kDriver1;  // MLX5DV_WC_UMR (mlx5dv_wr_post(3))
    default: return wc_opcode::kSend;
  }
}

}  // namespace

SendQueue::SendQueue(fabric::LocalProcess& local, RequesterHost& host)
    : local_(local), host_(host), responder_(local) {}

SendQueue::~SendQueue() { ProgressThread::Get().Forget(this); }

void SendQueue::Configure(const RequesterConfig& config) {
  std::lock_guard lock(mu_);
  config_ = config;
}

Status SendQueue::Check(const SendWr& wr, uint32_t qp_state) const {
  // ibv_post_send(3) / IBA 10.8.2: sends are accepted from RTS on (and flushed in ERR).
  if (qp_state < kRts)
    return Invalid("the QP must be in RTS to post sends (IBA 10.8.2)");
  if (wr.num_sge > config_.max_send_sge)
    return Invalid("num_sge " + std::to_string(wr.num_sge) + " exceeds max_send_sge " + std::to_string(config_.max_send_sge));
  // (A UMR's layout travels as its inline bytes: not the application's inline data.)
  if ((wr.flags & send_flag::kInline) && wr.opcode != WrOpcode::kDriver1 && wr.inline_length > config_.max_inline)
    return Invalid("inline data of " + std::to_string(wr.inline_length) + " bytes exceeds max_inline_data " +
                   std::to_string(config_.max_inline));
  switch (wr.opcode) {
    case WrOpcode::kSend:
    case WrOpcode::kSendWithImm:
      return Status::Ok();
    case WrOpcode::kRdmaWrite:
    case WrOpcode::kRdmaWriteWithImm:
      if (config_.type == kUd) return Invalid("UD QPs have no RDMA WRITE (IBA 9.4)");
      return Status::Ok();
    case WrOpcode::kRdmaRead:
    case WrOpcode::kAtomicCmpSwp:
    case WrOpcode::kAtomicFetchAdd:
      if (config_.type != kRc) return Invalid("only RC QPs have RDMA READ and atomics (IBA 9.4)");
      // IBA 11.2.4.2: max_rd_atomic is how many may be outstanding; 0 allows none.
      if (config_.max_rd_atomic == 0)
        return Invalid("max_rd_atomic is 0: this QP may not initiate RDMA READ or atomics");
      return Status::Ok();
    case WrOpcode::kLocalInv:
    case WrOpcode::kBindMw:
      // ibv_bind_mw(3): "The QP Transport Service Type must be either UC, RC or XRC_SEND for
      // bind operations"; local invalidation works on the same QPs.
      if ((config_.type != kRc && config_.type != kUc) || config_.dc_initiator)
        return Invalid("BIND_MW and LOCAL_INV are posted on RC and UC QPs only (ibv_bind_mw(3))");
      return Status::Ok();
    case WrOpcode::kSendWithInv:
      // IBA 9.4: SEND with Invalidate is an RC (and XRC) operation.
      if (config_.type != kRc || config_.dc_initiator) return Invalid("SEND_WITH_INV is an RC operation (IBA 9.4)");
      return Status::Ok();
    case WrOpcode::kAtomicWrite:
      return NotSupported("ATOMIC WRITE is not offered");
    case WrOpcode::kDriver1:
      // mlx5dv_wr_post(3) lists mlx5dv_wr_mr_interleaved / mlx5dv_wr_mr_list under "RC QPs".
      if (!wr.umr)
        return Invalid("opcode IBV_WR_DRIVER1 is posted by mlx5dv_wr_mr_list / mlx5dv_wr_mr_interleaved only");
      if (config_.type != kRc) return Invalid("UMR work requests (indirect mkeys) are for RC QPs (mlx5dv_wr_post(3))");
      if (wr.inline_length < sizeof(UmrRequest)) return Invalid("a UMR work request without its layout");
      return Status::Ok();
    default:
      return Invalid("opcode " + std::to_string(static_cast<uint32_t>(wr.opcode)) + " is not a send opcode of this QP");
  }
}

Status SendQueue::Post(const SendWr& wr, uint32_t qp_state) {
  std::unique_lock lock(mu_);
  SV_RETURN_IF_ERROR(Check(wr, qp_state));
  if (error_ || qp_state == kErr) {
    // IBA 10.8.3.1: a WR posted to a QP in ERR completes with a flush error.
    Finish(wr, wc_status::kWrFlushErr, 0);
    return Status::Ok();
  }
  if (queue_.size() >= config_.max_send_wr)
    return Status(ENOMEM, "the send queue is full (" + std::to_string(config_.max_send_wr) + " WRs waiting)");
  Pending p;
  p.wr = wr;
  p.rnr_left = config_.rnr_retry;
  p.retries_left = config_.retry_cnt;
  // Nothing waits before it: executed here and now, without entering the queue.
  if (qp_state == kRts && queue_.empty()) {
    if (Execute(p) == Step::kDone) return Status::Ok();
    // RNR or no answer: it waits in the queue like the rest (error_ is still false: kWait).
    Enqueue(std::move(p));
    ProgressThread::Get().Schedule(this, queue_.front().due);
    return Status::Ok();
  }
  // SQD: accepted, executed once the QP is back in RTS; SQE: the send queue is stopped.
  Enqueue(std::move(p));
  if (qp_state == kRts) RunQueue(lock);
  return Status::Ok();
}

void SendQueue::Enqueue(Pending&& p) {
  // The caller's inline bytes are only valid during ibv_post_send: a queued WR keeps a copy.
  if (p.wr.flags & send_flag::kInline) {
    p.inline_copy.assign(p.wr.inline_data, p.wr.inline_data + p.wr.inline_length);
    p.wr.inline_data = p.inline_copy.data();
  }
  queue_.push_back(std::move(p));
}

void SendQueue::RunQueue(std::unique_lock<std::mutex>&) {
  while (!queue_.empty() && !error_) {
    Pending& head = queue_.front();
    if (head.due > Clock::now()) return;
    if (Execute(head) == Step::kWait) {
      ProgressThread::Get().Schedule(this, head.due);
      return;
    }
    queue_.pop_front();
  }
  // The head failed: what waited behind it is flushed now, not at the owner's next verb
  // (IBA 10.8.3.1), so a consumer that only polls sees every completion.
  while (error_ && !queue_.empty()) {
    Finish(queue_.front().wr, wc_status::kWrFlushErr, 0);
    queue_.pop_front();
  }
}

Clock::time_point SendQueue::Progress() {
  std::unique_lock lock(mu_);
  RunQueue(lock);
  if (queue_.empty() || error_) return Clock::time_point::max();
  return queue_.front().due;
}

void SendQueue::Flush() {
  std::lock_guard lock(mu_);
  error_ = true;
  while (!queue_.empty()) {
    Finish(queue_.front().wr, wc_status::kWrFlushErr, 0);
    queue_.pop_front();
  }
}

void SendQueue::Reset() {
  std::lock_guard lock(mu_);
  queue_.clear();
  error_ = false;
}

void SendQueue::Resume() {
  std::lock_guard lock(mu_);
  error_ = false;  // what waited was flushed when the error happened
}

void SendQueue::Finish(const SendWr& wr, uint32_t status, uint64_t byte_len) {
  // Unsignaled successes produce no completion (ibv_post_send(3), sq_sig_all); errors always do.
  if (status == wc_status::kSuccess && !(wr.flags & send_flag::kSignaled) && !config_.sq_sig_all) return;
  Completion c;
  c.wr_id = wr.wr_id;
  c.status = status;
  c.opcode = WcOpcode(wr.opcode);
  c.byte_len = static_cast<uint32_t>(byte_len);
  c.qp_num = config_.qp_num;
  host_.Complete(c);
}

void SendQueue::Fail(const SendWr& wr, uint32_t status) {
  // IBA 10.8.3: a completion in error stops the send queue and what follows is flushed; the QP
  // enters ERR (RC) or SQE (UC, UD: IBA 10.3.1, their receive queue goes on). The state change
  // is announced before the completion is written, so whoever polls it sees the QP's new state.
  error_ = true;
  if (config_.type == kRc)
    host_.EnterError();
  else
    host_.EnterSendQueueError();
  Finish(wr, status, 0);
}

Reply SendQueue::DeliverDatagram(const Target& target, const SendWr& wr, const iovec* local, size_t nl,
                                 uint64_t total, MessageInfo& info) {
  // IBA 10.2.5: a Q_Key with the high bit set means "use the QP's own Q_Key"; a mismatch drops
  // the datagram.
  const uint32_t qkey = (wr.ud.remote_qkey & 0x80000000u) ? config_.qkey : wr.ud.remote_qkey;
  if (qkey != target.endpoint().qkey) return Reply::kDropped;
  uint8_t grh[40];
  BuildGrh(grh, wr.ud, static_cast<uint32_t>(total));
  info.grh = grh;
  return responder_.Deliver(target, kUd, local, nl, total, info);
}

void SendQueue::SendMulticast(const SendWr& wr, const iovec* local, size_t nl, uint64_t total) {
  // IBA 10.5 / 9.6.1.1: a multicast datagram carries the multicast QPN and reaches every QP
  // attached to the group (each with its own Q_Key check and receive WQE); any other
  // destination QPN on a multicast GID is dropped.
  if (wr.ud.remote_qpn != kMulticastQpn) return;
  MessageInfo info;
  info.src_qp = config_.source_qpn ? config_.source_qpn : config_.qp_num;
  info.imm_data = wr.imm_data;
  info.with_imm = wr.opcode == WrOpcode::kSendWithImm;
  info.solicited = (wr.flags & send_flag::kSolicited) != 0;
  ForEachMcastMember(local_.registry(), wr.ud.dgid, [&](uint32_t qpn) {
    // IBV_QP_CREATE_BLOCK_SELF_MCAST_LB: the sender's own attachment does not loop back.
    if (qpn == config_.qp_num && config_.block_self_mcast_lb) return;
    auto target = Target::Find(local_, qpn);
    if (!target.ok() || target->endpoint().type != kUd) return;
    MessageInfo copy = info;
    DeliverDatagram(*target, wr, local, nl, total, copy);
  });
}

SendQueue::Step SendQueue::ExecuteUmr(const SendWr& wr) {
  UmrRequest req;
  memcpy(&req, wr.inline_data, sizeof req);
  if (wr.inline_length != sizeof req + static_cast<uint64_t>(req.entries) * sizeof(LayoutEntry)) {
    Fail(wr, wc_status::kLocQpOpErr);  // not what the builders write: a malformed WQE
    return Step::kDone;
  }
  std::vector<LayoutEntry> entries(req.entries);
  if (req.entries) memcpy(entries.data(), wr.inline_data + sizeof req, req.entries * sizeof(LayoutEntry));
  // The builder checked the mkey when it was posted; it may have been destroyed since, which
  // makes the UMR a local protection error (the mkey is not valid for this QP).
  std::shared_ptr<IndirectKey> mkey = IndirectKey::Find(req.mkey);
  if (mkey == nullptr || mkey->pd() != config_.pd || req.entries > mkey->max_entries()) {
    Fail(wr, wc_status::kLocProtErr);
    return Step::kDone;
  }
  mkey->Configure(req.access, req.repeat_count, entries.data(), req.entries);
  Finish(wr, wc_status::kSuccess, 0);
  return Step::kDone;
}

SendQueue::Step SendQueue::ExecuteLocalOp(const SendWr& wr) {
  // Memory window binds and local invalidations change keys of this process, in order with the
  // rest of the queue; a refusal completes in error and the QP enters ERR (IBA 10.8.3).
  const WindowQp qp{config_.qp_num, config_.pd};
  std::string rule;
  uint32_t status;
  if (wr.opcode == WrOpcode::kBindMw) {
    std::shared_ptr<WindowKey> window = WindowKey::Find(wr.bind.window);
    rule = window == nullptr ? "the window was deallocated" : window->Bind(wr.bind, qp);
    status = wc_status::kMwBindErr;
  } else {
    rule = LocalInvalidate(local_, wr.invalidate_rkey, qp);
    status = wc_status::kLocQpOpErr;
  }
  if (!rule.empty()) {
    SV_LOG(kError, "ibv_post_send(qp 0x%x): %s completes with %s: %s", config_.qp_num,
           wr.opcode == WrOpcode::kBindMw ? "BIND_MW" : "LOCAL_INV",
           wr.opcode == WrOpcode::kBindMw ? "IBV_WC_MW_BIND_ERR" : "IBV_WC_LOC_QP_OP_ERR", rule.c_str());
    Fail(wr, status);
    return Step::kDone;
  }
  Finish(wr, wc_status::kSuccess, 0);
  return Step::kDone;
}

SendQueue::Step SendQueue::Execute(Pending& p) {
  const SendWr& wr = p.wr;
  if (wr.opcode == WrOpcode::kDriver1) return ExecuteUmr(wr);
  if (wr.opcode == WrOpcode::kBindMw || wr.opcode == WrOpcode::kLocalInv) return ExecuteLocalOp(wr);
  // The local side: inline bytes, or SGEs checked against this process's keys (IBA 10.6.3.1),
  // each resolved into pieces of memory (one per SGE, or several through an indirect key).
  PinnedPieces pieces;
  uint64_t total = 0;
  const bool writes_local =
      wr.opcode == WrOpcode::kRdmaRead || wr.opcode == WrOpcode::kAtomicCmpSwp || wr.opcode == WrOpcode::kAtomicFetchAdd;
  if ((wr.flags & send_flag::kInline) && !writes_local) {
    if (wr.inline_length) pieces.Add({wr.inline_data, wr.inline_length});
    total = wr.inline_length;
  } else {
    const KeyRule rule{config_.process_slot, config_.pd, writes_local ? kLocalWrite : 0, writes_local};
    for (uint32_t i = 0; i < wr.num_sge; ++i) {
      const Sge& s = wr.sge[i];
      if (s.length == 0) continue;
      if (!ResolveKey(local_.registry(), s.lkey, s.addr, s.length, s.length, rule,
                      [this](fabric::SharedRef ref) { return local_.At(ref); }, &pieces)) {
        Fail(wr, wc_status::kLocProtErr);
        return Step::kDone;
      }
      total += s.length;
    }
  }
  const iovec* local = pieces.data();
  const size_t nl = pieces.size();
  if (total > (1ull << 31)) {  // IBA: 2^31 bytes per message
    Fail(wr, wc_status::kLocLenErr);
    return Step::kDone;
  }

  const bool is_send = wr.opcode == WrOpcode::kSend || wr.opcode == WrOpcode::kSendWithImm;
  if (config_.type == kUd && is_send && IsMulticastGid(wr.ud.dgid)) {
    if (total > config_.path_mtu) {  // IBA 9.6.3: one packet
      Fail(wr, wc_status::kLocLenErr);
      return Step::kDone;
    }
    SendMulticast(wr, local, nl, total);
    Finish(wr, wc_status::kSuccess, total);  // UD: sent is all the requester knows
    return Step::kDone;
  }

  const uint32_t dest = config_.type == kUd ? wr.ud.remote_qpn
                      : config_.dc_initiator ? wr.dc.remote_dctn  // DC: the WR names its DCT
                                             : config_.dest_qp_num;
  auto target = Target::Find(local_, dest, &peer_hint_);
  Reply reply = Reply::kNotReady;
  uint64_t byte_len = total;
  // A DCT discards what does not present its access key (transport/dc_access.h): no answer.
  if (target.ok() && DcAdmits(target->endpoint(), config_.dc_initiator, wr.dc)) {
    MessageInfo info;
    info.src_qp = config_.source_qpn ? config_.source_qpn : config_.qp_num;
    info.imm_data = wr.imm_data;
    info.solicited = (wr.flags & send_flag::kSolicited) != 0;
    switch (wr.opcode) {
      case WrOpcode::kSend:
      case WrOpcode::kSendWithImm:
        info.with_imm = wr.opcode == WrOpcode::kSendWithImm;
        if (config_.type == kUd) {
          // A UD message fits one packet: at most the path MTU (IBA 9.6.3).
          if (total > config_.path_mtu) {
            Fail(wr, wc_status::kLocLenErr);
            return Step::kDone;
          }
          reply = DeliverDatagram(*target, wr, local, nl, total, info);
          break;
        }
        reply = responder_.Deliver(*target, config_.type, local, nl, total, info);
        break;
      case WrOpcode::kSendWithInv:
        info.invalidate = true;
        info.invalidate_rkey = wr.invalidate_rkey;
        reply = responder_.Deliver(*target, config_.type, local, nl, total, info);
        break;
      case WrOpcode::kRdmaWrite:
        reply = responder_.Write(*target, wr.rkey, wr.remote_addr, local, nl, total);
        break;
      case WrOpcode::kRdmaWriteWithImm:
        reply = responder_.Write(*target, wr.rkey, wr.remote_addr, local, nl, total);
        if (reply == Reply::kAck) {
          info.with_imm = true;
          info.rdma_write = true;
          reply = responder_.Deliver(*target, config_.type, nullptr, 0, total, info);
        }
        break;
      case WrOpcode::kRdmaRead:
        reply = responder_.Read(*target, wr.rkey, wr.remote_addr, local, nl, total);
        break;
      case WrOpcode::kAtomicCmpSwp:
      case WrOpcode::kAtomicFetchAdd: {
        if (total != 8) {  // the local buffer of an atomic is the 8-byte original value
          Fail(wr, wc_status::kLocLenErr);
          return Step::kDone;
        }
        uint64_t original = 0;
        reply = responder_.Atomic(*target, wr.opcode, wr.rkey, wr.remote_addr, wr.compare_add, wr.swap, &original);
        if (reply == Reply::kAck) {
          // The 8 bytes may span pieces of an indirect local key.
          const auto* from = reinterpret_cast<const uint8_t*>(&original);
          for (size_t i = 0; i < nl; from += local[i].iov_len, ++i) memcpy(local[i].iov_base, from, local[i].iov_len);
        }
        byte_len = 8;
        break;
      }
      default:
        reply = Reply::kInvalidRequest;
        break;
    }
  } else if (config_.type != kRc) {
    reply = Reply::kDropped;  // UC/UD: nobody there, the message is lost silently
  }

  // UC and UD have no acknowledgements (IBA 9.8.3, 9.6.3): whatever the responder found, the
  // requester only knows it sent the message.
  if (config_.type != kRc && reply != Reply::kAck) reply = Reply::kDropped;
  switch (reply) {
    case Reply::kAck:
    case Reply::kDropped:
      Finish(wr, wc_status::kSuccess, byte_len);
      return Step::kDone;
    case Reply::kRnr:
      // IBA 9.7.5.2.8: wait the responder's RNR delay, at most rnr_retry times (7: forever).
      if (config_.rnr_retry != 7 && p.rnr_left == 0) {
        Fail(wr, wc_status::kRnrRetryExcErr);
        return Step::kDone;
      }
      if (config_.rnr_retry != 7) --p.rnr_left;
      p.due = Clock::now() + std::chrono::microseconds(kRnrDelayUs[target->endpoint().min_rnr_timer & 31]);
      return Step::kWait;
    case Reply::kNotReady:
      // IBA 9.7.6.1.3: no answer within the local ACK timeout; retried retry_cnt times.
      if (config_.timeout != 0 && p.retries_left == 0) {
        Fail(wr, wc_status::kRetryExcErr);
        return Step::kDone;
      }
      if (config_.timeout != 0) --p.retries_left;
      p.due = Clock::now() + AckTimeout(config_.timeout);
      return Step::kWait;
    case Reply::kRemoteAccess:
      Fail(wr, wc_status::kRemAccessErr);
      return Step::kDone;
    case Reply::kInvalidRequest:
      Fail(wr, wc_status::kRemInvReqErr);
      return Step::kDone;
    case Reply::kRemoteOp:
      Fail(wr, wc_status::kRemOpErr);
      return Step::kDone;
  }
  return Step::kDone;
}

}  // namespace softverbs::transport
