#include "core/ah.h"

#include "core/context.h"
#include "core/device_limits.h"

namespace softverbs::core {

Status CheckRoceAddressVector(const AddressVector& av, uint64_t valid_gids, bool allow_port0) {
  using L = DeviceLimits;
  auto num = [](unsigned v) { return std::to_string(v); };
  // RoCE addresses a peer by GID only; the GRH carries it (IBA annex A16/A17).
  if (!av.is_global) return Invalid("RoCE requires a GRH: ah_attr.is_global must be 1");
  if (av.port_num > L::kPortCount || (av.port_num == 0 && !allow_port0))
    return Invalid("ah_attr.port_num " + num(av.port_num) + " does not exist: softverbs0 has " +
                   num(L::kPortCount) + " port");
  if (av.sgid_index >= L::kGidTableLen)
    return Invalid("ah_attr.grh.sgid_index " + num(av.sgid_index) + " is outside the GID table of " +
                   num(L::kGidTableLen) + " entries");
  if (!(valid_gids >> av.sgid_index & 1))
    return Invalid("ah_attr.grh.sgid_index " + num(av.sgid_index) + " is an empty GID table entry");
  // enum ibv_rate: 0 (IBV_RATE_MAX) and 2..24 (IBV_RATE_1200_GBPS); 1 is not a rate.
  if (av.static_rate == 1 || av.static_rate > 24)
    return Invalid("ah_attr.static_rate " + num(av.static_rate) + " is not a valid enum ibv_rate");
  if (av.dgid == Gid{}) return Invalid("ah_attr.grh.dgid is zero");
  return Status::Ok();
}

Result<std::unique_ptr<Ah>> Ah::Create(Pd& pd, const AddressVector& av) {
  const GidTable gids = pd.context().gids();
  SV_RETURN_IF_ERROR(CheckRoceAddressVector(av, gids.valid_mask(), false));
  auto quota = QuotaHold::Take(QuotaKind::kAh);
  if (!quota.ok()) return quota.status();
  pd.users().Acquire();
  return std::unique_ptr<Ah>(
      new Ah(pd, av, pd.context().NewHandle(), gids.Find(av.dgid) >= 0, std::move(quota.value())));
}

}  // namespace softverbs::core
