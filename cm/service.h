// Where identifiers meet: one abstract-namespace AF_UNIX SOCK_SEQPACKET socket per bound
// (address, port), named from (uid, netns via the abstract namespace itself, SOFTVERBS_HOST,
// address, port). Binding the name reserves the port as bind(2) does; a listener listens on it;
// an active identifier connects from it. Abstract names vanish with their socket, so a dead
// process frees its ports and its peers read EOF.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <string>

#include "base/status.h"
#include "base/unique_fd.h"

namespace softverbs::cm {

// Binds a new non-blocking socket to `addr`'s name. Port 0 picks a free ephemeral port
// (32768-60999, Linux's default ip_local_port_range) and writes it into `addr`. `v6only`
// mirrors IPV6_V6ONLY (RDMA_OPTION_ID_AFONLY) for IPv6 wildcards. EADDRINUSE as bind(2).
Result<UniqueFd> BindService(sockaddr_storage* addr, bool v6only);

// Connects `fd` to the listener serving `dst`: the exact address first, then the wildcard
// listeners that cover it. ECONNREFUSED when nothing listens there, EPERM when another user's
// process holds the name (the socket is then connected to it and unusable).
Status ConnectService(int fd, const sockaddr* dst);

// Whether the process at the other end of a connected socket is this user's: abstract names
// have no file mode, so the CM checks SO_PEERCRED itself (DESIGN.md 5.4: the host's state is the
// user's own).
bool SameUser(int fd);

// Whether some identifier holds the port `dst` would reach (bound, perhaps not listening yet):
// probed by binding the names, which fails with EADDRINUSE while they are held.
bool ServiceBound(const sockaddr* dst);

}  // namespace softverbs::cm
