// Who holds an abstract AF_UNIX name: asked of the kernel (sock_diag, UNIX_DIAG_UID, Linux 5.3+)
// without connecting to it, so a name another user holds can be passed over before anything is
// sent to, or learnt by, its holder (docs/cm.md, "Other users").
#pragma once

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "base/status.h"

namespace softverbs::cm {

// The abstract names (without the leading NUL) bound in this network namespace that start with
// `prefix`, with the uid of each one's socket. ENOSYS-like failures when sock_diag is absent.
Result<std::vector<std::pair<std::string, uid_t>>> AbstractNameOwners(const std::string& prefix);

}  // namespace softverbs::cm
