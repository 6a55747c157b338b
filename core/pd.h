// Protection domain. Objects created in a PD hold a reference; ibv_dealloc_pd refuses (EBUSY)
// while any remains, as the kernel does.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "base/status.h"
#include "core/object_quota.h"

namespace softverbs::core {

class Context;

// Counts the objects that depend on this one (its users), for EBUSY on destroy.
class UseCount {
 public:
  void Acquire() { n_.fetch_add(1, std::memory_order_relaxed); }
  void Release() { n_.fetch_sub(1, std::memory_order_release); }
  int count() const { return n_.load(std::memory_order_acquire); }

 private:
  std::atomic<int> n_{0};
};

class Pd {
 public:
  // ibv_alloc_pd: a PD counted against max_pd (ENOMEM beyond it: core/object_quota.h).
  static Result<std::unique_ptr<Pd>> Create(Context& context);
  // An uncounted PD (tests).
  Pd(Context& context, uint32_t handle);
  Context& context() const { return context_; }
  uint32_t handle() const { return handle_; }
  // Unique across the host (process slot and a process-wide number): an initiator in another
  // process compares it with the PD of the memory key it uses (IBA 10.6.3: PD check).
  uint64_t host_id() const { return host_id_; }
  UseCount& users() { return users_; }

 private:
  Context& context_;
  uint32_t handle_;
  uint64_t host_id_;
  UseCount users_;
  QuotaHold quota_;
};

}  // namespace softverbs::core
