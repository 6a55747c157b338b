// Registered memory that is already shared: a range of this process's address space that lies in
// one MAP_SHARED mapping of a file (a /dev/shm or tmpfs or regular file, a memfd) or of a SysV
// shm segment. Another process can map the same pages without anything changing in this one's
// mappings, and then reach the registration with memcpy instead of process_vm_writev/readv.
//
// The owner finds the backing at ibv_reg_mr (FindSharedBacking: one read of /proc/self/maps),
// keeps a descriptor of the file open while the registration lives (BackingFile), and publishes
// a BackingRecord next to the key in the host registry; initiators map it (backing_maps.h).
// Private anonymous memory is moved into a memfd by fabric/host/private_share.h instead (when it
// can be done safely); anything else that is not certainly one shared mapping of a reachable
// file keeps the process_vm_* path.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "base/unique_fd.h"
#include "fabric/host/host_registry.h"

namespace softverbs::fabric {

enum class BackingKind : uint32_t {
  kNone = 0,
  kFile = 1,     // `handle` is a descriptor number of the owner, open O_RDWR on the file
  kSysvShm = 2,  // `handle` is the shmid
};

// Next to a key slot in the host registry (HostRegistry::key_backing): how an initiator reaches
// the memory of the key's registration. The owner writes it while the key is withdrawn and
// before PublishKey, so an initiator holding a pin on `key` reads a complete record.
struct BackingRecord {
  std::atomic<uint32_t> key;  // the key described; 0 = none
  BackingKind kind;
  int32_t handle;   // owner's fd number (kFile) or shmid (kSysvShm)
  uint32_t dev;     // kFile: the file's st_dev (new_encode_dev form), checked after borrowing
  uint64_t tag;     // kFile: this incarnation of the fd number; kSysvShm: the creator's pid
  uint64_t ino;     // kFile: the file's st_ino
  uint64_t offset;  // file / segment offset of the registration's first byte
};
static_assert(sizeof(BackingRecord) <= HostRegistry::kKeyBackingBytes);

inline BackingRecord& BackingOf(HostRegistry& registry, uint32_t key_slot) {
  return *reinterpret_cast<BackingRecord*>(registry.key_backing(key_slot));
}

// One line of /proc/<pid>/maps.
struct MapsLine {
  uint64_t lo = 0, hi = 0;  // [lo, hi)
  bool readable = false, writable = false, shared = false;
  uint64_t offset = 0;      // file offset of lo
  uint32_t dev_major = 0, dev_minor = 0;
  uint64_t ino = 0;
  std::string_view path;    // empty for anonymous memory; may end in " (deleted)"
};
// False if `line` (without its newline) is not a maps line.
bool ParseMapsLine(std::string_view line, MapsLine* out);
// The one line of `maps` (the text of a maps file) that holds all of [addr, addr + length), or
// nothing if the range is unmapped or spans more than one line.
std::optional<MapsLine> FindMapping(std::string_view maps, uint64_t addr, uint64_t length);

// The owner's open descriptor of a shared file (or the id of a SysV segment), kept while any
// registration on it lives. Registrations of one file share one BackingFile.
class BackingFile {
 public:
  BackingFile(BackingKind kind, UniqueFd fd, int32_t handle, uint64_t tag, uint32_t dev, uint64_t ino)
      : kind_(kind), fd_(std::move(fd)), handle_(handle), tag_(tag), dev_(dev), ino_(ino) {}
  BackingKind kind() const { return kind_; }
  int32_t handle() const { return handle_; }
  uint64_t tag() const { return tag_; }
  uint32_t dev() const { return dev_; }
  uint64_t ino() const { return ino_; }

 private:
  BackingKind kind_;
  UniqueFd fd_;  // kFile: the descriptor `handle` names
  int32_t handle_;
  uint64_t tag_;
  uint32_t dev_;
  uint64_t ino_;
};

// What a registration keeps: its file and where its first byte is in it.
struct SharedBacking {
  std::shared_ptr<const BackingFile> file;
  uint64_t offset = 0;
};

// The shared backing of [addr, addr + length) of this process, or nothing (private or anonymous
// memory, several mappings, a file this process cannot reopen read-write...: the reason is an
// SV_LOG debug line).
std::optional<SharedBacking> FindSharedBacking(uint64_t addr, uint64_t length);

// Owner side: the record of key slot `slot` (call while the key is withdrawn).
void PublishBacking(HostRegistry& registry, uint32_t slot, uint32_t key, const SharedBacking& backing);
void ClearBacking(HostRegistry& registry, uint32_t slot);
// Owner side: describes key `to_key` of slot `to_slot` -- a range starting `skip` bytes into the
// registration of `from_key` -- with that registration's record (a memory window over a
// shared-backed MR reaches the same file). False, writing nothing, if `from_key`'s slot does
// not describe `from_key` now.
bool PublishBackingWithin(HostRegistry& registry, uint32_t from_slot, uint32_t from_key, uint32_t to_slot,
                          uint32_t to_key, uint64_t skip);

// True when the page holding `addr` is present, anonymous and private (/proc/self/pagemap; a
// page not present yet is faulted in first, as registering it for a NIC does): it lies in no
// shared mapping of a file. One pread, no read of the maps.
bool LooksPrivateAnonymous(uint64_t addr);

// A tag for a new incarnation of an owner's descriptor number (BackingRecord::tag).
uint64_t NextBackingTag();

// st_dev as the kernel encodes it in 32 bits (what a BackingRecord carries).
uint32_t EncodeDev(dev_t dev);

}  // namespace softverbs::fabric
