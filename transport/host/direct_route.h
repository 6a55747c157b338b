// A same-host link's route for one-sided operations kept resolved across work requests (issue 16:
// resolving the target QP, the R_Key and the owner's file per work request cost several times
// the access). It keeps the destination QP as it was found -- its registry entry, its process,
// its endpoint -- and the R_Keys it was reached with: each key's registration as last read
// (HeldKey) and the window of the owner's file it lies in, mapped here.
//
// A work request through it first asks for the cache line it will access (a prefetch: the
// transfer a ping-pong pays anyway overlaps the rest), announces the QP and the key in this
// thread's hazard line (one barrier for both), finds the entry, the process and the key as they
// were, and hands the rest to Responder::ExecuteDirect: the responder's own rules on the live
// endpoint and the key's view, then the copy or the atomic. The rules that do not depend on the
// request -- the QP is the one learned and admits the access in its state, the key is current and grants it -- are checked
// once per route epoch (fabric::HostRegistry::route_epoch, bumped by every change they read):
// a request that reads the epoch they were found under after its announcement trusts them.
// Anything else -- not kept, changed since, a rule broken -- goes the usual way
// (HostTarget::Find, Responder::Execute), which decides, answers and logs; a request it answers
// kAck teaches the route (Learn). Only what the usual way itself reaches by
// memcpy is kept -- another process's plain key in a shared backing (fabric/host/backing_maps.h)
// -- and moved the same way: under the SIGBUS guard when the file may shrink.
//
// Used by one link, under its requester's lock (as PeerHint).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>

#include "fabric/host/backing_maps.h"
#include "fabric/host/host_directory.h"
#include "transport/host/host_target.h"
#include "transport/key_table.h"
#include "transport/request.h"
#include "transport/responder.h"

namespace softverbs::transport {

class DirectRoute {
 public:
  explicit DirectRoute(fabric::LocalProcess& local) : local_(local) {}
  DirectRoute(const DirectRoute&) = delete;  // (its keys point into it: DirectTarget::ctx)
  DirectRoute& operator=(const DirectRoute&) = delete;

  // Executes `r` if the route holds for it; false: nothing was done.
  bool Carry(const DirectRequest& r, Reply* reply);
  // The same for a Request that is such a message (an RC WRITE, READ or atomic of one piece).
  bool Carry(const Request& r, Reply* reply);
  // The kept QP, held for one request the responder executes the usual way (a SEND, a WRITE
  // with immediate, anything Carry did not take): HostTarget::Find's answer without the lookup.
  // Empty when `r` is not for it (or is XRC / UD) or it is no longer as learned.
  std::optional<HostTarget> HeldTarget(const Request& r);
  // `r` was answered kAck the usual way: keeps its destination QP (RC, UC) and, for a WRITE,
  // READ or atomic, its R_Key for the next requests if they qualify (read again now; `hint`
  // lends the peer found for it).
  void Learn(const Request& r, const PeerHint& hint);

  // What the route holds (tests).
  uint32_t qpn() const { return target_.endpoint != nullptr ? target_.qpn : 0; }
  bool Holds(uint32_t rkey) const { return const_cast<DirectRoute*>(this)->Find(rkey) != nullptr; }

 private:
  struct Target {
    uint32_t qpn = 0;
    fabric::QpEntry* entry = nullptr;  // registry entries never move
    uint32_t process_slot = 0;
    fabric::SharedRef block{};
    uint64_t token = 0;  // the owner process's token (a reused slot is another process)
    std::shared_ptr<fabric::Peer> peer;  // keeps its arena (the endpoint) mapped here
    QpEndpoint* endpoint = nullptr;
    uint64_t checked_epoch = ~0ull;  // the route epoch it was last found current under (HeldTarget)
  };
  struct Remote {
    HeldKey key;
    std::shared_ptr<const fabric::BackingWindow> window;  // keeps the mapping
    uint8_t* base = nullptr;  // where the key's first byte (view().addr) is mapped here
    bool guarded = false;     // the file may shrink: copies run under the SIGBUS guard
    // Made once the key is in its slot (Seal): the kept QP's endpoint, this key, its grants;
    // its context is this Remote.
    DirectTarget target;
    const DirectRoute* route = nullptr;
    bool faulted = false;  // the last access: the owner's file no longer held the range
    // The route epoch under which the QP and this key were last found current, and what
    // Responder::DirectAdmitted answered then: trusted while the epoch reads the same.
    uint64_t checked_epoch = kUnchecked;
    uint32_t admitted = 0;
  };
  static constexpr uint64_t kUnchecked = ~0ull;
  static constexpr size_t kKeys = 4;

  Remote* Find(uint32_t rkey);
  // After the QP's announcement and its barrier: the kept QP is still the one learned (its
  // process's liveness apart: Peer::AliveRecently, checked on every request).
  bool TargetCurrent();
  // The accesses the kept QP and `key` admit now (Responder::DirectAdmitted), from what was
  // found under `epoch` if it is the one read after the announcements, else checked anew (and
  // kept with it); 0 when the QP or the key is not current.
  uint32_t Admitted(Remote* key, uint64_t epoch);
  // After the announcements: the request's kept lkey (DirectRequest::local_key), if any, is
  // current, trusted under `epoch` as Admitted's rules.
  static bool LocalCurrent(const DirectRequest& r, uint64_t epoch);
  // A WRITE or READ longer than one ExecuteDirect step, moved a step at a time while the route
  // epoch stays `epoch` (found under it); false once it moved (some steps may be done).
  bool MoveInSteps(const Remote& key, uint32_t admitted, uint64_t epoch, const DirectRequest& r, Reply* reply);
  bool LearnTarget(uint32_t qpn, const PeerHint& hint);
  // The registration `rkey` names and its window, if it qualifies; false otherwise.
  bool LearnKey(uint32_t rkey, Remote* out);
  // `key`, now in its slot, gets its DirectTarget (pointing into itself).
  void Seal(Remote* key);
  // DirectTarget::move and ::atomic (the word under HostTarget::AtomicStripe).
  static bool Move(const void* ctx, bool write, uint8_t* at, void* local, size_t n);
  static bool Atomic(const void* ctx, uint64_t va, uint64_t* word, uint64_t (*op)(uint64_t, const void*),
                     const void* arg, uint64_t* before);
  // A guarded access faulted: said, and the window dropped here and from the cache.
  void Faulted(const DirectRequest& r, Remote* key);

  fabric::LocalProcess& local_;
  Target target_;
  std::array<Remote, kKeys> keys_;
  size_t next_ = 0;  // the entry the next key replaces
  size_t last_ = 0;  // the entry Find found last
  // An R_Key found not to qualify, as it was then: not read again until it changes.
  HeldKey refused_;
  uint32_t own_qpn_ = 0;  // the last destination found to be a QP of this process
};

}  // namespace softverbs::transport
