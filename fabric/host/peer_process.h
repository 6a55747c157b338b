// A process of this host reached the way a NIC reaches host memory: by its pid, without its CPU.
// Memory moves with process_vm_readv/writev (one copy, no help from the peer), descriptors are
// borrowed with pidfd_getfd (to wake a peer's completion channel), and liveness comes from a
// pidfd, which a recycled pid can never fool. Where the pidfd system calls are missing (old
// kernels, old container seccomp profiles, valgrind), liveness comes from the token's pid and
// start time and descriptors are opened through /proc/<pid>/fd. The calling process is a peer
// too, reached by memcpy. DESIGN.md section 5, principle 1: the initiator is the NIC.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <map>
#include <utility>

#include "base/status.h"
#include "base/unique_fd.h"
#include "fabric/host/process_token.h"

namespace softverbs::fabric {

class PeerProcess {
 public:
  // kNever: as if the kernel had no pidfd system calls (for tests of that fallback).
  enum class Pidfd { kIfAvailable, kNever };
  // A handle on the process `token` names; ESRCH if that incarnation is gone.
  static Result<std::shared_ptr<PeerProcess>> Open(ProcessToken token, Pidfd use = Pidfd::kIfAvailable);

  ProcessToken token() const { return token_; }
  bool is_self() const { return self_; }
  // False once the process has exited (even if its pid was reused since).
  bool IsAlive() const;
  // Its pidfd (-1 without the pidfd system calls): readable once the process has exited.
  int pidfd() const { return pidfd_.get(); }

  // Copies the bytes of `local` to [remote, remote + total) in the peer / from it into `local`.
  // EFAULT if any remote byte is not mapped in the peer; ESRCH if the peer is gone; EPERM if
  // the kernel forbids access (see AllowPeerAccess).
  Status Write(uint64_t remote, const iovec* local, size_t count);
  Status Read(uint64_t remote, const iovec* local, size_t count);
  // Scatter/gather both sides: the bytes of `local` (in order) to / from the peer's `remote`
  // ranges (in order). Both lists describe the same number of bytes; at most IOV_MAX each.
  Status WriteV(const iovec* local, size_t local_count, const iovec* remote, size_t remote_count);
  Status ReadV(const iovec* local, size_t local_count, const iovec* remote, size_t remote_count);

  // A descriptor of this process that refers to the peer's `remote_fd`, kept for the life of this
  // handle (the peer's eventfds are borrowed once and then signalled directly). `tag` names the
  // incarnation of that fd number (a closed fd's number is reused): a new tag borrows anew.
  Result<int> BorrowFd(int remote_fd, uint64_t tag = 0);
  // A descriptor of this process on the peer's `remote_fd`, not kept by this handle (for a use
  // that outlives it by other means, e.g. a mapping of the file).
  Result<UniqueFd> CopyFd(int remote_fd);

 private:
  PeerProcess(ProcessToken token, bool self, UniqueFd pidfd)
      : token_(token), self_(self), pidfd_(std::move(pidfd)) {}
  int ForeignFd(int remote_fd) const;  // the peer's fd as one of ours (new descriptor, or -1)
  Status Transfer(bool write, uint64_t remote, const iovec* local, size_t count);
  Status TransferV(bool write, const iovec* local, size_t local_count, const iovec* remote, size_t remote_count);

  ProcessToken token_;
  bool self_;
  UniqueFd pidfd_;
  std::mutex fds_mu_;
  std::map<std::pair<int, uint64_t>, UniqueFd> borrowed_;
};

// Lets other processes of this user access this one's memory with process_vm_writev and
// pidfd_getfd, as an RDMA device must be able to. Both need ptrace access to the target
// (ptrace_may_access: same uid), which Yama further restricts:
//   - Yama absent, or ptrace_scope 0: the same uid suffices; nothing is granted.
//   - ptrace_scope 1 (Ubuntu's default): only a descendant or the process named by
//     PR_SET_PTRACER may attach. Yama keeps one such exception per process (a second
//     PR_SET_PTRACER replaces the first), and an RDMA target cannot know its initiators in
//     advance (any process holding its rkey or QP number), so the exception must be
//     PR_SET_PTRACER_ANY: any process *of the same user* (the uid check still applies) may then
//     attach, as it could with scope 0. docs/data-path.md, "Who can reach a process".
//   - ptrace_scope 2 / 3: only CAP_SYS_PTRACE; no grant helps, peers get EPERM (logged).
// Called once when the process joins the host.
void AllowPeerAccess();

// What AllowPeerAccess grants for a Yama ptrace_scope (-1: Yama absent).
enum class PeerAccessGrant { kNothingNeeded, kAnyProcessOfTheUser, kImpossible };
PeerAccessGrant PeerAccessGrantFor(int ptrace_scope);
// Yama's ptrace_scope as read from `path` (/proc/sys/kernel/yama/ptrace_scope), -1 if absent.
int YamaPtraceScope(const char* path = "/proc/sys/kernel/yama/ptrace_scope");

}  // namespace softverbs::fabric
