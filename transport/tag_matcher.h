// Tag matching (IBV_SRQT_TM, ibv_post_srq_ops(3)): the list of posted tags of a TM SRQ and the
// rules that match an incoming message's TMH against it. The table lives in the SRQ owner's
// shared arena: the owner adds and removes tags, a sender in any process matches (DESIGN.md
// section 5: the initiator is the NIC). Plain memory and one robust lock: unit-testable on a
// heap buffer.
//
// Phase synchronisation (ibv_post_srq_ops(3)): every unexpected message the "hardware" delivers
// bumps `hw_unexpected`; the application reports how many it handled with IBV_OPS_TM_SYNC. While
// the two differ, matching is off and every tagged message is unexpected, as on mlx5, so that a
// tag posted before the application saw an earlier unexpected message never overtakes it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "fabric/host/robust_mutex.h"

namespace softverbs::transport {

// struct ibv_tmh / ibv_rvh (infiniband/tm_types.h), big-endian on the wire.
inline constexpr uint32_t kTmhBytes = 16;
inline constexpr uint32_t kRvhBytes = 16;
// enum ibv_tmh_op
inline constexpr uint8_t kTmhNoTag = 0, kTmhRndv = 1, kTmhFin = 2, kTmhEager = 3;
// mlx5: an unexpected completion asks for a sync when the counts drift this far (cq.c).
inline constexpr uint32_t kTmMaxSyncDiff = 0x3fff;

struct TmHeader {
  uint8_t opcode = kTmhNoTag;
  uint32_t app_ctx = 0;  // host order
  uint64_t tag = 0;      // host order
};
// Reads a TMH from the first kTmhBytes of `bytes`.
TmHeader ParseTmh(const uint8_t* bytes);
// Writes one (a FIN, or a test's message).
void WriteTmh(const TmHeader& h, uint8_t* bytes);

// One posted tag: its matching parameters and its single buffer (tm_caps.max_sge is 1, as mlx5).
struct TagEntry {
  uint64_t tag;
  uint64_t mask;
  uint64_t wr_id;    // recv_wr_id: the TM_RECV completion's wr_id
  uint64_t seq;      // posting order
  uint64_t addr;
  uint32_t length;
  uint32_t lkey;
  uint32_t num_sge;  // 0 or 1
  uint32_t posted;   // 1 while in the list
  uint32_t phase;    // the application's unexpected count when it was added
  uint32_t reserved;
};

struct TagTable {
  fabric::RobustMutex lock;  // the owner's operations and every matcher
  uint32_t max_tags;
  uint32_t posted;         // tags in the list
  uint32_t hw_unexpected;  // unexpected messages delivered
  uint32_t sw_unexpected;  // the count the application last reported (IBV_OPS_TM_SYNC)
  uint64_t next_seq;
  TagEntry* entries() { return reinterpret_cast<TagEntry*>(this + 1); }
};

inline size_t TagTableBytes(uint32_t max_tags) { return sizeof(TagTable) + sizeof(TagEntry) * max_tags; }
// `table` points at TagTableBytes(max_tags) zeroed bytes.
void TagTableInit(TagTable& table, uint32_t max_tags);

struct TagSpec {
  uint64_t tag = 0, mask = 0, wr_id = 0;
  uint64_t addr = 0;
  uint32_t length = 0, lkey = 0, num_sge = 0;
};

// What an owner's list operation did; `sync_req`: the counts differ (IBV_WC_TM_SYNC_REQ).
struct TagOpResult {
  bool ok = false;  // ADD: false when the list is full; DEL: false when the handle is not posted
  uint32_t handle = 0;
  bool sync_req = false;
};
// IBV_OPS_TM_SYNC on any operation: the application has handled `count` unexpected messages.
void TagSync(TagTable& table, uint32_t count);
TagOpResult TagAdd(TagTable& table, const TagSpec& spec);
// `handle` < max_tags (the caller checks the range).
TagOpResult TagRemove(TagTable& table, uint32_t handle);

// An incoming EAGER / RNDV tag: the oldest posted entry with (tag ^ entry.tag) & entry.mask == 0,
// taken out of the list; nothing while the counts differ.
struct TagMatch {
  bool found = false;
  uint32_t handle = 0;
  TagEntry entry{};
};
TagMatch TagMatchTake(TagTable& table, uint64_t tag);
// The message went to an ordinary receive as unexpected; true when the drift asks for a sync.
bool TagNoteUnexpected(TagTable& table);
uint32_t TagPosted(TagTable& table);

}  // namespace softverbs::transport
