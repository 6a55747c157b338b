// rsockets (rsocket(7)): a socket API over RDMA connections. softverbs does not provide it; every
// call returns -1 with errno ENOSYS and logs "rsockets are not provided by softverbs".
#include "abi/rdmacm/refuse.h"

SV_RSOCKET(rsocket, int, int, int, int)
SV_RSOCKET(rbind, int, int, const struct sockaddr*, socklen_t)
SV_RSOCKET(rlisten, int, int, int)
SV_RSOCKET(raccept, int, int, struct sockaddr*, socklen_t*)
SV_RSOCKET(rconnect, int, int, const struct sockaddr*, socklen_t)
SV_RSOCKET(rshutdown, int, int, int)
SV_RSOCKET(rclose, int, int)

SV_RSOCKET(rrecv, ssize_t, int, void*, size_t, int)
SV_RSOCKET(rrecvfrom, ssize_t, int, void*, size_t, int, struct sockaddr*, socklen_t*)
SV_RSOCKET(rrecvmsg, ssize_t, int, struct msghdr*, int)
SV_RSOCKET(rread, ssize_t, int, void*, size_t)
SV_RSOCKET(rreadv, ssize_t, int, const struct iovec*, int)

SV_RSOCKET(rsend, ssize_t, int, const void*, size_t, int)
SV_RSOCKET(rsendto, ssize_t, int, const void*, size_t, int, const struct sockaddr*, socklen_t)
SV_RSOCKET(rsendmsg, ssize_t, int, const struct msghdr*, int)
SV_RSOCKET(rwrite, ssize_t, int, const void*, size_t)
SV_RSOCKET(rwritev, ssize_t, int, const struct iovec*, int)

SV_RSOCKET(rpoll, int, struct pollfd*, nfds_t, int)
SV_RSOCKET(rselect, int, int, fd_set*, fd_set*, fd_set*, struct timeval*)

SV_RSOCKET(rgetpeername, int, int, struct sockaddr*, socklen_t*)
SV_RSOCKET(rgetsockname, int, int, struct sockaddr*, socklen_t*)

SV_RSOCKET(rsetsockopt, int, int, int, int, const void*, socklen_t)
SV_RSOCKET(rgetsockopt, int, int, int, int, void*, socklen_t*)
SV_RSOCKET(rfcntl, int, int, int, ...)

// riomap returns the mapped offset, -1 on error; riowrite returns a size_t byte count, so its
// -1 is SIZE_MAX, as in rdma-core.
SV_RSOCKET(riomap, off_t, int, void*, size_t, int, int, off_t)
SV_RSOCKET(riounmap, int, int, void*, size_t)
SV_RSOCKET(riowrite, size_t, int, const void*, size_t, off_t, int)
