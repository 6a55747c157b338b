// The object space of a device context: what the kernel's uverbs file (the context's cmd_fd)
// holds for rdma-core -- the handles of its PDs and MRs -- so that ibv_import_device(3) on a dup
// of that fd, in this process or another one that received it (SCM_RIGHTS), gives a context
// sharing them, and ibv_import_pd(3) / ibv_import_mr(3) find them by handle.
//
// softverbs has no kernel file: the cmd_fd is a memfd whose pages hold the table below. Any
// process holding the fd maps the same pages, so every context opened on it (the first, and every
// import) lists its objects there, and hands out handles from one counter (handles are unique in
// the space, as the kernel's per-file IDR makes them). The memory behind an MR stays with the
// process that registered it: the table lists the key, the host key table (transport/key_table.h)
// says where the memory is.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "base/status.h"
#include "base/unique_fd.h"

namespace softverbs::core {

// A PD of the space, as ibv_import_pd finds it.
struct PdRecord {
  uint32_t handle = 0;
  uint64_t host_id = 0;  // core::Pd::host_id: the PD the memory keys name
};

// Device memory of the space (ibv_alloc_dm), as ibv_import_dm finds it: the memfd behind it is
// the allocating process's descriptor `fd` (borrowed with pidfd_getfd by an importer of another
// process), checked against (dev, ino) once borrowed -- an fd number is reused once closed.
struct DmRecord {
  uint32_t handle = 0;
  uint64_t owner = 0;  // fabric::ProcessToken of the allocating process
  int32_t fd = -1;
  uint64_t dev = 0, ino = 0;
  uint64_t length = 0;
};

class ObjectSpace {
 public:
  // A new space (ibv_open_device) with its memfd.
  static Result<std::shared_ptr<ObjectSpace>> Create();
  // The space behind `fd` (ibv_import_device). Takes the fd on success only, as rdma-core's
  // import_context does (ibv_close_device closes it). Refuses as rdma-core's ibv_import_device
  // checks its fd: EINVAL when fstat fails or the fd is not a command fd at all (for softverbs:
  // not a cmd_fd memfd), ENODEV for a character device, which is no softverbs0 command fd.
  static Result<std::shared_ptr<ObjectSpace>> Open(int fd);
  ~ObjectSpace();
  ObjectSpace(const ObjectSpace&) = delete;
  ObjectSpace& operator=(const ObjectSpace&) = delete;

  int fd() const { return fd_.get(); }
  // A handle unique in the space (PD, CQ, AH, DM handles of every context on it).
  uint32_t NewHandle();

  // PDs: listed by ibv_alloc_pd, forgotten by ibv_dealloc_pd. ENOMEM when the table is full.
  Status AddPd(const PdRecord& pd);
  void RemovePd(uint32_t handle);
  std::optional<PdRecord> FindPd(uint32_t handle) const;

  // MRs by handle (== lkey), one entry per host key slot.
  void AddMr(uint32_t handle);
  void RemoveMr(uint32_t handle);
  bool HasMr(uint32_t handle) const;

  // Device memory: listed by ibv_alloc_dm, forgotten when freed. ENOMEM when the table is full.
  Status AddDm(const DmRecord& dm);
  void RemoveDm(uint32_t handle);
  std::optional<DmRecord> FindDm(uint32_t handle) const;

  static constexpr uint32_t kPdEntries = 65536;  // DeviceLimits::kMaxPd per process
  static constexpr uint32_t kDmEntries = 4096;

 private:
  struct Table;
  ObjectSpace(UniqueFd fd, Table* table) : fd_(std::move(fd)), table_(table) {}
  UniqueFd fd_;
  Table* table_;
};

}  // namespace softverbs::core
