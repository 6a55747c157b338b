// Local SGEs through an MR imported from another process (ibv_import_mr(3)): on hardware the
// imported lkey names the exporter's pinned pages, and the importer's QP gathers from them. The
// requester resolves local SGEs into this process's memory (indirect_key.h, ResolveKey); an
// lkey whose memory is another process's is read here, through process_vm_readv, into a buffer
// the work request's pieces own.
#pragma once

#include <cstdint>

#include "fabric/host/host_registry.h"

namespace softverbs::transport {

// Copies [addr, +length) of `lkey` into `to` when the key is a plain MR (not a window, mkey or
// null MR) of PD `pd` whose memory belongs to a process other than `self_slot` and still runs.
// False -- nothing promised about `to` -- when any of that fails, the range leaves the MR, an
// on-demand page is missing, or the owner's memory cannot be read: the SGE's local protection
// error (IBA 10.6.3.1).
bool ReadImportedKey(fabric::HostRegistry& registry, uint32_t lkey, uint64_t pd, uint32_t self_slot, uint64_t addr,
                     uint64_t length, uint8_t* to);

}  // namespace softverbs::transport
