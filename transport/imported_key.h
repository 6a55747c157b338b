// Local SGEs through an MR imported from another process (ibv_import_mr(3)). On hardware the
// imported lkey names the exporter's pinned pages: the importer's QP gathers from them (SEND,
// WRITE) and writes into them (an RDMA READ's response, an atomic's original value, a receive).
// The key module resolves local SGEs into this process's memory (indirect_key.h, ResolveKey);
// an lkey whose memory is another process's is reached here, through that process's
// fabric::PeerProcess (the one way another process's bytes move), with the key pinned for the
// access as any other access pins it (the exporter's ibv_dereg_mr waits for it).
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <functional>
#include <memory>

#include "base/status.h"
#include "fabric/host/host_directory.h"
#include "fabric/host/host_registry.h"

namespace softverbs::transport {

// The process of a process-table slot, as this process reaches it (LocalProcess::PeerAt; tests
// pass their own).
using ImportedPeerOf = std::function<Result<std::shared_ptr<fabric::Peer>>(uint32_t slot)>;

// An access through an lkey that may be imported: by a QP of `self_slot`'s process on PD `pd`,
// at `addr` of the key's address space (its iova), writing the key's memory or reading it.
struct ImportedAccess {
  uint32_t lkey = 0;
  uint64_t pd = 0;
  uint32_t self_slot = 0;
  uint32_t qp_num = 0;  // for the log line only
  uint64_t addr = 0;
  bool writes = false;
};

// Whether `lkey` is a plain MR of PD `pd` that another process than `self_slot`'s registered
// (the only keys the functions below take; a window, mkey or null MR is never imported).
bool IsImportedKey(fabric::HostRegistry& registry, uint32_t lkey, uint64_t pd, uint32_t self_slot);

// The checks of an access of `length` bytes as they stand now, without a pin (an RDMA READ's or
// atomic's local SGE is checked when posted, written when answered): PD, key kind, LOCAL_WRITE
// for a write, range. The broken rule, or OK.
Status CheckImportedKey(fabric::HostRegistry& registry, const ImportedAccess& a, uint64_t length);

// Writes the bytes of `bytes` to [a.addr, +total) of the key's memory (a.writes), or reads that
// range into them, with the key pinned throughout and checked again under the pin. Errors: the
// key gone (deregistered, or its process's keys withdrawn) or its rules broken, an on-demand page
// missing, the owner dead or its memory unreachable (PeerProcess). IBA 10.6.3.1: each is the
// SGE's local protection error.
Status MoveImportedKey(fabric::HostRegistry& registry, const ImportedPeerOf& peer_of, const ImportedAccess& a,
                       const iovec* bytes, size_t count);

// MoveImportedKey with this process's peers (LocalProcess::PeerAt); false -- and a log line
// naming the key and the rule -- if it fails. `to` / `from` hold `length` bytes.
bool ReadImportedKey(fabric::LocalProcess& local, const ImportedAccess& a, uint64_t length, uint8_t* to);
bool WriteImportedKey(fabric::LocalProcess& local, const ImportedAccess& a, const iovec* from, size_t count);

// The lkeys this process imported (ibv_import_mr(3)) and still holds, counted (an MR may be
// imported twice): an SGE naming one whose MR is gone is named in the log, where any other
// unknown lkey is not.
void NoteImportedKey(uint32_t lkey);
void ForgetImportedKey(uint32_t lkey);
// Logs the refusal of `a` when its lkey is one this process holds an import of and the key no
// longer exists (the exporter deregistered the MR, or its process is gone).
void ExplainMissingImport(fabric::HostRegistry& registry, const ImportedAccess& a, uint64_t length);

// The log line of a refused access of `length` bytes: the QP, the SGE, the key and the rule.
void LogImportedRefusal(const ImportedAccess& a, uint64_t length, const Status& s);

}  // namespace softverbs::transport
