#include "core/dm.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "core/context.h"
#include "core/device_limits.h"
#include "fabric/host/peer_process.h"
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
  struct stat st {};
  fstat(fd.get(), &st);
  const int number = fd.get();
  std::shared_ptr<DeviceMemory> dm(
      new DeviceMemory(std::move(fd), static_cast<uint8_t*>(p), mapped, length, context.NewHandle()));
  const DmRecord record{dm->handle_, fabric::ProcessToken::Self().raw(), number, static_cast<uint64_t>(st.st_dev),
                        static_cast<uint64_t>(st.st_ino), length};
  SV_RETURN_IF_ERROR(context.object_space().AddDm(record));
  dm->listed_in_ = context.shared_object_space();
  return dm;
}

Result<std::shared_ptr<DeviceMemory>> DeviceMemory::Import(Context& context, uint32_t handle) {
  const std::string unknown = "the context's object space (its cmd_fd) has no device memory with handle " +
                              std::to_string(handle);
  std::optional<DmRecord> r = context.object_space().FindDm(handle);
  if (!r) return Status(ENOENT, unknown);
  // The allocator's memfd, borrowed (pidfd_getfd) from it, or dup'ed when it is this process.
  auto owner = fabric::PeerProcess::Open(fabric::ProcessToken(r->owner));
  if (!owner.ok()) return Status(ENOENT, unknown + " (the process that allocated it is gone)");
  auto fd = owner.value()->CopyFd(r->fd);
  if (!fd.ok()) return Status(fd.status().code() == EPERM ? EPERM : ENOENT, unknown + ": " + fd.status().rule());
  struct stat st {};
  // Its fd number may have been closed and reused since: the same file, or nothing.
  if (fstat(fd->get(), &st) != 0 || static_cast<uint64_t>(st.st_dev) != r->dev ||
      static_cast<uint64_t>(st.st_ino) != r->ino)
    return Status(ENOENT, unknown + " (freed meanwhile)");
  const uint64_t mapped = static_cast<uint64_t>(st.st_size);
  if (mapped < r->length) return Status(ENOENT, unknown + " (freed meanwhile)");
  void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd->get(), 0);
  if (p == MAP_FAILED) return Status(ENOMEM, std::string("mmap of device memory: ") + strerror(errno));
  return std::shared_ptr<DeviceMemory>(
      new DeviceMemory(std::move(fd.value()), static_cast<uint8_t*>(p), mapped, r->length, handle));
}

DeviceMemory::~DeviceMemory() {
  if (listed_in_) listed_in_->RemoveDm(handle_);
  munmap(base_, mapped_);
}

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
