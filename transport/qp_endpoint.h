// A QP as its peers see it: the shared block a sender reads to deliver to this QP (state, type,
// Q_Key, PD, access, where its receive queue and receive CQ are). It lives in the owner's arena;
// the host registry's QP table maps the QP number to it (fabric::QpEntry). The owner writes it
// on create and modify; a sender that finds a responder-side error marks it (remote_error) and
// the owner moves the QP to ERR on its next call.
#pragma once

#include <atomic>
#include <cstdint>

#include "fabric/host/shared_arena.h"

namespace softverbs::transport {

struct QpEndpoint {
  std::atomic<uint32_t> state;  // enum ibv_qp_state value
  uint32_t qp_num;
  uint32_t type;                // enum ibv_qp_type value
  uint32_t qkey;
  uint32_t access;              // qp_access_flags (remote access it grants)
  uint32_t dest_qp_num;         // RC/UC: the connected peer
  uint32_t mtu;                 // path MTU in bytes (RC/UC)
  uint32_t max_dest_rd_atomic;
  uint32_t min_rnr_timer;       // the RNR delay this QP asks senders to wait (IBA 9.7.5.2.8)
  uint64_t pd;                  // host-unique PD handle
  fabric::SharedRef recv_cq;    // CqRing in the owner's arena
  fabric::SharedRef recv_queue; // RecvRing of the QP's RQ or of its SRQ
  uint32_t has_srq;
  uint32_t block_self_mcast_lb;
  uint8_t sgid[16];             // the GID the QP's address vector sends from (RoCE source)
  std::atomic<uint32_t> remote_error;  // an initiator hit a responder error that moves this QP to ERR
  int32_t async_fd;                    // the owner context's async event fd, signalled with remote_error
  uint64_t async_tag;                  // names this incarnation of async_fd
  // DC (transport/dc_access.h): this QP is a DCT, reachable only by DCIs presenting its key.
  uint32_t dct;
  uint64_t dc_access_key;
  // Initiators working on this QP right now: its owner destroys it only once they are done, so
  // no delivery lands in memory the application has freed after ibv_destroy_qp returned. On a
  // line of its own: every initiator writes it, and the owner reads the fields above on every
  // post (remote_error).
  alignas(64) std::atomic<uint32_t> users;
};

}  // namespace softverbs::transport
