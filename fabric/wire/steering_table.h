// Who is in a reuseport group, in the kernel's order, and who owns which QPN.
//
// The kernel keeps a group's sockets in an array: bind() appends, close() moves the last socket
// into the hole (net/core/sock_reuseport.c: reuseport_add_sock, reuseport_detach_sock). A steering
// program returns slot indices, so every member must know that order. The table mirrors it: every
// bind and close of a group socket, and every program attach, happens under the table's lock, and
// the member that did it records the change there before unlocking.
//
// The host layer implements this over the host's shared memory (one table per local IP:port);
// LocalSteeringTable is the in-process implementation for tests and single-process use.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"
#include "fabric/wire/steering_program.h"

namespace softverbs::fabric::wire {

// Names a group member (the host layer: a process incarnation's token). 0 is no member.
using MemberId = uint64_t;
inline constexpr MemberId kNoMember = 0;

class SteeringTable {
 public:
  virtual ~SteeringTable() = default;

  // The group lock: held across every bind and close of a member socket and every attach.
  virtual void Lock() = 0;
  virtual void Unlock() = 0;

  // Lock held. `member`'s socket `fd` has just joined the group by bind(): the kernel appended it.
  virtual Status Joined(MemberId member, int fd) = 0;
  // Lock held. `member`'s socket has just been closed: the kernel moved the last socket into its slot.
  virtual void Left(MemberId member) = 0;
  // Lock held. The QPN ranges with the kernel slot of each range's owner (owners not in the group
  // are left out: their QPNs take the hash fallback and reach someone's Misdelivered hook).
  virtual std::vector<QpnRange> SlotRanges() = 0;
  // Lock held. A descriptor of some member's socket (a duplicate the caller closes), through which
  // the group's program is replaced after a member left; invalid if the group is empty. The host
  // layer borrows it from the member's process (pidfd_getfd), as it borrows eventfds.
  virtual UniqueFd AnyMemberSocket() = 0;

  // Who owns `qpn` now; kNoMember if nobody. Called for every received datagram, without the lock.
  virtual MemberId Owner(uint32_t qpn) const = 0;
};

// RAII over the group lock.
class SteeringLock {
 public:
  explicit SteeringLock(SteeringTable& t) : t_(t) { t_.Lock(); }
  ~SteeringLock() { t_.Unlock(); }
  SteeringLock(const SteeringLock&) = delete;
  SteeringLock& operator=(const SteeringLock&) = delete;

 private:
  SteeringTable& t_;
};

// One process's table: members are UdpPorts of this process (tests, single-process use).
class LocalSteeringTable final : public SteeringTable {
 public:
  // QPNs [first, last] now belong to `member` (replacing any earlier owner of those QPNs); the
  // caller then re-attaches the program (UdpPort::Resteer).
  Status Assign(uint32_t first, uint32_t last, MemberId member);
  void Unassign(uint32_t first, uint32_t last);
  // The kernel order as recorded: members by slot.
  std::vector<MemberId> Order() const;

  void Lock() override { group_mu_.lock(); }
  void Unlock() override { group_mu_.unlock(); }
  Status Joined(MemberId member, int fd) override;
  void Left(MemberId member) override;
  std::vector<QpnRange> SlotRanges() override;
  UniqueFd AnyMemberSocket() override;
  MemberId Owner(uint32_t qpn) const override;

 private:
  struct Owned {
    uint32_t last;
    MemberId member;
  };
  std::mutex group_mu_;
  mutable std::mutex mu_;                // the fields below
  std::vector<std::pair<MemberId, int>> slots_;  // the kernel's socks[] order: member, its socket
  std::map<uint32_t, Owned> owned_;      // first QPN -> [first, last] and its owner, disjoint
};

}  // namespace softverbs::fabric::wire
