// Signature mkeys (mlx5dv_create_mkey(3) with MLX5DV_MKEY_INIT_ATTR_FLAGS_BLOCK_SIGNATURE,
// configured by mlx5dv_wr_set_mkey_sig_block(3)): an indirect key whose layout holds the memory
// domain and whose accesses see the wire domain.
//
// mlx5dv_wr_set_mkey_sig_block(3): "depending on the actual operation that happens (TX or RX),
// the device will do the 'right thing' based on the signature configurations of the two
// domains". A gather through the key (SEND / RDMA WRITE source, RDMA READ at the responder)
// reads the memory blocks, checks their fields and emits the wire view; a scatter (receive,
// RDMA WRITE target, RDMA READ response) checks the wire fields and writes the data and the
// memory fields. As the kernel's rdma_rw does for its signature MRs, addresses and lengths
// through the key count wire bytes (data plus the wire fields), zero-based.
//
// A block is checked and its output field generated when one access carries the whole block;
// the bytes of a block split between two accesses move unchanged (on the same host a message
// is one access; on the wire a READ response or WRITE split into packets is several).
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "transport/block_signature.h"

namespace softverbs::transport {

// The signature of one mkey (what the last UMR configured), kept in the layout block in the
// owner's shared arena so that an initiator in any process converts the same way.
struct SigConfig {
  uint32_t active = 0;     // a signature is configured: accesses go through this module
  uint8_t check_mask = 0;  // mlx5dv_sig_block_attr.check_mask
  uint8_t copy_mask = 0;   // output field bytes copied from the input field (same block structure)
  uint16_t reserved = 0;
  SigDomain mem;
  SigDomain wire;
};

// The first integrity error since the last mlx5dv_mkey_check (mlx5dv_mkey_check(3): "The first
// of these errors is reported to the MKEY and kept there until application software queries
// it"). Written by whichever process's initiator detects it, read and cleared by the owner.
struct SigErrorSlot {
  std::atomic<uint32_t> state{0};  // 0 none, 1 being written, 2 set
  uint32_t kind = 0;               // SigErrorKind
  uint64_t actual = 0;
  uint64_t expected = 0;
  uint64_t offset = 0;
};
static_assert(std::atomic<uint32_t>::is_always_lock_free);

// What the layout block holds after its LayoutHeader (indirect_key.h).
struct SigState {
  SigConfig config;
  SigErrorSlot error;
};

// Keeps `e` in `slot` unless an error is kept there already.
void SigRecordError(SigErrorSlot& slot, const SigError& e);
// Takes the kept error (kind kNone if none) and clears the slot.
SigError SigTakeError(SigErrorSlot& slot);

// The block structure of a configuration: data bytes per block and each domain's field bytes.
struct SigGeometry {
  uint64_t block = 0;
  uint64_t mem_field = 0;
  uint64_t wire_field = 0;
  uint64_t mem_stride() const { return block + mem_field; }
  uint64_t wire_stride() const { return block + wire_field; }
  // The wire bytes of a layout of `memory` bytes: each whole memory block gives a whole wire
  // block; a trailing partial block gives its data bytes only.
  uint64_t WireLength(uint64_t memory) const;
};
SigGeometry SigGeometryOf(const SigConfig& c);

// Reads `n` bytes at memory offset `offset` of the layout into `dst`; false if it cannot.
using SigReadMemory = bool (*)(void* ctx, uint64_t offset, uint64_t n, uint8_t* dst);
// Writes `n` bytes of `src` at memory offset `offset` of the layout; false if it cannot.
using SigWriteMemory = bool (*)(void* ctx, uint64_t offset, uint64_t n, const uint8_t* src);

// The wire bytes [offset, +n) of a key of configuration `c` over `memory` bytes, into `out`:
// reads the memory blocks they touch, checks the memory fields of whole blocks, generates the
// wire fields. `*error` gets the first failed check (offset: the wire offset of its block).
// False if reading the memory failed.
bool SigGather(const SigConfig& c, uint64_t memory, uint64_t offset, uint64_t n, SigReadMemory read, void* ctx,
               uint8_t* out, SigError* error);

// Lands the wire bytes `in` at wire offset `offset` (n bytes): the data bytes into their memory
// blocks; for each block the access carries whole, the wire field is checked and the memory
// field generated. False if writing the memory failed.
bool SigScatter(const SigConfig& c, uint64_t memory, uint64_t offset, const uint8_t* in, uint64_t n,
                SigWriteMemory write, void* ctx, SigError* error);

}  // namespace softverbs::transport
