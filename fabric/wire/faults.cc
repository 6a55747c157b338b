#include "fabric/wire/faults.h"

#include <algorithm>

namespace softverbs::fabric::wire {
namespace {

// The kinds of draw made for one datagram; each is independent of the others.
enum Kind : uint64_t { kLossDraw, kDupDraw, kReorderDraw, kCorruptDraw, kCorruptByte, kCorruptBit };

constexpr uint64_t kNoQpStream = 1ull << 24;  // datagrams too short to carry a DestQP

}  // namespace

std::optional<uint32_t> DestQpOf(std::span<const uint8_t> p) {
  if (p.size() < 12) return std::nullopt;  // a BTH is 12 bytes (IBA 9.2)
  return (uint32_t{p[5]} << 16) | (uint32_t{p[6]} << 8) | p[7];
}

FaultInjector::FaultInjector(FaultSpec spec) : spec_(std::move(spec)) {
  affects_[0] = spec_.Affects(Direction::kTx);
  affects_[1] = spec_.Affects(Direction::kRx);
}

uint64_t FaultInjector::Draw(uint64_t stream, uint64_t index, uint64_t kind) const {
  return SplitMix64(SplitMix64(SplitMix64(spec_.seed() ^ SplitMix64(stream)) ^ index) ^ kind);
}

bool FaultInjector::Chance(double p, uint64_t stream, uint64_t index, uint64_t kind) const {
  if (p <= 0) return false;
  if (p >= 1) return true;
  // 53 random bits against p scaled to 2^53: exact enough for 0.001%, and the same on every build.
  return static_cast<double>(Draw(stream, index, kind) >> 11) < p * 9007199254740992.0;
}

void FaultInjector::Process(Direction dir, Datagram dg, uint64_t now_ns, std::vector<Datagram>& out) {
  FaultStats& st = stats_[static_cast<int>(dir)];
  ++st.seen;
  const std::optional<uint32_t> qp = DestQpOf(dg.bytes);
  const uint64_t stream = (uint64_t{static_cast<uint8_t>(dir)} << 32) | (qp ? *qp : kNoQpStream);
  const uint64_t index = next_index_[stream]++;
  const FaultSettings f = spec_.Resolve(dir, qp);

  std::vector<Datagram> released;
  CountDown(dir, stream, now_ns, released);  // this datagram is a "later" one for those held before
  if (Chance(f.loss, stream, index, kLossDraw)) {
    ++st.lost;
  } else {
    if (!dg.bytes.empty() && Chance(f.corrupt, stream, index, kCorruptDraw)) {
      // One flipped bit: the ICRC check of the receiver drops the datagram (IBA 7.8).
      const size_t at = Draw(stream, index, kCorruptByte) % dg.bytes.size();
      dg.bytes[at] ^= static_cast<uint8_t>(1u << (Draw(stream, index, kCorruptBit) % 8));
      ++st.corrupted;
    }
    const int copies = Chance(f.dup, stream, index, kDupDraw) ? 2 : 1;
    st.duplicated += copies - 1;
    const bool reorder = Chance(f.reorder, stream, index, kReorderDraw);
    st.reordered += reorder;
    st.delayed += f.delay_ns > 0;
    for (int c = 0; c < copies; ++c) {
      Datagram copy = c + 1 < copies ? dg : std::move(dg);
      if (!reorder && f.delay_ns == 0) {
        out.push_back(std::move(copy));
        continue;
      }
      const uint64_t not_before = now_ns + f.delay_ns;
      held_.push_back(Held{dir, stream, order_++, not_before, reorder ? not_before + f.reorder_max_ns : not_before,
                           reorder ? f.reorder_after : kNoCount, std::move(copy)});
    }
  }
  for (Datagram& r : released) out.push_back(std::move(r));
}

void FaultInjector::CountDown(Direction dir, uint64_t stream, uint64_t now_ns, std::vector<Datagram>& out) {
  for (Held& h : held_) {
    if (h.dir != dir || h.stream != stream || h.remaining == kNoCount) continue;
    if (--h.remaining == 0) {
      h.remaining = kNoCount;
      h.deadline = h.not_before;  // its turn came; it still waits out any configured delay
    }
  }
  ReleaseDue(dir, now_ns, out);
}

void FaultInjector::ReleaseDue(Direction dir, uint64_t now_ns, std::vector<Datagram>& out) {
  std::vector<Held> due;
  auto it = std::stable_partition(held_.begin(), held_.end(),
                                  [&](const Held& h) { return h.dir != dir || h.deadline > now_ns; });
  std::move(it, held_.end(), std::back_inserter(due));
  held_.erase(it, held_.end());
  std::sort(due.begin(), due.end(), [](const Held& a, const Held& b) {
    return a.deadline != b.deadline ? a.deadline < b.deadline : a.order < b.order;
  });
  for (Held& h : due) out.push_back(std::move(h.dg));
}

uint64_t FaultInjector::NextDeadline() const {
  uint64_t next = UINT64_MAX;
  for (const Held& h : held_) next = std::min(next, h.deadline);
  return next;
}

}  // namespace softverbs::fabric::wire
