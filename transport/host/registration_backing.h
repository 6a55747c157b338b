// How peers reach the memory of a new registration of this process (ibv_reg_mr, ibv_rereg_mr):
// through a mapping of the file it is already shared from (fabric/host/shared_backing.h), else,
// for private anonymous memory, through a memfd its pages are moved into
// (fabric/host/private_share.h) -- unless another live key of this process touches those pages
// (OwnKeysTouch: a peer's process_vm_writev through it could be in flight) --, else nothing:
// process_vm_writev/readv.
#pragma once

#include <cstdint>
#include <optional>

#include "fabric/host/host_registry.h"
#include "fabric/host/shared_backing.h"

namespace softverbs::transport {

// Call before the registration's key is published (its own range is then no other key's).
std::optional<fabric::SharedBacking> RegistrationBacking(fabric::HostRegistry& registry, uint64_t addr,
                                                         uint64_t length);

// Call after a registration of this process went away or changed its range (its key no longer
// touches the old pages): moves kept shared because that key touched their pages (lingering,
// fabric/host/private_share.h) are moved back now. Cheap when none lingers.
void RetryMovesBack();

}  // namespace softverbs::transport
