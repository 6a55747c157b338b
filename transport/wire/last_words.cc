#include "transport/wire/last_words.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "base/log.h"
#include "fabric/packet/ip_udp.h"
#include "transport/wire/qp1.h"

extern char** environ;

namespace softverbs::transport {
namespace {

constexpr uint8_t kV4Mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

Status LastWordsErrno(const char* what) { return Status(errno, std::string(what) + ": " + strerror(errno)); }

bool MappedV4(const uint8_t* gid) { return memcmp(gid, kV4Mapped, sizeof kV4Mapped) == 0; }

// The address of `gid` at `port`, as a socket takes it.
socklen_t SockaddrOf(const uint8_t* gid, uint16_t port, sockaddr_storage* out) {
  *out = {};
  if (MappedV4(gid)) {
    auto* in = reinterpret_cast<sockaddr_in*>(out);
    in->sin_family = AF_INET;
    in->sin_port = htons(port);
    memcpy(&in->sin_addr, gid + 12, 4);
    return sizeof(sockaddr_in);
  }
  auto* in6 = reinterpret_cast<sockaddr_in6*>(out);
  in6->sin6_family = AF_INET6;
  in6->sin6_port = htons(port);
  memcpy(&in6->sin6_addr, gid, 16);
  return sizeof(sockaddr_in6);
}

// The guard program sits next to the library that holds this code (build/lib, or the
// package's private library directory).
std::string GuardNextToThisLibrary() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&GuardNextToThisLibrary), &info) == 0 || info.dli_fname == nullptr) return {};
  std::string path = info.dli_fname;
  const size_t slash = path.rfind('/');
  return (slash == std::string::npos ? std::string(".") : path.substr(0, slash)) + "/softverbs-cm-guard";
}

}  // namespace

Status LastWordsBook::Apply(std::span<const uint8_t> message) {
  LastWordsRecord r;
  if (message.size() != sizeof r) return Invalid("a last-words record is " + std::to_string(sizeof r) + " bytes");
  memcpy(&r, message.data(), sizeof r);
  if (r.magic != LastWordsRecord::kMagic) return Invalid("a last-words record starts with its magic");
  if (r.op == LastWordsRecord::kArm) {
    armed_[r.token] = r;
  } else if (r.op == LastWordsRecord::kDisarm) {
    armed_.erase(r.token);
  } else {
    return Invalid("unknown last-words operation " + std::to_string(r.op));
  }
  return Status::Ok();
}

