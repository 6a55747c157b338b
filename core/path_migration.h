// Automatic path migration (APM, IBA 17.2.8): the path migration state of a connected QP and how
// ibv_modify_qp(3) moves it (path_mig_state MIGRATED / REARM / ARMED, IBV_QP_ALT_PATH). Checking
// is pure and comes before anything changes (core/qp_state_machine.h, step f); applying is what
// core/qp.cc does once the whole request was accepted.
//
// The states (IBA 17.2.8): MIGRATED, no alternate path is armed (a QP starts here); REARM, the
// consumer asks for the loaded alternate path to be armed; ARMED, a failure of the primary path
// (the requester's retries exhausted, transport/completer.h) moves the QP to the alternate.
// softverbs0 arms at once: REARM is reported as ARMED right away (a CI passes through REARM
// until both ends of the connection agree; here the alternate path is the requester's own and
// needs no agreement: responses return to the address a request came from).
#pragma once

#include <cstdint>
#include <string>

#include "core/types.h"

namespace softverbs::core {

// What an accepted request does to the path migration state.
enum class MigrationStep : uint8_t {
  kNone,     // nothing (no PATH_MIG_STATE, or MIGRATED while already MIGRATED)
  kArm,      // REARM or ARMED: the loaded alternate path is armed
  kMigrate,  // MIGRATED while ARMED: the consumer forces the migration now
};

// Checks the PATH_MIG_STATE part of a modify request of a QP in migration state `current`;
// `alt_loaded` says whether the QP or the request holds an alternate path. Returns the broken
// rule ("" when none) and sets `step`.
std::string CheckMigration(MigState current, bool alt_loaded, uint32_t mask, MigState requested,
                           MigrationStep* step);

// Whether `a` holds an alternate path (ibv_modify_qp with IBV_QP_ALT_PATH sets alt_port_num,
// which is never 0 once accepted).
inline bool HasAlternatePath(const QpAttributes& a) { return a.alt_port_num != 0; }

// The migration itself (IBA 17.2.8): the alternate path becomes the primary one and the QP is
// MIGRATED. The old primary path is kept as the alternate: a REARM without a new IBV_QP_ALT_PATH
// arms the way back.
void Migrate(QpAttributes& a);

const char* MigStateName(MigState m);

}  // namespace softverbs::core
