#include "core/wq.h"

#include "base/log.h"
#include "core/context.h"
#include "core/device_limits.h"
#include "transport/raw/raw_receive.h"

namespace softverbs::core {
namespace {

std::atomic<uint32_t> g_next_wq{0x200};     // WQ numbers, like mlx5's RQ numbers: unique per process
std::atomic<uint32_t> g_next_table{0x300};  // indirection table numbers

const char* WqStateName(WqState s) {
  switch (s) {
    case WqState::kReset: return "RESET";
    case WqState::kReady: return "RDY";
    case WqState::kErr: return "ERR";
    default: return "UNKNOWN";
  }
}

}  // namespace

Result<std::unique_ptr<Wq>> Wq::Create(Context& context, Pd* pd, Cq* cq, uint32_t wq_type, uint32_t max_wr,
                                       uint32_t max_sge, uint32_t create_flags) {
  if (wq_type != 0) return Invalid("wq_type " + std::to_string(wq_type) + " is not IBV_WQT_RQ");
  if (pd == nullptr || cq == nullptr) return Invalid("pd and cq are required");
  if (max_wr == 0 || max_wr > DeviceLimits::kMaxQpWr)
    return Invalid("max_wr " + std::to_string(max_wr) + " is outside 1..max_qp_wr " + std::to_string(DeviceLimits::kMaxQpWr));
  if (max_sge == 0 || max_sge > DeviceLimits::kMaxSge)
    return Invalid("max_sge " + std::to_string(max_sge) + " is outside 1..max_sge " + std::to_string(DeviceLimits::kMaxSge));
  // ibv_create_wq(3) create flags (CVLAN stripping, FCS, padding, delay drop): not offered on WQs.
  if (create_flags != 0) return NotSupported("WQ create_flags are not offered");
  auto rq = transport::RecvQueue::Create(context.local(), max_wr, max_sge);
  if (!rq.ok()) return rq.status();
  pd->users().Acquire();
  cq->users().Acquire();
  return std::unique_ptr<Wq>(new Wq(context, pd, cq, std::move(rq.value()), max_wr, max_sge));
}

Wq::Wq(Context& context, Pd* pd, Cq* cq, std::unique_ptr<transport::RecvQueue> rq, uint32_t max_wr, uint32_t max_sge)
    : context_(context), pd_(pd), cq_(cq), rq_(std::move(rq)), max_wr_(max_wr), max_sge_(max_sge),
      wq_num_(g_next_wq.fetch_add(1) & 0xffffff) {}

Wq::~Wq() {
  cq_->users().Release();
  pd_->users().Release();
}

void Wq::Flush() {
  for (transport::TakenWqe w = rq_->Take(); w.found; w = rq_->Take()) {
    transport::Completion c;
    c.wr_id = w.wr_id;
    c.status = transport::wc_status::kWrFlushErr;
    c.opcode = transport::wc_opcode::kRecv;
    c.qp_num = wq_num_;
    if (!cq_->Push(c)) cq_->ReportOverrun();
  }
}

Status Wq::Modify(uint32_t mask, WqState next, WqState cur, uint32_t flags, uint32_t flags_mask) {
  if (mask & ~(wq_attr::kState | wq_attr::kCurState | wq_attr::kFlags)) return Invalid("attr_mask has unknown bits");
  const WqState now = state();
  if ((mask & wq_attr::kCurState) && cur != now)
    return Invalid(std::string("curr_wq_state ") + WqStateName(cur) + " is not the WQ's state, " + WqStateName(now));
  if ((mask & wq_attr::kFlags) && (flags & flags_mask) != 0) return NotSupported("WQ flags are not offered");
  if (!(mask & wq_attr::kState)) return Status::Ok();
  // ibv_modify_wq(3): RESET -> RDY -> RESET, and any state -> ERR; ERR leaves only to RESET.
  const bool ok = next == WqState::kErr || next == WqState::kReset ||
                  (next == WqState::kReady && (now == WqState::kReset || now == WqState::kReady));
  if (!ok || next == WqState::kUnknown)
    return Invalid(std::string("a WQ cannot go from ") + WqStateName(now) + " to " + WqStateName(next));
  if (next == WqState::kReset) rq_->Clear();
  state_.store(static_cast<uint32_t>(next), std::memory_order_release);
  if (next == WqState::kErr) Flush();
  return Status::Ok();
}

Status Wq::PostRecv(uint64_t wr_id, const transport::RecvSge* sge, uint32_t num_sge) {
  if (state() == WqState::kErr) {
    transport::Completion c;
    c.wr_id = wr_id;
    c.status = transport::wc_status::kWrFlushErr;
    c.opcode = transport::wc_opcode::kRecv;
    c.qp_num = wq_num_;
    if (!cq_->Push(c)) cq_->ReportOverrun();
    return Status::Ok();
  }
  return rq_->Post(wr_id, sge, num_sge);
}

void Wq::OnFrame(std::span<const uint8_t> frame, const fabric::raw::FrameView& view,
                 const transport::raw::FlowMark& mark, bool tunnel_offloads) {
  if (state() != WqState::kReady) return;  // a WQ receives in RDY only
  transport::TakenWqe wqe = rq_->Take();
  if (!wqe.found) {
    SV_LOG(kTrace, "raw receive (wq 0x%x): frame dropped, no receive WQE posted", wq_num_);
    return;
  }
  transport::raw::RawReceiveConfig config;
  config.qp_num = wq_num_;
  config.process_slot = context_.local().slot();
  config.pd = pd_->host_id();
  config.tunnel_offloads = tunnel_offloads;
  transport::Completion c = transport::raw::ReceiveFrame(context_.local(), config, wqe, frame, view, mark);
  if (!cq_->Push(c)) cq_->ReportOverrun();
  if (c.status != transport::wc_status::kSuccess) {
    SV_LOG(kError, "raw receive (wq 0x%x): a frame of %zu bytes completes with status %u", wq_num_, frame.size(), c.status);
    state_.store(static_cast<uint32_t>(WqState::kErr), std::memory_order_release);
    Flush();
  }
}

Result<std::unique_ptr<RwqIndTable>> RwqIndTable::Create(uint32_t log_size, std::vector<Wq*> wqs) {
  if (log_size > kMaxLogIndTableSize)
    return Invalid("log_ind_tbl_size " + std::to_string(log_size) + " exceeds rss_caps' table size 2^" +
                   std::to_string(kMaxLogIndTableSize));
  if (wqs.size() != (1u << log_size)) return Invalid("the table needs 2^log_ind_tbl_size WQs");
  for (Wq* w : wqs)
    if (w == nullptr) return Invalid("ind_tbl has a NULL WQ");
  for (Wq* w : wqs) w->users().Acquire();
  return std::unique_ptr<RwqIndTable>(new RwqIndTable(std::move(wqs), g_next_table.fetch_add(1)));
}

RwqIndTable::~RwqIndTable() {
  for (Wq* w : wqs_) w->users().Release();
}

}  // namespace softverbs::core
