#include "cm/service.h"

#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <vector>

#include "cm/address.h"

namespace softverbs::cm {
namespace {

// The wildcard listeners: IPv4 any, IPv6 any with IPV6_V6ONLY, IPv6 any dual-stack (Linux's
// default, which also takes IPv4 connections).
std::string WildcardKey(const sockaddr* addr, bool v6only) {
  if (addr->sa_family == AF_INET) return "any4";
  return v6only ? "any6" : "anyd";
}

sockaddr_un NameFor(const std::string& key, uint16_t port, socklen_t* len) {
  std::string name = "softverbs-cm-" + std::to_string(getuid());
  if (const char* host = getenv("SOFTVERBS_HOST"); host != nullptr && *host != '\0')
    name += std::string("-") + host;
  name += "-" + key + "-" + std::to_string(port);
  sockaddr_un un{};
  un.sun_family = AF_UNIX;
  size_t n = std::min(name.size(), sizeof(un.sun_path) - 1);
  memcpy(un.sun_path + 1, name.data(), n);  // abstract: sun_path[0] == '\0'
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
  return un;
}

std::string KeyFor(const sockaddr* addr, bool v6only) {
  return IsWildcard(addr) ? WildcardKey(addr, v6only) : AddressText(addr);
}

bool IsIpv4Like(const sockaddr* addr) {
  if (addr->sa_family == AF_INET) return true;
  return IN6_IS_ADDR_V4MAPPED(&reinterpret_cast<const sockaddr_in6*>(addr)->sin6_addr);
}

// The listeners a connection to `dst` may reach, most specific first.
std::vector<std::string> KeysReaching(const sockaddr* dst) {
  return {AddressText(dst), IsIpv4Like(dst) ? "any4" : "any6", "anyd"};
}

}  // namespace

Result<UniqueFd> BindService(sockaddr_storage* addr, bool v6only) {
  const sockaddr* sa = reinterpret_cast<const sockaddr*>(addr);
  UniqueFd fd(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return Status(errno, std::string("cannot create a CM socket: ") + strerror(errno));
  std::string key = KeyFor(sa, v6only);
  uint16_t port = PortOf(sa);
  if (port != 0) {
    socklen_t len;
    sockaddr_un un = NameFor(key, port, &len);
    if (bind(fd.get(), reinterpret_cast<sockaddr*>(&un), len) != 0)
      return Status(errno, "port " + std::to_string(port) + " of " + key + " is in use");
    return fd;
  }
  static thread_local std::minstd_rand rng(std::random_device{}());
  for (int attempt = 0; attempt < 1000; ++attempt) {
    port = static_cast<uint16_t>(32768 + rng() % (60999 - 32768 + 1));
    socklen_t len;
    sockaddr_un un = NameFor(key, port, &len);
    if (bind(fd.get(), reinterpret_cast<sockaddr*>(&un), len) == 0) {
      SetPort(addr, port);
      return fd;
    }
    if (errno != EADDRINUSE) return Status(errno, std::string("cannot bind: ") + strerror(errno));
  }
  return Status(EADDRNOTAVAIL, "no free ephemeral port");
}

bool ServiceBound(const sockaddr* dst) {
  for (const std::string& key : KeysReaching(dst)) {
    UniqueFd probe(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
    socklen_t len;
    sockaddr_un un = NameFor(key, PortOf(dst), &len);
    if (probe.valid() && bind(probe.get(), reinterpret_cast<sockaddr*>(&un), len) != 0 &&
        errno == EADDRINUSE)
      return true;
  }
  return false;
}

bool SameUser(int fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && cred.uid == getuid();
}

Status ConnectService(int fd, const sockaddr* dst) {
  for (const std::string& key : KeysReaching(dst)) {
    socklen_t len;
    sockaddr_un un = NameFor(key, PortOf(dst), &len);
    if (connect(fd, reinterpret_cast<sockaddr*>(&un), len) == 0) {
      // A name squatted by another user is not our host's listener.
      if (SameUser(fd)) return Status::Ok();
      return Status(EPERM, "the listener of " + key + " belongs to another user");
    }
    // A full backlog reads as EAGAIN on a non-blocking SOCK_SEQPACKET connect.
    if (errno != ECONNREFUSED && errno != ENOENT)
      return Status(errno, "cannot reach the listener of " + key + ": " + strerror(errno));
  }
  return Status(ECONNREFUSED, "nothing listens on " + AddressText(dst) + " port " +
                                  std::to_string(PortOf(dst)));
}

}  // namespace softverbs::cm
