#include "transport/raw/egress_table.h"

#include <algorithm>

#include "base/log.h"
#include "transport/raw/esp.h"

namespace softverbs::transport::raw {

uint64_t EgressTable::Add(const FlowRule& rule) {
  const uint64_t id = kIdBit | next_id_++;
  auto at = std::upper_bound(rules_.begin(), rules_.end(), rule.priority,
                             [](uint16_t p, const Entry& e) { return p < e.rule.priority; });
  rules_.insert(at, Entry{id, rule});
  return id;
}

bool EgressTable::Remove(uint64_t id) {
  auto it = std::find_if(rules_.begin(), rules_.end(), [id](const Entry& e) { return e.id == id; });
  if (it == rules_.end()) return false;
  rules_.erase(it);
  return true;
}

void EgressTable::Apply(std::span<const std::vector<uint8_t>> frames, std::vector<std::vector<uint8_t>>* out) const {
  out->clear();
  for (const auto& frame : frames) {
    fabric::raw::FrameView view;
    std::vector<uint8_t> f = frame;
    bool keep = true;
    if (fabric::raw::ParseFrame(f, &view)) {
      for (const Entry& e : rules_) {
        if (e.rule.type != FlowType::kNormal || !Matches(e.rule, f, view)) continue;
        if (e.rule.counter) e.rule.counter->Count(f.size());
        if (e.rule.drop) {
          keep = false;
        } else if (e.rule.esp && !e.rule.esp->EncryptFrame(f)) {
          SV_LOG(kError, "raw egress: a frame of %zu bytes matched an ESP ENCRYPT rule but is not an ESP packet with "
                 "room for its IV, trailer and ICV: dropped (the frame must carry them, as for mlx5 inline crypto)",
                 f.size());
          keep = false;
        }
        if (!keep || e.rule.esp || !e.rule.dont_trap) break;  // one encryption, at most
      }
    }
    if (keep) out->push_back(std::move(f));
  }
}

}  // namespace softverbs::transport::raw
