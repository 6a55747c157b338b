// The byte mover for registrations whose memory is already shared (fabric/host/shared_backing.h):
// when every piece of the target's memory an access touches lies in a key marked kSharedBacking,
// the initiator maps the owner's file (fabric/host/backing_maps.h) and copies with memcpy
// instead of process_vm_writev/readv. Keys are resolved, checked and pinned exactly as for any
// access (ResolveKey); only the way the bytes move changes, and the pins are held around it, so
// once ibv_dereg_mr returns no access through the key touches the memory.
#pragma once

#include <sys/uio.h>

#include <memory>
#include <vector>

#include "fabric/host/backing_maps.h"
#include "fabric/host/host_registry.h"
#include "transport/indirect_key.h"

namespace softverbs::transport {

// The target's pieces as this process reaches them through mappings of their backings.
class MappedPieces {
 public:
  // Translates every piece of `remote` (pinned by it, in `peer`'s process); false -- and nothing
  // to use -- if one is not in a shared-backed key of that process or its backing cannot be
  // mapped with certainty (the caller then uses process_vm_writev/readv). `peer` null: the
  // memory is this process's own, reached directly anyway.
  bool Map(fabric::HostRegistry& registry, fabric::BackingMaps& maps, fabric::Peer* peer, const PinnedPieces& remote);
  const iovec* data() const { return pieces_.data(); }
  size_t size() const { return pieces_.size(); }

 private:
  std::vector<iovec> pieces_;
  std::vector<std::shared_ptr<const fabric::BackingWindow>> windows_;  // kept while the pieces are used
};

// Copies `local` to (write) or from the mapped pieces `mapped`, in order; both describe the
// same number of bytes.
void CopyMapped(bool write, const iovec* local, size_t nl, const iovec* mapped, size_t nm);

}  // namespace softverbs::transport
