// The bridge from librdmacm.so.1 to QP1 on the wire (docs/cm.md, "Across hosts"). The wire
// fabric lives in libibverbs.so.1 (one copy of the core per process), so the CM agent in
// librdmacm reaches it through this table, exported under the private version
// SOFTVERBS_PRIVATE_1 like the mlx5 provider's (abi/mlx5dv/provider.h); both libraries come
// from one build, so the layout is shared.
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>

// One MAD received on QP1 from GID `sgid` on local GID `dgid` (the wire's receive thread);
// `forwarded`: by another process of the host that received it (forward_mad), not to be
// forwarded again.
typedef void (*SvMadCallback)(void* arg, const uint8_t* mad, size_t length, const uint8_t* sgid,
                              const uint8_t* dgid, int forwarded);

// The CM's lines for the process's status report (transport::Qp1Handler::Report); the string
// stays valid until the next call from the same thread.
typedef const char* (*SvReportCallback)(void* arg);

struct SvQp1Bridge {
  uint32_t size;  // sizeof(SvQp1Bridge) of the libibverbs that filled it
  // Makes `callback` this process's QP1 handler and receives on the context's GIDs (again:
  // idempotent, picks up addresses added since). Returns 0 or an errno.
  int (*attach)(struct ibv_context* context, SvMadCallback callback, void* arg);
  // Sends a 256-byte MAD from QP1 of `sgid` to QP1 of `dgid`. Returns 0 or an errno.
  int (*send_mad)(struct ibv_context* context, const uint8_t* sgid, const uint8_t* dgid, const uint8_t* mad,
                  size_t length);
  // Makes `report` (NULL: none) the source of the CM's lines in `softverbs status`.
  void (*set_reporter)(SvReportCallback report, void* arg);
  // This process's slot in the host registry (unique among the host's live processes), for the
  // CM's comm IDs. Returns 0 or an errno.
  int (*process_slot)(struct ibv_context* context, uint32_t* slot);
  // The MAD to send from `sgid` to QP1 of `dgid` if this process dies before
  // disarm_last_words(token) (transport/wire/last_words.h: a connection's DREQ).
  void (*arm_last_words)(uint64_t token, const uint8_t* sgid, const uint8_t* dgid, const uint8_t* mad, size_t length);
  void (*disarm_last_words)(uint64_t token);
  // Hands a MAD received here to process slot `slot` of the host (UINT32_MAX: every other live
  // process), whose callback gets it with `forwarded` set (WireFabric::ForwardMad). Returns 0 or
  // an errno (EHOSTUNREACH: no live process took it).
  int (*forward_mad)(struct ibv_context* context, uint32_t slot, const uint8_t* sgid, const uint8_t* dgid,
                     const uint8_t* mad, size_t length);
};

extern "C" const SvQp1Bridge* sv_private_qp1_bridge(void);
