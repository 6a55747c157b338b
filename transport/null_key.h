// The memory behind null MRs (ibv_alloc_null_mr(3)): "A null MR discards all data written to it,
// and always returns 0 on read ... A device should implement the null MR in a way that bypasses
// PCI transfers, internally discarding or sending 0's data." softverbs has no PCI to bypass: each
// process maps, once, a region of 2 * kNullChunk bytes (transport/key_table.h): a read-only
// chunk of zero pages that every read through a null key gathers from, and a writable chunk
// that every write through one lands in and nobody reads. Initiators of other processes reach
// it like any memory of its owner (process_vm_readv/writev); it is never unmapped.
#pragma once

#include <cstdint>

#include "base/status.h"

namespace softverbs::transport {

// This process's null region (mapped on first use): its address; its length is 2 * kNullChunk.
// ENOMEM if it cannot be mapped.
Result<uint64_t> NullRegion();

}  // namespace softverbs::transport
