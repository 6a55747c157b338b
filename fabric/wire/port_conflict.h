// Why bind() of a group socket failed with EADDRINUSE: who holds the port, from /proc/net/udp{,6}.
#pragma once

#include "base/status.h"
#include "fabric/wire/udp_address.h"

namespace softverbs::fabric::wire {

// The EADDRINUSE Status for `local`: names the holder when /proc shows it (a kernel socket such as
// rdma_rxe's, another user's socket, or one of this user's bound without SO_REUSEPORT).
Status PortTakenStatus(const UdpAddress& local);

}  // namespace softverbs::fabric::wire
