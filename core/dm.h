// Device memory (ibv_alloc_dm(3)): memory "the NIC owns", reached by the host only through
// ibv_memcpy_to_dm / ibv_memcpy_from_dm and by traffic through zero-based MRs (ibv_reg_dm_mr).
// softverbs' device memory is a memfd of its own, mapped shared: initiators of other processes
// reach its MRs through the file (fabric/host/shared_backing.h), as any shared-file MR.
#pragma once

#include <cstdint>
#include <memory>

#include "base/status.h"
#include "base/unique_fd.h"
#include "core/object_space.h"
#include "core/pd.h"

namespace softverbs::core {

class Context;

class DeviceMemory {
 public:
  // ibv_alloc_dm: `length` bytes (<= DeviceLimits::kMaxDmSize, EINVAL beyond, as mlx5_alloc_dm),
  // aligned to 2^log_align (the mapping is page aligned: up to the page size; EINVAL beyond).
  // Listed in the context's object space (core/object_space.h) until destroyed.
  static Result<std::shared_ptr<DeviceMemory>> Allocate(Context& context, uint64_t length, uint32_t log_align);
  // ibv_import_dm(3) through a context sharing the object space of the allocating one (an
  // import of its cmd_fd, in this process or another): the same memory, mapped here through the
  // allocator's memfd. ENOENT for a handle the space does not list (freed, or never allocated),
  // or whose allocator is gone -- the kernel's lookup of an unknown handle.
  static Result<std::shared_ptr<DeviceMemory>> Import(Context& context, uint32_t handle);
  ~DeviceMemory();
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  // ibv_memcpy_to_dm / ibv_memcpy_from_dm: EFAULT when [offset, +length) leaves the memory
  // (mlx5_copy_to_dm / mlx5_copy_from_dm).
  Status CopyTo(uint64_t offset, const void* from, uint64_t length);
  Status CopyFrom(void* to, uint64_t offset, uint64_t length) const;
  // ibv_reg_dm_mr's range rule (the kernel's ib_uverbs reg_dm_mr: EINVAL).
  Status CheckRange(uint64_t offset, uint64_t length) const;

  uint8_t* base() const { return base_; }
  uint64_t length() const { return length_; }
  uint32_t handle() const { return handle_; }
  // MRs registered on it: ibv_free_dm is EBUSY while any remains (the kernel's usecnt).
  UseCount& users() { return users_; }

 private:
  DeviceMemory(UniqueFd fd, uint8_t* base, uint64_t mapped, uint64_t length, uint32_t handle)
      : fd_(std::move(fd)), base_(base), mapped_(mapped), length_(length), handle_(handle) {}
  UniqueFd fd_;
  std::shared_ptr<ObjectSpace> listed_in_;  // the allocator's: forgotten there when destroyed
  uint8_t* base_;
  uint64_t mapped_;
  uint64_t length_;
  uint32_t handle_;
  UseCount users_;
};

}  // namespace softverbs::core
