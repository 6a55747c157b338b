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
  // ibv_import_pd(3): the PD of `context`'s object space with `handle` (core/object_space.h) --
  // the same PD (same host_id), in this context. ENOENT for a handle the space does not list,
  // as the kernel's lookup of an unknown handle.
  static Result<std::unique_ptr<Pd>> Import(Context& context, uint32_t handle);
  // An uncounted PD (tests).
  Pd(Context& context, uint32_t handle);
  ~Pd();
  Context& context() const { return context_; }
  uint32_t handle() const { return handle_; }
  // Unique across the host (process slot and a process-wide number): an initiator in another
  // process compares it with the PD of the memory key it uses (IBA 10.6.3: PD check).
  uint64_t host_id() const { return host_id_; }
  UseCount& users() { return users_; }
  // A PD imported from another process. Its MRs are of every process that registers on it:
  // a key names the process whose memory it reaches apart from its PD (KeyView::owner).
  bool foreign() const;
  bool imported() const { return imported_; }

 private:
  Pd(Context& context, uint32_t handle, uint64_t host_id)
      : context_(context), handle_(handle), host_id_(host_id), imported_(true) {}
  Context& context_;
  uint32_t handle_;
  uint64_t host_id_;
  bool imported_ = false;
  bool listed_ = false;  // in the object space (Create): removed from it with the PD
  UseCount users_;
  QuotaHold quota_;
};

}  // namespace softverbs::core
