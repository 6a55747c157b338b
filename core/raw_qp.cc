#include "core/raw_qp.h"

#include "base/log.h"
#include "core/context.h"
#include "core/dc.h"
#include "core/device_limits.h"
#include "core/flow.h"
#include "core/qp.h"
#include "core/wq.h"
#include "fabric/raw/interface.h"
#include "transport/raw/toeplitz.h"
#include "transport/raw/tso.h"

namespace softverbs::core {

using transport::Completion;
namespace wc_status = transport::wc_status;

Result<std::unique_ptr<RawQp>> RawQp::Open(Context& context, const QpInitAttributes& init) {
  // The capability first, as the kernel checks it before it looks at anything else.
  if (!fabric::raw::HaveNetRaw())
    return Status(EPERM, "IBV_QPT_RAW_PACKET needs CAP_NET_RAW in the QP's network namespace (as the kernel "
                         "requires of raw QPs; packet(7))");
  const GidTable gids = context.gids();
  std::vector<std::array<uint8_t, 16>> addresses;
  for (uint32_t i = 1; i < DeviceLimits::kGidTableLen; ++i)  // 0 is the link-local GID
    if (gids.at(i).valid) addresses.push_back(gids.at(i).gid);
  auto itf = fabric::raw::InterfaceOwning(addresses);
  if (!itf.ok()) return itf.status();
  auto port = transport::raw::RawPort::Get(*itf);
  if (!port.ok()) return port.status();
  return std::unique_ptr<RawQp>(new RawQp(context, std::move(port.value()), init));
}

RawQp::RawQp(Context& context, std::shared_ptr<transport::raw::RawPort> port, const QpInitAttributes& init)
    : context_(context), port_(std::move(port)), sq_sig_all_(init.sq_sig_all) {
  send_.process_slot = receive_.process_slot = context.local().slot();
  send_.pd = receive_.pd = init.pd->host_id();
  send_.max_frame = port_->interface().mtu + 14 + 8;
  const uint32_t flags = init.has_create_flags ? init.create_flags : 0;
  receive_.scatter_fcs = (flags & create_flag::kScatterFcs) != 0;
  receive_.strip_cvlan = (flags & create_flag::kCvlanStripping) != 0;
  if (init.ind_table != nullptr) {
    ind_table_ = init.ind_table;
    ind_table_->users().Acquire();
    hash_key_ = init.rx_hash_key;
    hash_fields_ = init.rx_hash_fields_mask;
  }
  max_tso_header_ = init.has_max_tso_header ? init.max_tso_header : 0;
  const uint32_t dv = init.has_mlx5_create_flags ? init.mlx5_create_flags : 0;
  receive_.tunnel_offloads = (dv & mlx5_create_flag::kTunnelOffloads) != 0;
  allow_self_loopback_uc_ = (dv & mlx5_create_flag::kTirAllowSelfLoopbackUc) != 0;
  allow_self_loopback_mc_ = (dv & mlx5_create_flag::kTirAllowSelfLoopbackMc) != 0;
}

RawQp::~RawQp() {
  StopPaced(std::move(paced_));  // its thread sends through the port: stopped first
  Flush();
  if (ind_table_ != nullptr) ind_table_->users().Release();
}

void RawQp::Attach(Qp* qp, uint32_t qpn) {
  qp_ = qp;
  receive_.qp_num = qpn;
}

void RawQp::Complete(const transport::SendWr& wr, uint32_t status) {
  if (status == wc_status::kSuccess && !sq_sig_all_ && !(wr.flags & transport::send_flag::kSignaled)) return;
  Completion c;
  c.wr_id = wr.wr_id;
  c.status = status;
  c.opcode = transport::wc_opcode::kSend;
  c.qp_num = receive_.qp_num;
  qp_->Complete(c);
}

Status RawQp::PostSend(const transport::SendWr& wr, QpState state) {
  if (ind_table_ != nullptr) return Invalid("an RSS QP has no send queue (it receives through its WQs)");
  if (state == QpState::kErr) {
    Complete(wr, wc_status::kWrFlushErr);  // IBA 10.8.3.1
    return Status::Ok();
  }
  if (state < QpState::kRts || state == QpState::kSqe)
    return Invalid("the QP must be in RTS to post sends (IBA 10.8.2)");
  const bool tso = wr.opcode == transport::WrOpcode::kTso;
  if (wr.opcode != transport::WrOpcode::kSend && !tso)
    return Invalid("a RAW_PACKET QP sends frames: IBV_WR_SEND and IBV_WR_TSO only");
  if (tso && (wr.tso_mss == 0 || wr.tso_header_size == 0 || wr.tso_header_size > max_tso_header_))
    return Invalid("IBV_WR_TSO needs an mss and a header of 1..max_tso_header (" + std::to_string(max_tso_header_) +
                   ") bytes; this one has mss " + std::to_string(wr.tso_mss) + ", hdr_sz " +
                   std::to_string(wr.tso_header_size));
  const QpCaps& cap = qp_->init().cap;
  if (wr.num_sge > cap.max_send_sge)
    return Invalid("num_sge " + std::to_string(wr.num_sge) + " exceeds max_send_sge " + std::to_string(cap.max_send_sge));
  if ((wr.flags & transport::send_flag::kInline) && wr.inline_length > cap.max_inline_data)
    return Invalid("inline data of " + std::to_string(wr.inline_length) + " bytes exceeds max_inline_data " +
                   std::to_string(cap.max_inline_data));
  std::lock_guard lock(send_mu_);
  if (paced_ && (paced_->limited() || !paced_->empty())) return PostPaced(wr, tso);
  const uint32_t status = tso ? BuildSegments(wr) : transport::raw::BuildFrames(context_.local(), send_, wr, &pending_);
  if (status != wc_status::kSuccess) {
    SV_LOG(kError, "ibv_post_send(qp 0x%x): the frame completes with status %u (%s)", receive_.qp_num, status,
           status == wc_status::kLocLenErr    ? "not an Ethernet frame the port takes"
           : status == wc_status::kLocQpOpErr ? "the TSO header is not Ethernet + IPv4/IPv6 + TCP"
                                              : "an SGE is not memory of the QP's PD");
    Complete(wr, status);
    qp_->EnterError();
    return Status::Ok();
  }
  // The bytes were copied: the buffer is the application's again (ibv_post_send(3)).
  Complete(wr, wc_status::kSuccess);
  if (pending_.size() >= fabric::raw::PacketSocket::kBatch) SendPendingLocked();
  return Status::Ok();
}

Status RawQp::PostPaced(const transport::SendWr& wr, bool tso) {
  // The frames are built now (the bytes are copied at post time, as without a rate) into a
  // batch of their own, which waits for the bucket.
  SendPendingLocked();  // unpaced frames posted before the rate (already complete) go first
  std::vector<std::vector<uint8_t>> mine;
  const uint32_t status = tso ? BuildSegments(wr) : transport::raw::BuildFrames(context_.local(), send_, wr, &pending_);
  mine.swap(pending_);
  if (status != wc_status::kSuccess) {
    SV_LOG(kError, "ibv_post_send(qp 0x%x): the frame completes with status %u", receive_.qp_num, status);
    Complete(wr, status);
    qp_->EnterError();
    return Status::Ok();
  }
  transport::raw::PacedSendQueue::Wr held;
  held.frames = std::move(mine);
  held.wr_id = wr.wr_id;
  held.signaled = sq_sig_all_ || (wr.flags & transport::send_flag::kSignaled);
  paced_->Push(std::move(held));
  // What the bucket holds leaves now, from the posting thread, as a NIC's rate limiter passes
  // a frame at once while it has credit; only the rest waits for the queue's thread. (A frame
  // left to a thread's wake-up may still wait when the program destroys the QP, as perftest's
  // raw_ethernet_burst_lat server does right after its last reply: it would never leave.)
  paced_->Pump(transport::raw::PacedSendQueue::Clock::now());
  return Status::Ok();
}

void RawQp::SetRate(uint32_t rate_kbps, uint32_t burst_bytes) {
  std::lock_guard lock(send_mu_);
  if (!paced_ && rate_kbps == 0) return;
  if (!paced_) {
    paced_ = std::make_unique<transport::raw::PacedSendQueue>(
        [this](std::span<const std::vector<uint8_t>> frames) {
          Status s = port_->Send(frames, this);
          if (!s.ok()) SV_LOG(kError, "ibv_post_send(qp 0x%x): %s", receive_.qp_num, s.rule().c_str());
        },
        [this](const transport::raw::PacedSendQueue::Wr& wr, uint32_t status) { CompletePaced(wr, status); });
  }
  paced_->Configure(rate_kbps, burst_bytes ? burst_bytes : send_.max_frame);
}

void RawQp::StopPaced(std::unique_ptr<transport::raw::PacedSendQueue> paced) {
  if (!paced) return;
  // A NIC keeps sending what was posted while the command destroying the QP runs: the frames
  // that the rate lets go within kDestroyGrace still leave (perftest's raw_ethernet_burst_lat
  // server destroys its QP right after posting its last replies), the rest are dropped.
  // Destroyed, the QP completes nothing more.
  destroying_.store(true, std::memory_order_release);
  paced->Drain(transport::raw::PacedSendQueue::Clock::now() + kDestroyGrace);
  paced.reset();  // joins its thread
}

void RawQp::CompletePaced(const transport::raw::PacedSendQueue::Wr& wr, uint32_t status) {
  if (destroying_.load(std::memory_order_acquire)) return;
  if (status == wc_status::kSuccess && !wr.signaled) return;
  Completion c;
  c.wr_id = wr.wr_id;
  c.status = status;
  c.opcode = transport::wc_opcode::kSend;
  c.qp_num = receive_.qp_num;
  qp_->Complete(c);
}

void RawQp::FlushPaced() {
  if (paced_) paced_->Flush(wc_status::kWrFlushErr);  // IBA 10.8.3.1
}

void RawQp::DropPaced() {
  if (paced_) paced_->Drop();
}

uint32_t RawQp::BuildSegments(const transport::SendWr& wr) {
  std::vector<uint8_t> payload;
  if (uint32_t s = transport::raw::GatherBytes(context_.local(), send_, wr, &payload); s != wc_status::kSuccess) return s;
  // Each segment must fit the port, and the payload the device's tso_caps.max_tso.
  if (payload.size() > DeviceLimits::kMaxTso || wr.tso_header_size + wr.tso_mss > send_.max_frame)
    return wc_status::kLocLenErr;
  if (!transport::raw::SegmentTso({wr.tso_header, wr.tso_header_size}, payload, wr.tso_mss, &pending_))
    return wc_status::kLocQpOpErr;  // not an Ethernet/IP/TCP header: a malformed WQE
  return wc_status::kSuccess;
}

void RawQp::Flush() {
  std::lock_guard lock(send_mu_);
  SendPendingLocked();
}

void RawQp::SendPendingLocked() {
  if (pending_.empty()) return;
  if (port_) {
    Status s = port_->Send(pending_, this);
    if (!s.ok()) SV_LOG(kError, "ibv_post_send(qp 0x%x): %s", receive_.qp_num, s.rule().c_str());
  }
  pending_.clear();
}

void RawQp::AddFlow(Flow* flow) {
  std::lock_guard lock(flows_mu_);
  flows_.push_back(flow);
}

bool RawQp::RemoveFlow(Flow* flow) {
  std::lock_guard lock(flows_mu_);
  return std::erase(flows_, flow) != 0;
}

size_t RawQp::flow_count() const {
  std::lock_guard lock(flows_mu_);
  return flows_.size();
}

void RawQp::DetachFlows() {
  std::vector<Flow*> flows;
  {
    std::lock_guard lock(flows_mu_);
    flows.swap(flows_);
  }
  for (Flow* flow : flows) flow->Detach();
}

void RawQp::Close() {
  std::unique_ptr<transport::raw::PacedSendQueue> paced;
  {
    std::lock_guard lock(send_mu_);
    paced = std::move(paced_);
  }
  StopPaced(std::move(paced));
  std::lock_guard lock(send_mu_);
  pending_.clear();
  port_.reset();  // the last QP of the process on the interface stops the port's thread
}

bool RawQp::Deliver(std::span<const uint8_t> frame, const fabric::raw::FrameView& view,
                    const transport::raw::FlowMark& mark) {
  transport::TakenWqe wqe = qp_->recv_queue().Take();
  if (!wqe.found) return false;
  Completion c = transport::raw::ReceiveFrame(context_.local(), receive_, wqe, frame, view, mark);
  qp_->PushReceive(c);
  if (c.status != wc_status::kSuccess) {
    SV_LOG(kError, "raw receive (qp 0x%x): a frame of %zu bytes completes with status %u (%s)", receive_.qp_num,
           frame.size(), c.status, c.status == wc_status::kLocLenErr ? "larger than the WQE" : "SGE not writable");
    qp_->EnterError();
  }
  return true;
}

void RawQp::OnFrame(std::span<const uint8_t> frame, const fabric::raw::FrameView& view,
                    const transport::raw::FlowMark& mark) {
  if (ind_table_ != nullptr) {
    // RSS: the Toeplitz hash of the selected fields picks the table entry, as a NIC's TIR does
    // (its low bits index the 2^n entries). The WQ's state decides, not the QP's.
    uint8_t input[36];
    const size_t n = transport::raw::RssFrameInput(frame, view, hash_fields_, input);
    const uint32_t hash = transport::raw::ToeplitzHash(hash_key_, {input, n});
    ind_table_->at(hash)->OnFrame(frame, view, mark, receive_.tunnel_offloads);
    return;
  }
  // Receives land from RTR on (IBA 10.3.1); before, and in ERR, the frame is dropped.
  const QpState state = qp_->state_now();
  if (state < QpState::kRtr || state == QpState::kErr) {
    SV_LOG(kTrace, "raw receive (qp 0x%x): frame dropped, the QP is in %s", receive_.qp_num, QpStateName(state));
    return;
  }
  std::lock_guard lock(rx_mu_);
  if (backlog_.empty() && Deliver(frame, view, mark)) return;
  if (backlog_.size() >= kMaxBacklog) {
    SV_LOG(kTrace, "raw receive (qp 0x%x): frame dropped, no receive WQE and the buffer is full", receive_.qp_num);
    return;
  }
  backlog_.push_back({std::vector<uint8_t>(frame.begin(), frame.end()), mark});
}

void RawQp::DrainBacklog() {
  std::lock_guard lock(rx_mu_);
  const QpState state = qp_->state_now();
  if (state < QpState::kRtr || state == QpState::kErr) {
    backlog_.clear();
    return;
  }
  while (!backlog_.empty()) {
    fabric::raw::FrameView view;
    fabric::raw::ParseFrame(backlog_.front().frame, &view);
    if (!Deliver(backlog_.front().frame, view, backlog_.front().mark)) return;
    backlog_.pop_front();
  }
}

}  // namespace softverbs::core
