// The path migration states of IBA 17.2.8 as ibv_modify_qp(3) drives them. See
// path_migration.h for the contract.
#include "core/path_migration.h"

#include <utility>

namespace softverbs::core {

const char* MigStateName(MigState m) {
  switch (m) {
    case MigState::kMigrated: return "MIGRATED";
    case MigState::kRearm: return "REARM";
    case MigState::kArmed: return "ARMED";
  }
  return "?";
}

std::string CheckMigration(MigState current, bool alt_loaded, uint32_t mask, MigState requested,
                           MigrationStep* step) {
  *step = MigrationStep::kNone;
  if (!(mask & attr::kPathMigState)) return "";
  if (requested > MigState::kArmed)
    return "path_mig_state " + std::to_string(static_cast<uint32_t>(requested)) + " is not an enum ibv_mig_state";
  if (requested == MigState::kMigrated) {
    // IBA 17.2.8: the consumer forces the migration of an armed QP; on a MIGRATED one the value
    // changes nothing (what every QP had before APM existed here).
    if (current == MigState::kArmed) *step = MigrationStep::kMigrate;
    return "";
  }
  // REARM (IBA 11.2.4.2), and ARMED, which mlx5 accepts as well (mlx5_ib's to_mlx5_mig_state
  // maps all three states): both arm the alternate path, which must exist.
  if (!alt_loaded)
    return std::string("path_mig_state ") + MigStateName(requested) +
           " arms the alternate path, but none is loaded (IBV_QP_ALT_PATH, IBA 17.2.8)";
  *step = MigrationStep::kArm;
  return "";
}

void Migrate(QpAttributes& a) {
  std::swap(a.ah_attr, a.alt_ah_attr);
  std::swap(a.port_num, a.alt_port_num);
  std::swap(a.pkey_index, a.alt_pkey_index);
  std::swap(a.timeout, a.alt_timeout);
  a.path_mig_state = MigState::kMigrated;
}

}  // namespace softverbs::core
