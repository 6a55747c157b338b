#include "fabric/wire/steering_program.h"

#include <algorithm>

namespace softverbs::fabric::wire {
namespace {

// [start, next segment's start) -> return value; the segments tile the whole 24-bit QPN space.
struct Segment {
  uint32_t start;
  uint32_t value;
};

std::vector<Segment> Tile(std::vector<QpnRange> ranges) {
  std::sort(ranges.begin(), ranges.end(),
            [](const QpnRange& a, const QpnRange& b) { return a.first < b.first; });
  std::vector<Segment> out;
  auto add = [&out](uint32_t start, uint32_t value) {
    if (!out.empty() && out.back().value == value) return;  // adjacent, same member: one segment
    out.push_back({start, value});
  };
  uint32_t next = 0;  // the first QPN not yet covered
  bool full = false;
  for (const QpnRange& r : ranges) {
    if (full || r.first > kQpnMask || r.last < r.first) continue;
    const uint32_t first = std::max(r.first, next);
    const uint32_t last = std::min(r.last, kQpnMask);
    if (last < first) continue;  // inside a range that started earlier
    if (first > next) add(next, kSteerFallback);
    add(first, r.index);
    if (last == kQpnMask) full = true;
    next = last + 1;
  }
  if (!full) add(next, kSteerFallback);
  return out;
}

sock_filter Insn(uint16_t code, uint32_t k, uint8_t jt = 0, uint8_t jf = 0) {
  return sock_filter{code, jt, jf, k};
}

// Binary search over segs[lo, hi) on A (the QPN). Jump offsets are 8 bits: a left subtree longer
// than 255 instructions is skipped with BPF_JA, whose offset is 32 bits.
std::vector<sock_filter> Search(const std::vector<Segment>& segs, size_t lo, size_t hi) {
  if (hi - lo == 1) return {Insn(BPF_RET | BPF_K, segs[lo].value)};
  const size_t mid = lo + (hi - lo) / 2;
  std::vector<sock_filter> left = Search(segs, lo, mid);
  std::vector<sock_filter> right = Search(segs, mid, hi);
  std::vector<sock_filter> out;
  out.reserve(left.size() + right.size() + 2);
  const uint32_t pivot = segs[mid].start;
  if (left.size() <= 255) {
    out.push_back(Insn(BPF_JMP | BPF_JGE | BPF_K, pivot, static_cast<uint8_t>(left.size()), 0));
  } else {
    out.push_back(Insn(BPF_JMP | BPF_JGE | BPF_K, pivot, 0, 1));
    out.push_back(Insn(BPF_JMP | BPF_JA, static_cast<uint32_t>(left.size())));
  }
  out.insert(out.end(), left.begin(), left.end());
  out.insert(out.end(), right.begin(), right.end());
  return out;
}

}  // namespace

std::vector<sock_filter> BuildSteeringProgram(const std::vector<QpnRange>& ranges) {
  const std::vector<Segment> segs = Tile(ranges);
  std::vector<sock_filter> prog = {
      // A datagram too short to hold DestQP would fail the load below, which ends a cBPF program
      // with 0 -- slot 0. Send it to the hash fallback instead.
      Insn(BPF_LD | BPF_W | BPF_LEN, 0),
      Insn(BPF_JMP | BPF_JGE | BPF_K, kDestQpWordOffset + 4, 1, 0),
      Insn(BPF_RET | BPF_K, kSteerFallback),
      Insn(BPF_LD | BPF_W | BPF_ABS, kDestQpWordOffset),  // network order, as the BTH
      Insn(BPF_ALU | BPF_AND | BPF_K, kQpnMask),
  };
  std::vector<sock_filter> search = Search(segs, 0, segs.size());
  prog.insert(prog.end(), search.begin(), search.end());
  return prog;
}

}  // namespace softverbs::fabric::wire
