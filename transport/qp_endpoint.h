// A QP as its peers see it: the shared block a sender reads to deliver to this QP (state, type,
// Q_Key, PD, access, where its receive queue and receive CQ are). It lives in the owner's arena;
// the host registry's QP table maps the QP number to it (fabric::QpEntry). The owner writes it
// on create and modify; a sender that finds a responder-side error marks it (remote_error) and
// the owner moves the QP to ERR on its next call.
#pragma once

#include <atomic>
#include <cstdint>

#include "fabric/host/pin_line.h"
#include "fabric/host/robust_mutex.h"
#include "fabric/host/shared_arena.h"
#include "transport/recv_queue.h"

namespace softverbs::transport {

// The responder's packet sequence on the wire (transport/wire/packet_responder.h): the PSN it
// expects and the message in progress. In the endpoint, under its lock, because the packets of a
// QP may be taken by any process of the host (docs/wire.md).
// A READ or atomic the RC responder executed, kept to answer a duplicate of it (IBA 9.7.5.1.1:
// a READ is executed again -- its response resent -- an atomic is not: its result is replayed).
struct WireResource {
  uint32_t kind;     // 0: none, 1: READ, 2: atomic
  uint32_t psn;      // the request's PSN
  uint32_t packets;  // PSNs it takes
  uint32_t rkey;
  uint64_t va;
  uint64_t length;
  uint64_t original;  // atomic: the value returned
};
inline constexpr uint32_t kWireResources = 16;

// What a QP's responder saw on the wire (`softverbs status`): counted by whichever process of
// the host received the packet, read by the QP's owner without the lock.
struct WireResponderCounters {
  std::atomic<uint64_t> packets{0};          // RC/UC requests that reached the QP
  std::atomic<uint64_t> out_of_sequence{0};  // RC: a PSN ahead of the one expected (a gap)
  std::atomic<uint64_t> duplicates{0};       // RC: a PSN already received (a retransmission)
  std::atomic<uint64_t> acks{0};             // RC: ACKs made (before coalescing; atomic ACKs not counted)
  std::atomic<uint64_t> naks_sequence{0};    // RC: PSN sequence error NAKs sent
  std::atomic<uint64_t> naks_rnr{0};         // RC: RNR NAKs sent (no receive WQE)
  std::atomic<uint64_t> naks_error{0};       // RC: invalid request / remote access / operational
  std::atomic<uint64_t> dropped{0};          // UC: messages lost to a PSN gap (IBA 9.8.3)
};

// WireReceive::message: the message in progress (0: between messages).
inline constexpr uint32_t kSendInProgress = 1, kWriteInProgress = 2;

// How a SEND arriving in packets at a QP on a TM SRQ completes (Responder::BeginReceive decides
// at its first packet, from the TMH): kNone (no TM SRQ, or a message shorter than a TMH), a
// matched tag (its bytes after the TMH land in the tag's buffer), a matched RNDV left to the
// application (mlx5's software rendezvous), a matched RNDV whose READ this QP's owner issues
// (kRndvRead: nothing of the message lands, transport/rendezvous.h), unexpected, or NO_TAG.
struct ReceiveTm {
  enum : uint32_t { kNone = 0, kMatched = 1, kRndvSoftware = 2, kUnexpected = 3, kNoTag = 4, kRndvRead = 5 };
  uint32_t mode;
  uint32_t app_ctx;
  uint64_t tag;
  uint32_t sync_req;  // an unexpected receive asks for IBV_OPS_TM_SYNC (IBV_WC_TM_SYNC_REQ)
  uint32_t rvh_rkey;  // kRndvRead: the RVH (ibv_rvh) of the message's first packet
  uint64_t rvh_va;
  uint32_t rvh_len;
  uint32_t reserved;
  // Bytes of the message before its payload lands (the TMH of a matched message).
  uint64_t skip() const { return mode == kMatched || mode == kRndvSoftware ? 16 : 0; }
};

struct WireReceive {
  fabric::RobustMutex lock;
  WireResponderCounters counters;
  uint32_t msn;          // RC: messages completed (the AETH's MSN, IBA 9.7.5.1.2)
  uint32_t nak_sent;     // RC: a sequence NAK went out for the current gap (sent once, as rxe)
  uint32_t next_resource;
  WireResource resource[kWireResources];
  uint32_t epsn;         // the next PSN expected (IBA 9.7.1; rq_psn at RTR)
  uint32_t message;      // 0: between messages; else the opcode's operation in progress
  uint64_t offset;       // bytes of the message placed so far
  uint64_t va;           // WRITE: RETH's virtual address...
  uint32_t rkey;         // ...R_Key...
  uint32_t dma_length;   // ...and DMA length, from the FIRST packet
  uint32_t wqe_held;     // SEND: `wqe` was taken for the message in progress (or is kept for
                         // the next one after UC dropped a message: IBA 9.8.3, as rxe does)
  TakenWqe wqe;
  ReceiveTm tm;          // RC SEND: how `wqe` completes when it came through a TM SRQ
};

// A context holding an ibv_open_qp handle of an XRC_RECV QP: told of the QP's errors through
// its async event fd, as the kernel reports a shared QP's events to every handle.
struct XrcOpener {
  std::atomic<uint32_t> process;  // 0: free; kXrcOpenerClaimed: being written; else slot + 1
  int32_t async_fd;
  uint64_t async_tag;
};
inline constexpr uint32_t kXrcOpeners = 8;
inline constexpr uint32_t kXrcOpenerClaimed = ~0u;

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
  // XRC (IBA annex A14): the domain (core::XrcdId) of an XRC_RECV QP or of an XRC SRQ's receive
  // endpoint; a message reaches an SRQ only through a target QP of the same domain. xrc_view
  // marks the view a responder works on for one XRC message (transport/host/xrc_target.h).
  uint64_t xrcd_dev;
  uint64_t xrcd_ino;
  uint32_t xrc_view;
  std::atomic<uint32_t> xrc_errors;         // XRC_RECV: responder errors so far
  XrcOpener xrc_openers[kXrcOpeners];       // XRC_RECV: the ibv_open_qp handles to tell
  // XRC_RECV: its attributes (a core::QpAttributes, opaque here), which every handle of the QP
  // modifies and queries from any process, under xrc_lock; `state` above is its state.
  fabric::RobustMutex xrc_lock;
  alignas(8) uint8_t xrc_attributes[256];
  WireReceive wire;
  // Initiators working on this QP right now, counted per process (fabric/host/pin_line.h): its
  // owner destroys it only once the live ones are done, so no delivery lands in memory the
  // application has freed after ibv_destroy_qp returned, and drops those of processes that died
  // at once. On a line of its own: every initiator writes it, and the owner reads the fields
  // above on every post (remote_error).
  fabric::PinLine users;
};

}  // namespace softverbs::transport
