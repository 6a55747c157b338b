#include "core/context.h"

#include <algorithm>

#include "core/qp.h"
#include "core/raw_qp.h"
#include "core/srq.h"
#include "core/xrc_qp.h"

namespace softverbs::core {

Result<std::unique_ptr<Context>> Context::Open(std::shared_ptr<ObjectSpace> space) {
  auto local = fabric::LocalProcess::Get();
  if (!local.ok()) return local.status();
  if (space == nullptr) {
    auto created = ObjectSpace::Create();
    if (!created.ok()) return created.status();
    space = std::move(created.value());
  }
  auto fd = EventFd::Create();
  if (!fd.ok()) return fd.status();
  std::unique_ptr<Context> ctx(new Context(local.value(), std::move(fd.value())));
  ctx->space_ = std::move(space);
  ctx->async_tag_ = local.value()->NewFdTag();
  ctx->gids();
  return ctx;
}

Context::~Context() {
  std::vector<Qp*> qps;
  {
    std::lock_guard lock(objects_mu_);
    qps = qps_;
  }
  // Every rule first: a paced queue still sending may loop frames back into this context's QPs.
  for (Qp* qp : qps)
    if (qp->raw() != nullptr) qp->raw()->DetachFlows();
  for (Qp* qp : qps)
    if (qp->raw() != nullptr) qp->raw()->Close();
}

GidTable Context::gids() {
  std::lock_guard lock(gid_mu_);
  auto now = std::chrono::steady_clock::now();
  if (now - gids_read_ > std::chrono::seconds(1)) {
    gids_ = GidTable::Read();
    gids_read_ = now;
  }
  return gids_;
}

void Context::PostAsyncEvent(const AsyncEvent& event) {
  std::lock_guard lock(async_mu_);
  async_events_.push_back(event);
  async_fd_.Signal();
}

void Context::DropAsyncEventsFor(const void* handle) {
  std::lock_guard lock(async_mu_);
  std::erase_if(async_events_, [handle](const AsyncEvent& e) { return e.handle == handle; });
  if (async_events_.empty()) async_fd_.Clear();
}

void Context::Register(Qp* qp) {
  std::lock_guard lock(objects_mu_);
  qps_.push_back(qp);
}
void Context::Unregister(Qp* qp) {
  std::lock_guard lock(objects_mu_);
  std::erase(qps_, qp);
}
bool Context::HasQp(uint32_t qp_num) {
  std::lock_guard lock(objects_mu_);
  return std::any_of(qps_.begin(), qps_.end(), [qp_num](const Qp* qp) { return qp->qp_num() == qp_num; });
}

void Context::Register(Srq* srq) {
  std::lock_guard lock(objects_mu_);
  srqs_.push_back(srq);
}
void Context::Unregister(Srq* srq) {
  std::lock_guard lock(objects_mu_);
  std::erase(srqs_, srq);
}

void Context::Register(OpenedQp* qp) {
  std::lock_guard lock(objects_mu_);
  opened_qps_.push_back(qp);
}
void Context::Unregister(OpenedQp* qp) {
  std::lock_guard lock(objects_mu_);
  std::erase(opened_qps_, qp);
}

void Context::CollectRemoteEvents() {
  std::lock_guard lock(objects_mu_);
  for (Srq* srq : srqs_)
    if (srq->queue().TakeLimitFired())
      PostAsyncEvent({kEventSrqLimitReached, AsyncEvent::Subject::kSrq, srq->user_handle(), 0});
  // A QP a peer failed moves to ERR now and reports it (Qp::ApplyPendingError); a receive CQ a
  // peer overran reports IBV_EVENT_CQ_ERR.
  for (Qp* qp : qps_) {
    qp->state();
    if (qp->init().recv_cq != nullptr) qp->init().recv_cq->ReportOverrun();  // (XRC_RECV: none)
  }
  // An XRC_RECV QP that failed is reported to each of its ibv_open_qp handles too.
  for (OpenedQp* qp : opened_qps_)
    if (qp->TakeNewErrors()) PostAsyncEvent({kEventQpAccessErr, AsyncEvent::Subject::kQp, qp->user_handle(), 0});
}

Result<AsyncEvent> Context::GetAsyncEvent() {
  // The queue is the truth; the fd is readable while it is non-empty, or after a peer raised a
  // flag. The fd is cleared before the flags are collected, so a peer's signal is never lost.
  for (;;) {
    {
      std::lock_guard lock(async_mu_);
      if (async_events_.empty()) async_fd_.Clear();
    }
    CollectRemoteEvents();
    {
      std::lock_guard lock(async_mu_);
      if (!async_events_.empty()) {
        AsyncEvent e = async_events_.front();
        async_events_.pop_front();
        if (async_events_.empty()) async_fd_.Clear();
        return e;
      }
    }
    if (int err = async_fd_.Wait(); err != 0)
      return Status(err, err == EAGAIN ? "no async event is pending (async_fd is non-blocking)"
                                       : "waiting on async_fd failed");
  }
}

}  // namespace softverbs::core
