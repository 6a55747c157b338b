#include "core/context.h"

namespace softverbs::core {

Result<std::unique_ptr<Context>> Context::Open() {
  auto local = fabric::LocalProcess::Get();
  if (!local.ok()) return local.status();
  auto fd = EventFd::Create();
  if (!fd.ok()) return fd.status();
  std::unique_ptr<Context> ctx(new Context(local.value(), std::move(fd.value())));
  ctx->gids();
  return ctx;
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
  {
    std::lock_guard lock(async_mu_);
    async_events_.push_back(event);
  }
  async_fd_.Signal();
}

void Context::DropAsyncEventsFor(const void* handle) {
  std::lock_guard lock(async_mu_);
  size_t dropped = std::erase_if(async_events_, [handle](const AsyncEvent& e) { return e.handle == handle; });
  // Keep the fd's count equal to the queue length.
  for (size_t i = 0; i < dropped; ++i) async_fd_.Consume();
}

Result<AsyncEvent> Context::GetAsyncEvent() {
  if (int err = async_fd_.Consume(); err != 0)
    return Status(err, err == EAGAIN ? "no async event is pending (async_fd is non-blocking)"
                                     : "reading async_fd failed");
  std::lock_guard lock(async_mu_);
  AsyncEvent e = async_events_.front();
  async_events_.pop_front();
  return e;
}

}  // namespace softverbs::core
