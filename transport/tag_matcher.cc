#include "transport/tag_matcher.h"

#include <cstring>

#include "base/big_endian.h"

namespace softverbs::transport {

TmHeader ParseTmh(const uint8_t* b) {
  TmHeader h;
  h.opcode = b[0];
  h.app_ctx = Be32(b + 4);
  h.tag = Be64(b + 8);
  return h;
}

void WriteTmh(const TmHeader& h, uint8_t* b) {
  memset(b, 0, kTmhBytes);
  b[0] = h.opcode;
  PutBe32(b + 4, h.app_ctx);
  PutBe64(b + 8, h.tag);
}

void TagTableInit(TagTable& table, uint32_t max_tags) {
  table.lock.Init();
  table.max_tags = max_tags;
  table.posted = 0;
  table.hw_unexpected = 0;
  table.sw_unexpected = 0;
  table.next_seq = 1;
  for (uint32_t i = 0; i < max_tags; ++i) table.entries()[i].posted = 0;
}

void TagSync(TagTable& table, uint32_t count) {
  fabric::RobustLock lock(table.lock);
  table.sw_unexpected = count;
}

TagOpResult TagAdd(TagTable& table, const TagSpec& spec) {
  fabric::RobustLock lock(table.lock);
  TagOpResult out;
  for (uint32_t i = 0; i < table.max_tags; ++i) {
    TagEntry& e = table.entries()[i];
    if (e.posted) continue;
    e = TagEntry{spec.tag, spec.mask, spec.wr_id, table.next_seq++, spec.addr, spec.length, spec.lkey,
                 spec.num_sge, 1, table.sw_unexpected, 0};
    ++table.posted;
    out.ok = true;
    out.handle = i;
    // mlx5 (cq.c): an ADD whose phase is not the hardware's asks for a sync.
    out.sync_req = e.phase != table.hw_unexpected;
    return out;
  }
  return out;  // ibv_post_srq_ops(3): the list holds at most max_num_tags
}

TagOpResult TagRemove(TagTable& table, uint32_t handle) {
  fabric::RobustLock lock(table.lock);
  TagOpResult out;
  out.handle = handle;
  TagEntry& e = table.entries()[handle];
  out.sync_req = e.phase != table.hw_unexpected;  // mlx5 cq.c: the tag's phase against the hardware's
  // ibv_post_srq_ops(3): DEL fails (IBV_WC_TM_ERR) when a message consumed the tag meanwhile.
  if (!e.posted) return out;
  e.posted = 0;
  --table.posted;
  out.ok = true;
  return out;
}

TagMatch TagMatchTake(TagTable& table, uint64_t tag) {
  fabric::RobustLock lock(table.lock);
  TagMatch out;
  if (table.sw_unexpected != table.hw_unexpected) return out;  // matching off until synced
  uint64_t best = UINT64_MAX;
  for (uint32_t i = 0; i < table.max_tags; ++i) {
    const TagEntry& e = table.entries()[i];
    if (!e.posted || ((tag ^ e.tag) & e.mask) != 0 || e.seq >= best) continue;
    best = e.seq;
    out.found = true;
    out.handle = i;
  }
  if (!out.found) return out;
  TagEntry& e = table.entries()[out.handle];
  out.entry = e;
  e.posted = 0;
  --table.posted;
  return out;
}

bool TagNoteUnexpected(TagTable& table) {
  fabric::RobustLock lock(table.lock);
  ++table.hw_unexpected;
  return table.hw_unexpected - table.sw_unexpected > kTmMaxSyncDiff;
}

uint32_t TagPosted(TagTable& table) {
  fabric::RobustLock lock(table.lock);
  return table.posted;
}

}  // namespace softverbs::transport
