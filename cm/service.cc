#include "cm/service.h"

#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <map>
#include <cstring>
#include <random>
#include <vector>

#include "base/log.h"
#include "cm/address.h"
#include "cm/unix_names.h"

namespace softverbs::cm {
namespace {

// The wildcard listeners: IPv4 any, IPv6 any with IPV6_V6ONLY, IPv6 any dual-stack (Linux's
// default, which also takes IPv4 connections).
std::string WildcardKey(const sockaddr* addr, bool v6only) {
  if (addr->sa_family == AF_INET) return "any4";
  return v6only ? "any6" : "anyd";
}

// The base name of (key, port) for this user and host. Other users can compute it (and read
// bound names in /proc/net/unix), so it is only where the search starts: the names actually
// used are base, base-1, base-2, ... (the first not held by another user; see BindService).
std::string BaseName(const std::string& key, uint16_t port) {
  std::string name = "softverbs-cm-" + std::to_string(getuid());
  if (const char* host = getenv("SOFTVERBS_HOST"); host != nullptr && *host != '\0')
    name += std::string("-") + host;
  return name + "-" + key + "-" + std::to_string(port);
}

std::string Alternate(const std::string& base, uint32_t index) {
  return index == 0 ? base : base + "-" + std::to_string(index);
}

sockaddr_un NameFor(const std::string& name, socklen_t* len) {
  sockaddr_un un{};
  un.sun_family = AF_UNIX;
  size_t n = std::min(name.size(), sizeof(un.sun_path) - 1);
  memcpy(un.sun_path + 1, name.data(), n);  // abstract: sun_path[0] == '\0'
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
  return un;
}

sockaddr_un NameFor(const std::string& key, uint16_t port, socklen_t* len) {
  return NameFor(BaseName(key, port), len);
}

using Owners = std::vector<std::pair<std::string, uid_t>>;

// The CM names held in this network namespace and their owners. Without sock_diag (a kernel
// before 5.3), every name reads as ours: the base name is tried and SO_PEERCRED decides, as
// before alternates existed.
Owners HeldNames() {
  auto owners = AbstractNameOwners("softverbs-cm-" + std::to_string(getuid()));
  if (owners.ok()) return std::move(owners.value());
  SV_LOG(kDebug, "rdma_cm: %s; names of other users cannot be told apart", owners.status().rule().c_str());
  return {};
}

// The alternates of `base` that are held now, by index, with their owners' uids.
std::map<uint32_t, uid_t> HeldAlternates(const std::string& base, const Owners& owners) {
  std::map<uint32_t, uid_t> held;
  for (const auto& [name, uid] : owners) {
    if (name == base) {
      held[0] = uid;
    } else if (name.size() > base.size() + 1 && name.compare(0, base.size(), base) == 0 && name[base.size()] == '-' &&
               name.find_first_not_of("0123456789", base.size() + 1) == std::string::npos) {
      held[static_cast<uint32_t>(std::stoul(name.substr(base.size() + 1)))] = uid;
    }
  }
  return held;
}

bool HeldByUs(const std::map<uint32_t, uid_t>& held) {
  for (const auto& [index, uid] : held)
    if (uid == getuid()) return true;
  return false;
}

// Binds `fd` to (key, port): the first alternate nobody holds, unless one is ours already (the
// port is in use). A name squatted by another user costs us one more name, never the port.
Status BindPort(int fd, const std::string& key, uint16_t port) {
  const std::string base = BaseName(key, port);
  socklen_t len;
  sockaddr_un un = NameFor(base, &len);
  if (bind(fd, reinterpret_cast<sockaddr*>(&un), len) == 0) return Status::Ok();
  if (errno != EADDRINUSE) return Status(errno, "port " + std::to_string(port) + " of " + key + ": " + strerror(errno));
  for (int attempt = 0; attempt < 64; ++attempt) {
    auto held = HeldAlternates(base, HeldNames());
    if (held.empty() || HeldByUs(held))
      return Status(EADDRINUSE, "port " + std::to_string(port) + " of " + key + " is in use");
    uint32_t index = 1;
    while (held.count(index)) ++index;
    un = NameFor(Alternate(base, index), &len);
    if (bind(fd, reinterpret_cast<sockaddr*>(&un), len) != 0) {
      if (errno == EADDRINUSE) continue;  // taken meanwhile: look again
      return Status(errno, "port " + std::to_string(port) + " of " + key + ": " + strerror(errno));
    }
    SV_LOG(kWarn, "rdma_bind_addr: port %u of %s is squatted by another user; bound alternate name %u",
           port, key.c_str(), index);
    // Two of ours binding the port at once past a squatter: the lower alternate keeps it.
    held = HeldAlternates(base, HeldNames());
    for (const auto& [other, uid] : held)
      if (other < index && uid == getuid())
        return Status(EADDRINUSE, "port " + std::to_string(port) + " of " + key + " is in use");
    return Status::Ok();
  }
  return Status(EADDRINUSE, "port " + std::to_string(port) + " of " + key + " keeps changing hands");
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
    SV_RETURN_IF_ERROR(BindPort(fd.get(), key, port));
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
    if (!probe.valid() || bind(probe.get(), reinterpret_cast<sockaddr*>(&un), len) == 0 || errno != EADDRINUSE)
      continue;
    // Held: by one of ours, or by a squatter (then only an alternate of ours counts).
    auto held = HeldAlternates(BaseName(key, PortOf(dst)), HeldNames());
    if (held.empty() || HeldByUs(held)) return true;  // empty: sock_diag cannot tell
  }
  return false;
}

bool SameUser(int fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && cred.uid == getuid();
}

Status ConnectService(int fd, const sockaddr* dst) {
  const Owners owners = HeldNames();
  for (const std::string& key : KeysReaching(dst)) {
    const std::string base = BaseName(key, PortOf(dst));
    // Only names our user holds are tried: a name another user holds is not our host's listener,
    // and a connect to it would use up `fd`. Which names are whose comes from the kernel
    // (sock_diag), without connecting anywhere. Without sock_diag: the base name, checked below.
    auto held = HeldAlternates(base, owners);
    if (owners.empty()) held = {{0, getuid()}};
    for (const auto& [index, uid] : held) {
      if (uid != getuid()) {
        SV_LOG(kWarn, "rdma_connect: %s is held by uid %u, not ours: skipped", Alternate(base, index).c_str(), uid);
        continue;
      }
      socklen_t len;
      sockaddr_un un = NameFor(Alternate(base, index), &len);
      if (connect(fd, reinterpret_cast<sockaddr*>(&un), len) == 0) {
        // It changed hands between the look and the connect (ours closed, another user bound it).
        if (SameUser(fd)) return Status::Ok();
        return Status(EPERM, "the listener of " + key + " belongs to another user");
      }
      // A full backlog reads as EAGAIN on a non-blocking SOCK_SEQPACKET connect.
      if (errno != ECONNREFUSED && errno != ENOENT)
        return Status(errno, "cannot reach the listener of " + key + ": " + strerror(errno));
    }
  }
  return Status(ECONNREFUSED, "nothing listens on " + AddressText(dst) + " port " +
                                  std::to_string(PortOf(dst)));
}

}  // namespace softverbs::cm
