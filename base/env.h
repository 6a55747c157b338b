// Environment switches that are on unless set to "0" (SOFTVERBS_PRIVATE_SHARE, SOFTVERBS_PEER_MAP,
// SOFTVERBS_ROUTE: comparison switches, docs/device.md). Each caller reads its switch once and
// keeps the answer (the environment is the process's start-up configuration).
#pragma once

#include <cstdlib>
#include <cstring>

namespace softverbs {

inline bool EnvOnUnlessZero(const char* name) {
  const char* v = getenv(name);
  return v == nullptr || strcmp(v, "0") != 0;
}

}  // namespace softverbs
