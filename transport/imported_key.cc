#include "transport/imported_key.h"

#include <sys/uio.h>

#include <cstring>

#include "base/log.h"
#include "fabric/host/process_token.h"
#include "transport/key_table.h"

namespace softverbs::transport {

bool ReadImportedKey(fabric::HostRegistry& registry, uint32_t lkey, uint64_t pd, uint32_t self_slot, uint64_t addr,
                     uint64_t length, uint8_t* to) {
  // Pinned while read: the exporter's ibv_dereg_mr waits for this access, as for any other.
  KeyPin pin = KeyPin::Acquire(registry, lkey);
  if (!pin) return false;
  const KeyView& k = pin.view();
  if (k.owner == self_slot || k.pd != pd || k.indirect() || k.window() || k.null_key()) return false;
  if (!KeyCovers(k, addr, length)) return false;
  const uint64_t host = k.addr + (addr - k.iova);
  if (!OnDemandPresent(registry, k, host, length, false)) return false;
  const fabric::ProcessToken owner(registry.processes().slot(k.owner).owner.load(std::memory_order_acquire));
  if (owner.empty()) return false;
  for (uint64_t done = 0; done < length;) {
    iovec local{to + done, length - done};
    iovec remote{reinterpret_cast<void*>(host + done), length - done};
    const ssize_t n = process_vm_readv(owner.pid(), &local, 1, &remote, 1, 0);
    if (n <= 0) {
      SV_LOG(kError, "lkey 0x%x (imported, ibv_import_mr): reading [0x%llx, +%llu) of pid %d failed: %s", lkey,
             static_cast<unsigned long long>(host + done), static_cast<unsigned long long>(length - done), owner.pid(),
             n < 0 ? strerror(errno) : "nothing read");
      return false;
    }
    done += static_cast<uint64_t>(n);
  }
  // The pid may have been reused by a process that is not the owner (the owner died mid-read).
  return fabric::ProcessToken::Of(owner.pid()) == owner;
}

}  // namespace softverbs::transport
