#include "transport/raw/flow_table.h"

#include <algorithm>

namespace softverbs::transport::raw {
namespace {

void CountMatch(const FlowRule& rule, size_t frame_bytes) {
  if (rule.counter) rule.counter->Count(frame_bytes);
}

void AddOnce(std::vector<Delivery>* out, RawSink* sink, const FlowRule& rule) {
  for (const Delivery& d : *out)
    if (d.sink == sink) return;
  out->push_back({sink, {rule.has_tag, rule.tag, rule.esp}});
}

}  // namespace

uint64_t FlowTable::Add(const FlowRule& rule, RawSink* sink) {
  const uint64_t id = next_id_++;
  auto at = std::upper_bound(rules_.begin(), rules_.end(), rule.priority,
                             [](uint16_t p, const Entry& e) { return p < e.rule.priority; });
  rules_.insert(at, Entry{id, rule, sink});
  return id;
}

bool FlowTable::Remove(uint64_t id) {
  auto it = std::find_if(rules_.begin(), rules_.end(), [id](const Entry& e) { return e.id == id; });
  if (it == rules_.end()) return false;
  rules_.erase(it);
  return true;
}

void FlowTable::Steer(std::span<const uint8_t> frame, const fabric::raw::FrameView& view, FrameSource source,
                      const RawSink* sender, std::vector<Delivery>* out) const {
  out->clear();
  const bool multicast = (view.dst_mac[0] & 1) != 0;
  // A blocked QP never sees the frame, so its rules do not count it either.
  auto blocked = [&](const RawSink* sink) {
    return source == FrameSource::kLoopback && sender != nullptr && sink->domain() == sender->domain() &&
           !sink->AllowsSelfLoopback(multicast);
  };
  for (const Entry& e : rules_)
    if (e.rule.type == FlowType::kSniffer && e.sink != sender) {
      CountMatch(e.rule, frame.size());
      AddOnce(out, e.sink, e.rule);
    }
  if (source == FrameSource::kSentAway) return;
  bool matched = false;
  for (size_t i = 0; i < rules_.size();) {
    // One priority level: [i, end).
    size_t end = i;
    while (end < rules_.size() && rules_[end].rule.priority == rules_[i].rule.priority) ++end;
    bool drop = false, trapped = false;
    std::vector<const Entry*> hits;
    for (size_t k = i; k < end; ++k) {
      const Entry& e = rules_[k];
      if (e.rule.type != FlowType::kNormal || !Matches(e.rule, frame, view)) continue;
      if (!blocked(e.sink)) CountMatch(e.rule, frame.size());
      hits.push_back(&e);
      drop = drop || e.rule.drop;
      trapped = trapped || !e.rule.dont_trap;
    }
    if (!hits.empty()) {
      matched = true;
      if (!drop)
        for (const Entry* e : hits)
          if (!blocked(e->sink)) AddOnce(out, e->sink, e->rule);
      if (trapped) return;
    }
    i = end;
  }
  if (matched) return;
  bool mc_default = false;
  if (multicast)
    for (const Entry& e : rules_)
      if (e.rule.type == FlowType::kMcDefault) {
        mc_default = true;
        if (blocked(e.sink)) continue;
        CountMatch(e.rule, frame.size());
        AddOnce(out, e.sink, e.rule);
      }
  if (mc_default) return;
  for (const Entry& e : rules_)
    if (e.rule.type == FlowType::kAllDefault && !blocked(e.sink)) {
      CountMatch(e.rule, frame.size());
      AddOnce(out, e.sink, e.rule);
    }
}

}  // namespace softverbs::transport::raw
