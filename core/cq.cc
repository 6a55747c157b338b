#include "core/cq.h"

#include "base/log.h"
#include "core/context.h"
#include "core/device_limits.h"

namespace softverbs::core {

Result<std::unique_ptr<CompChannel>> CompChannel::Create(Context&) {
  auto fd = EventFd::Create();
  if (!fd.ok()) return fd.status();
  return std::unique_ptr<CompChannel>(new CompChannel(std::move(fd.value())));
}

void CompChannel::Notify(Cq* cq) {
  {
    std::lock_guard lock(mu_);
    events_.push_back(cq);
  }
  fd_.Signal();
}

Result<Cq*> CompChannel::Wait() {
  if (int err = fd_.Consume(); err != 0)
    return Status(err, err == EAGAIN ? "no completion event is pending (the channel fd is non-blocking)"
                                     : "reading the channel fd failed");
  std::lock_guard lock(mu_);
  Cq* cq = events_.front();
  events_.pop_front();
  return cq;
}

Result<std::unique_ptr<Cq>> Cq::Create(Context& context, int cqe, CompChannel* channel, int comp_vector) {
  if (cqe < 1 || static_cast<uint32_t>(cqe) > DeviceLimits::kMaxCqe)
    return Invalid("cqe " + std::to_string(cqe) + " is outside 1.." + std::to_string(DeviceLimits::kMaxCqe));
  if (comp_vector != 0)
    return Invalid("comp_vector " + std::to_string(comp_vector) + " is not below num_comp_vectors 1");
  if (channel != nullptr) channel->users().Acquire();
  return std::unique_ptr<Cq>(new Cq(context, context.NewHandle(), static_cast<uint32_t>(cqe), channel));
}

Cq::~Cq() {
  if (channel_ != nullptr) channel_->users().Release();
}

uint32_t Cq::capacity() const {
  std::lock_guard lock(mu_);
  return capacity_;
}

Status Cq::Resize(int cqe) {
  if (cqe < 1 || static_cast<uint32_t>(cqe) > DeviceLimits::kMaxCqe)
    return Invalid("cqe " + std::to_string(cqe) + " is outside 1.." + std::to_string(DeviceLimits::kMaxCqe));
  std::lock_guard lock(mu_);
  if (static_cast<size_t>(cqe) < entries_.size())
    return Invalid("cqe " + std::to_string(cqe) + " is below the " + std::to_string(entries_.size()) +
                   " completions the CQ holds");
  capacity_ = static_cast<uint32_t>(cqe);
  return Status::Ok();
}

bool Cq::Push(const Completion& c) {
  bool notify = false;
  {
    std::lock_guard lock(mu_);
    if (entries_.size() >= capacity_) return false;
    entries_.push_back(c);
    // ibv_req_notify_cq(3): solicited_only arms for solicited completions and for every
    // completion with an error status.
    if (arm_ == Arm::kNext || (arm_ == Arm::kSolicited && (c.solicited || c.status != 0))) {
      arm_ = Arm::kNone;
      notify = channel_ != nullptr;
    }
  }
  if (notify) channel_->Notify(this);
  return true;
}

int Cq::Poll(Completion* out, int max) {
  std::lock_guard lock(mu_);
  int n = 0;
  while (n < max && !entries_.empty()) {
    out[n++] = entries_.front();
    entries_.pop_front();
  }
  return n;
}

void Cq::RemoveEntriesOf(uint32_t qp_num) {
  std::lock_guard lock(mu_);
  std::erase_if(entries_, [qp_num](const Completion& c) { return c.qp_num == qp_num; });
}

Status Cq::RequestNotify(bool solicited_only) {
  // A CQ without a channel may be armed (hardware accepts it); the event then goes nowhere.
  std::lock_guard lock(mu_);
  // Arming for "next" is stronger than "solicited" and stays so until an event fires.
  if (arm_ != Arm::kNext) arm_ = solicited_only ? Arm::kSolicited : Arm::kNext;
  return Status::Ok();
}

void Cq::CountEvent() {
  std::lock_guard lock(mu_);
  ++events_;
}

void Cq::AckEvents(unsigned int n) {
  std::lock_guard lock(mu_);
  acked_ += n;
  acked_cv_.notify_all();
}

void Cq::WaitForAcks() {
  std::unique_lock lock(mu_);
  if (acked_ < events_) {
    // ibv_destroy_cq(3) blocks until every event is acknowledged; say why we are waiting.
    SV_LOG(kWarn, "ibv_destroy_cq(cq 0x%x): waiting for %llu unacknowledged events (ibv_ack_cq_events)",
           handle_, static_cast<unsigned long long>(events_ - acked_));
    acked_cv_.wait(lock, [this] { return acked_ >= events_; });
  }
}

}  // namespace softverbs::core
