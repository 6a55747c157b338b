#include "fabric/wire/port_conflict.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace softverbs::fabric::wire {
namespace {

struct Holder {
  bool found = false;
  unsigned long uid = 0;
  unsigned long inode = 0;
};

// The most telling socket on `port` in /proc/net/udp and udp6: a kernel socket (rdma_rxe's tunnel
// socket has no file, hence inode 0), else another user's, else any (this user's own members are
// there too, so they come last).
int Rank(const Holder& h) { return !h.found ? 0 : h.inode == 0 ? 3 : h.uid != geteuid() ? 2 : 1; }

void Scan(const char* table, uint16_t port, Holder& best) {
  std::ifstream in(table);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string slot, local, remote, state, queues, timer, retr;
    Holder h;
    unsigned long timeout = 0;
    if (!(f >> slot >> local >> remote >> state >> queues >> timer >> retr >> h.uid >> timeout >> h.inode)) continue;
    const size_t colon = local.rfind(':');
    if (colon == std::string::npos || strtoul(local.c_str() + colon + 1, nullptr, 16) != port) continue;
    h.found = true;
    if (Rank(h) > Rank(best)) best = h;
  }
}

}  // namespace

Status PortTakenStatus(const UdpAddress& local) {
  const std::string where = "bind(" + local.ToString() + ")";
  Holder h;
  Scan("/proc/net/udp", local.port(), h);
  Scan("/proc/net/udp6", local.port(), h);
  std::string who;
  if (!h.found) {
    who = "a socket this user cannot share (not visible in this network namespace's /proc/net/udp)";
  } else if (h.inode == 0) {
    who = "a kernel socket -- most likely rdma_rxe's tunnel socket (an rxe link in this network namespace: "
          "see `rdma link show`; delete it or run softverbs on another IP or namespace)";
  } else if (h.uid != geteuid()) {
    who = "a socket of uid " + std::to_string(h.uid) +
          ": a reuseport group belongs to one user (udp_lib_lport_inuse shares a port only between "
          "SO_REUSEPORT sockets of the same uid), so another user's softverbs already serves this IP";
  } else {
    who = "a socket of this user bound without SO_REUSEPORT (another program, not a softverbs group member)";
  }
  return Status(EADDRINUSE, where + ": UDP port " + std::to_string(local.port()) + " is taken by " + who);
}

}  // namespace softverbs::fabric::wire
