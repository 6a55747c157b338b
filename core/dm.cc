#include "core/dm.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "core/context.h"
#include "core/device_limits.h"
#include "transport/key_table.h"

namespace softverbs::core {

Result<std::shared_ptr<DeviceMemory>> DeviceMemory::Allocate(Context& context, uint64_t length, uint32_t log_align) {
  if (length == 0) return Invalid("length is 0");
  if (length > DeviceLimits::kMaxDmSize)
    return Invalid("length " + std::to_string(length) + " exceeds max_dm_size " +
                   std::to_string(DeviceLimits::kMaxDmSize));
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  if (log_align >= 64 || (1ull << log_align) > page)
    return Invalid("log_align_req " + std::to_string(log_align) + " exceeds the page size softverbs0 aligns to");
  UniqueFd fd(memfd_create("softverbs-dm", MFD_CLOEXEC));
  if (!fd.valid()) return Status(errno, std::string("memfd_create: ") + strerror(errno));
  const uint64_t mapped = (length + page - 1) & ~(page - 1);
  if (ftruncate(fd.get(), static_cast<off_t>(mapped)) != 0) return Status(errno, std::string("ftruncate: ") + strerror(errno));
  void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) return Status(ENOMEM, std::string("mmap of device memory: ") + strerror(errno));
  return std::shared_ptr<DeviceMemory>(
      new DeviceMemory(std::move(fd), static_cast<uint8_t*>(p), mapped, length, context.NewHandle()));
}

DeviceMemory::~DeviceMemory() { munmap(base_, mapped_); }

Status DeviceMemory::CheckRange(uint64_t offset, uint64_t length) const {
  if (!transport::RangeWithin(0, length_, offset, length))
    return Invalid("[" + std::to_string(offset) + ", +" + std::to_string(length) + ") is outside the " +
                   std::to_string(length_) + " bytes of device memory");
  return Status::Ok();
}

Status DeviceMemory::CopyTo(uint64_t offset, const void* from, uint64_t length) {
  if (!transport::RangeWithin(0, length_, offset, length))
    return Status(EFAULT, "[" + std::to_string(offset) + ", +" + std::to_string(length) + ") is outside the " +
                              std::to_string(length_) + " bytes of device memory");
  // Atomic against no one, as a NIC's memory written by the host CPU.
  memcpy(base_ + offset, from, length);
  return Status::Ok();
}

Status DeviceMemory::CopyFrom(void* to, uint64_t offset, uint64_t length) const {
  if (!transport::RangeWithin(0, length_, offset, length))
    return Status(EFAULT, "[" + std::to_string(offset) + ", +" + std::to_string(length) + ") is outside the " +
                              std::to_string(length_) + " bytes of device memory");
  memcpy(to, base_ + offset, length);
  return Status::Ok();
}

}  // namespace softverbs::core
