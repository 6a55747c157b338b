#include "fabric/host/peer_process.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "base/log.h"

namespace softverbs::fabric {
namespace {

// Debian 12's glibc declares these without C linkage in C++; the system calls are what they wrap.
int PidfdOpen(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }
int PidfdGetfd(int pidfd, int fd) { return static_cast<int>(syscall(SYS_pidfd_getfd, pidfd, fd, 0)); }

// Kernels before 5.3 / 5.6, container seccomp profiles older than 2020 and tools such as
// valgrind have no pidfd system calls (ENOSYS, or EPERM from seccomp). Without them liveness
// comes from the token (pid and start time) and a peer's fd is opened through /proc, which
// needs the same ptrace access as process_vm_writev (proc(5), /proc/pid/fd).
bool PidfdMissing(int error) { return error == ENOSYS || error == EPERM; }

// Only a file reopens there as the same object: an anonymous inode (an eventfd) opens as a new,
// unrelated file, so it is refused (ENOSYS: it needs pidfd_getfd).
int ProcFdOpen(pid_t pid, int remote_fd) {
  const std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(remote_fd);
  char target[64] = {};
  if (readlink(path.c_str(), target, sizeof(target) - 1) < 0) return -1;
  if (strncmp(target, "anon_inode:", 11) == 0) {
    errno = ENOSYS;
    return -1;
  }
  return open(path.c_str(), O_RDWR | O_CLOEXEC);
}

}  // namespace

Result<std::shared_ptr<PeerProcess>> PeerProcess::Open(ProcessToken token, Pidfd use) {
  if (token.empty()) return Status(ESRCH, "no such process");
  const bool self = token == ProcessToken::Self();
  UniqueFd pidfd(use == Pidfd::kNever ? (errno = ENOSYS, -1) : PidfdOpen(token.pid()));
  if (!pidfd.valid() && !PidfdMissing(errno))
    return Status(errno, "pidfd_open(" + std::to_string(token.pid()) + "): " + strerror(errno));
  // The pidfd may name a newer process with the same pid: the token's start time decides.
  if (!token.IsAlive()) return Status(ESRCH, "process " + std::to_string(token.pid()) + " is gone");
  return std::shared_ptr<PeerProcess>(new PeerProcess(token, self, std::move(pidfd)));
}

bool PeerProcess::IsAlive() const {
  if (self_) return true;
  if (!pidfd_.valid()) return token_.IsAlive();
  pollfd p{pidfd_.get(), POLLIN, 0};
  return poll(&p, 1, 0) == 0;  // a pidfd becomes readable when its process exits
}

Status PeerProcess::Transfer(bool write, uint64_t remote, const iovec* local, size_t count) {
  size_t total = 0;
  for (size_t i = 0; i < count; ++i) total += local[i].iov_len;
  if (self_) {
    // Our own memory: the kernel's bounds check is replaced by the caller's (the MR table).
    uint8_t* r = reinterpret_cast<uint8_t*>(remote);
    for (size_t i = 0; i < count; ++i) {
      if (write)
        memcpy(r, local[i].iov_base, local[i].iov_len);
      else
        memcpy(local[i].iov_base, r, local[i].iov_len);
      r += local[i].iov_len;
    }
    return Status::Ok();
  }
  size_t done = 0;
  size_t first = 0;      // the first local iovec not fully transferred
  size_t skip = 0;       // bytes of it already transferred
  while (done < total) {
    iovec lv[64];
    size_t n = 0;
    for (size_t i = first; i < count && n < 64; ++i, ++n) {
      lv[n] = local[i];
      if (i == first) {
        lv[n].iov_base = static_cast<uint8_t*>(lv[n].iov_base) + skip;
        lv[n].iov_len -= skip;
      }
    }
    size_t chunk = 0;
    for (size_t i = 0; i < n; ++i) chunk += lv[i].iov_len;
    iovec rv{reinterpret_cast<void*>(remote + done), chunk};
    ssize_t got = write ? process_vm_writev(token_.pid(), lv, n, &rv, 1, 0)
                        : process_vm_readv(token_.pid(), lv, n, &rv, 1, 0);
    if (got < 0) {
      int e = errno;
      if (e == EINTR) continue;
      if (e == ESRCH || !IsAlive()) return Status(ESRCH, "process " + std::to_string(token_.pid()) + " is gone");
      if (e == EPERM)
        return Status(EPERM, "the kernel forbids access to process " + std::to_string(token_.pid()) +
                                 " (ptrace permission; is it another user's, or not dumpable?)");
      return Status(e, std::string(write ? "process_vm_writev" : "process_vm_readv") + ": " + strerror(e));
    }
    // A partial transfer stops at the first remote page that is not mapped.
    if (got == 0) return Status(EFAULT, "the remote address range is not mapped in the peer");
    done += static_cast<size_t>(got);
    size_t advance = static_cast<size_t>(got) + skip;
    while (first < count && advance >= local[first].iov_len) advance -= local[first++].iov_len;
    skip = advance;
  }
  return Status::Ok();
}

Status PeerProcess::Write(uint64_t remote, const iovec* local, size_t count) {
  return Transfer(true, remote, local, count);
}

Status PeerProcess::Read(uint64_t remote, const iovec* local, size_t count) {
  return Transfer(false, remote, local, count);
}

Status PeerProcess::TransferV(bool write, const iovec* local, size_t local_count, const iovec* remote,
                              size_t remote_count) {
  size_t total = 0;
  for (size_t i = 0; i < remote_count; ++i) total += remote[i].iov_len;
  if (self_) {
    // Walk both lists in step, copying the overlap of the current pieces.
    size_t li = 0, lo = 0, ri = 0, ro = 0;
    while (li < local_count && ri < remote_count) {
      size_t n = std::min(local[li].iov_len - lo, remote[ri].iov_len - ro);
      auto* l = static_cast<uint8_t*>(local[li].iov_base) + lo;
      auto* r = static_cast<uint8_t*>(remote[ri].iov_base) + ro;
      if (write)
        memmove(r, l, n);
      else
        memmove(l, r, n);
      lo += n;
      ro += n;
      if (lo == local[li].iov_len) ++li, lo = 0;
      if (ro == remote[ri].iov_len) ++ri, ro = 0;
    }
    return Status::Ok();
  }
  ssize_t got;
  do {
    got = write ? process_vm_writev(token_.pid(), local, local_count, remote, remote_count, 0)
                : process_vm_readv(token_.pid(), local, local_count, remote, remote_count, 0);
  } while (got < 0 && errno == EINTR);
  if (got < 0) {
    int e = errno;
    if (e == ESRCH || !IsAlive()) return Status(ESRCH, "process " + std::to_string(token_.pid()) + " is gone");
    if (e == EPERM)
      return Status(EPERM, "the kernel forbids access to process " + std::to_string(token_.pid()) +
                               " (ptrace permission; is it another user's, or not dumpable?)");
    return Status(e, std::string(write ? "process_vm_writev" : "process_vm_readv") + ": " + strerror(e));
  }
  // Registered ranges were checked against the key table, so a short transfer means the owner
  // unmapped memory under a live registration.
  if (static_cast<size_t>(got) != total) return Status(EFAULT, "a remote range is not mapped in the peer");
  return Status::Ok();
}

Status PeerProcess::WriteV(const iovec* local, size_t local_count, const iovec* remote, size_t remote_count) {
  return TransferV(true, local, local_count, remote, remote_count);
}

Status PeerProcess::ReadV(const iovec* local, size_t local_count, const iovec* remote, size_t remote_count) {
  return TransferV(false, local, local_count, remote, remote_count);
}

int PeerProcess::ForeignFd(int remote_fd) const {
  return pidfd_.valid() ? PidfdGetfd(pidfd_.get(), remote_fd) : ProcFdOpen(token_.pid(), remote_fd);
}

Result<int> PeerProcess::BorrowFd(int remote_fd, uint64_t tag) {
  std::lock_guard lock(fds_mu_);
  if (auto it = borrowed_.find({remote_fd, tag}); it != borrowed_.end()) return it->second.get();
  // An older incarnation of the same fd number is closed in the peer: drop our copy of it.
  std::erase_if(borrowed_, [remote_fd](const auto& e) { return e.first.first == remote_fd; });
  int fd = self_ ? dup(remote_fd) : ForeignFd(remote_fd);
  if (fd < 0) return Status(errno, std::string("pidfd_getfd: ") + strerror(errno));
  borrowed_.emplace(std::make_pair(remote_fd, tag), UniqueFd(fd));
  return fd;
}

Result<UniqueFd> PeerProcess::CopyFd(int remote_fd) {
  UniqueFd fd(self_ ? fcntl(remote_fd, F_DUPFD_CLOEXEC, 0) : ForeignFd(remote_fd));
  if (!fd.valid()) return Status(errno, std::string("pidfd_getfd: ") + strerror(errno));
  return fd;
}

PeerAccessGrant PeerAccessGrantFor(int ptrace_scope) {
  if (ptrace_scope <= 0) return PeerAccessGrant::kNothingNeeded;
  if (ptrace_scope == 1) return PeerAccessGrant::kAnyProcessOfTheUser;
  return PeerAccessGrant::kImpossible;
}

int YamaPtraceScope(const char* path) {
  UniqueFd fd(open(path, O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return -1;
  char buf[16] = {};
  if (read(fd.get(), buf, sizeof(buf) - 1) <= 0) return -1;
  return atoi(buf);
}

void AllowPeerAccess() {
  // Per process: a Yama exception is not inherited by a child of fork(), which joins anew.
  static std::atomic<pid_t> granted_in{0};
  const pid_t self = getpid();
  if (granted_in.exchange(self) == self) return;
  {
    const int scope = YamaPtraceScope();
    switch (PeerAccessGrantFor(scope)) {
      case PeerAccessGrant::kNothingNeeded:
        break;  // no exception granted: the kernel's same-uid rule is all that applies
      case PeerAccessGrant::kAnyProcessOfTheUser:
        if (prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0) != 0)
          SV_LOG(kError, "softverbs: PR_SET_PTRACER failed (%s): peers cannot reach this process", strerror(errno));
        break;
      case PeerAccessGrant::kImpossible:
        SV_LOG(kError, "softverbs: Yama ptrace_scope is %d: peers need CAP_SYS_PTRACE to reach this process "
               "(process_vm_writev, pidfd_getfd)", scope);
        break;
    }
  }
}

}  // namespace softverbs::fabric
