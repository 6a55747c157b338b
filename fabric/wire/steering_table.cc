#include "fabric/wire/steering_table.h"

#include <fcntl.h>

#include <algorithm>

#include "base/strings.h"

namespace softverbs::fabric::wire {

Status LocalSteeringTable::Assign(uint32_t first, uint32_t last, MemberId member) {
  if (first > last || last > kQpnMask) return Invalid("QPN range " + Hex(first) + ".." + Hex(last) + " is not within 24 bits");
  if (member == kNoMember) return Invalid("member 0 is no member");
  Unassign(first, last);
  std::lock_guard<std::mutex> l(mu_);
  owned_[first] = Owned{last, member};
  return Status::Ok();
}

void LocalSteeringTable::Unassign(uint32_t first, uint32_t last) {
  std::lock_guard<std::mutex> l(mu_);
  std::map<uint32_t, Owned> keep;
  for (const auto& [f, o] : owned_) {
    if (o.last < first || f > last) {
      keep.emplace(f, o);
      continue;
    }
    // Keep the parts outside [first, last].
    if (f < first) keep.emplace(f, Owned{first - 1, o.member});
    if (o.last > last) keep.emplace(last + 1, Owned{o.last, o.member});
  }
  owned_.swap(keep);
}

std::vector<MemberId> LocalSteeringTable::Order() const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<MemberId> out;
  for (const auto& [m, fd] : slots_) out.push_back(m);
  return out;
}

Status LocalSteeringTable::Joined(MemberId member, int fd) {
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& [m, f] : slots_)
    if (m == member) return Busy("member " + Hex(member) + " is already in the group");
  slots_.emplace_back(member, fd);
  return Status::Ok();
}

void LocalSteeringTable::Left(MemberId member) {
  std::lock_guard<std::mutex> l(mu_);
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].first != member) continue;
    slots_[i] = slots_.back();  // reuseport_detach_sock: socks[i] = socks[--num_socks]
    slots_.pop_back();
    return;
  }
}

std::vector<QpnRange> LocalSteeringTable::SlotRanges() {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<QpnRange> out;
  for (const auto& [first, o] : owned_) {
    auto it = std::find_if(slots_.begin(), slots_.end(), [&](const auto& s) { return s.first == o.member; });
    if (it != slots_.end()) out.push_back({first, o.last, static_cast<uint32_t>(it - slots_.begin())});
  }
  return out;
}

UniqueFd LocalSteeringTable::AnyMemberSocket() {
  std::lock_guard<std::mutex> l(mu_);
  if (slots_.empty()) return UniqueFd();
  return UniqueFd(fcntl(slots_.front().second, F_DUPFD_CLOEXEC, 0));
}

MemberId LocalSteeringTable::Owner(uint32_t qpn) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = owned_.upper_bound(qpn);
  if (it == owned_.begin()) return kNoMember;
  --it;
  return qpn <= it->second.last ? it->second.member : kNoMember;
}

}  // namespace softverbs::fabric::wire