Status SendLastWords(const LastWordsRecord& r, uint16_t dst_port) {
  if (MappedV4(r.sgid) != MappedV4(r.dgid)) return Invalid("the MAD's GIDs are of two IP versions");
  sockaddr_storage from, to;
  const socklen_t from_len = SockaddrOf(r.sgid, 0, &from);
  const socklen_t to_len = SockaddrOf(r.dgid, dst_port, &to);
  UniqueFd fd(socket(from.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return LastWordsErrno("socket");
  // DF, as every softverbs datagram: the kernel then sends IPv4 ID 0, which the ICRC covers.
  const int df = from.ss_family == AF_INET ? IP_PMTUDISC_DO : IPV6_PMTUDISC_DO;
  if (from.ss_family == AF_INET) (void)setsockopt(fd.get(), IPPROTO_IP, IP_MTU_DISCOVER, &df, sizeof df);
  else (void)setsockopt(fd.get(), IPPROTO_IPV6, IPV6_MTU_DISCOVER, &df, sizeof df);
  if (bind(fd.get(), reinterpret_cast<const sockaddr*>(&from), from_len) != 0) return LastWordsErrno("bind");
  sockaddr_storage bound{};
  socklen_t bound_len = sizeof bound;
  if (getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &bound_len) != 0) return LastWordsErrno("getsockname");
  const uint16_t src_port = ntohs(reinterpret_cast<const sockaddr_in*>(&bound)->sin_port);  // same offset in v6
  fabric::packet::IpUdpInfo flow = MappedV4(r.sgid) ? fabric::packet::IpUdpInfo::V4(r.sgid + 12, r.dgid + 12, src_port)
                                                    : fabric::packet::IpUdpInfo::V6(r.sgid, r.dgid, src_port);
  flow.dst_port = dst_port;
  uint8_t datagram[kMadBytes + 64];
  auto built = BuildMadPacket({r.mad, sizeof r.mad}, 0, flow, datagram);
  if (!built.ok()) return built.status();
  if (sendto(fd.get(), datagram, *built, 0, reinterpret_cast<const sockaddr*>(&to), to_len) < 0) return LastWordsErrno("sendto");
  return Status::Ok();
}

LastWords& LastWords::Get() {
  static LastWords* words = [] {
    auto* w = new LastWords(GuardNextToThisLibrary());  // used until the process ends
    // A child of fork() holds a copy of our end: it must not speak for its parent, nor keep
    // the parent's guard from seeing the parent go.
    pthread_atfork([] { Get().mu_.lock(); }, [] { Get().mu_.unlock(); },
                   [] {
                     LastWords& self = Get();
                     self.fd_.reset();
                     self.failed_ = false;
                     self.mu_.unlock();
                   });
    return w;
  }();
  return *words;
}

LastWords::LastWords(std::string guard) : guard_(std::move(guard)) {}

bool LastWords::started() const {
  std::lock_guard lock(mu_);
  return fd_.valid();
}

Status LastWords::StartLocked() {
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) return LastWordsErrno("socketpair");
  UniqueFd ours(pair[0]), theirs(pair[1]);
  // The guard reads fd 3. dup2 onto itself would keep FD_CLOEXEC: move it away from 3 first.
  if (theirs.get() == 3) theirs = UniqueFd(fcntl(3, F_DUPFD_CLOEXEC, 4));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, theirs.get(), 3);
  // Nothing of the application's output is held open by the guard (a reader waiting for EOF
  // would wait for it); stderr only when the user asked for the log.
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  if (getenv("SOFTVERBS_LOG") == nullptr) posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  // Its own session: the terminal's ^C for the application does not reach it.
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSID);
  char* argv[] = {const_cast<char*>(guard_.c_str()), nullptr};
  pid_t pid = 0;
  const int err = posix_spawn(&pid, guard_.c_str(), &actions, &attr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (err != 0) return Status(err, "cannot start " + guard_ + ": " + strerror(err));
  // The guard forks and its first process exits at once: no child of ours outlives this call.
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  fd_ = std::move(ours);
  return Status::Ok();
}

void LastWords::SendLocked(const LastWordsRecord& r) {
  if (send(fd_.get(), &r, sizeof r, MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof r)) return;
  SV_LOG(kWarn, "rdma_cm: the guard that speaks for this process if it dies is gone (%s): peers on the wire will "
         "learn of its end from timeouts", strerror(errno));
  fd_.reset();
  failed_ = true;
}

void LastWords::Arm(uint64_t token, std::span<const uint8_t, 16> sgid, std::span<const uint8_t, 16> dgid,
                    std::span<const uint8_t> mad) {
  LastWordsRecord r;
  r.op = LastWordsRecord::kArm;
  r.token = token;
  memcpy(r.sgid, sgid.data(), 16);
  memcpy(r.dgid, dgid.data(), 16);
  memcpy(r.mad, mad.data(), std::min(mad.size(), sizeof r.mad));
  std::lock_guard lock(mu_);
  if (failed_) return;
  if (!fd_.valid()) {
    if (Status s = StartLocked(); !s.ok()) {
      failed_ = true;
      SV_LOG(kWarn, "rdma_cm: %s: if this process dies, its peers on the wire get no DREQ for its connections "
             "(they learn of it from timeouts)", s.rule().c_str());
      return;
    }
  }
  SendLocked(r);
}

void LastWords::Disarm(uint64_t token) {
  LastWordsRecord r;
  r.op = LastWordsRecord::kDisarm;
  r.token = token;
  std::lock_guard lock(mu_);
  if (fd_.valid()) SendLocked(r);
}

}  // namespace softverbs::transport
