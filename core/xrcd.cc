#include "core/xrcd.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <atomic>
#include <string>

#include "core/context.h"
#include "fabric/host/host_directory.h"
#include "fabric/host/process_token.h"
#include "fabric/host/token_lock.h"

namespace softverbs::core {
namespace {

static_assert(fabric::kAnonymousXrcd == ~0ull);

// Whether a live handle of domain `id` is open on this host (under the registry's XRCD lock).
bool DomainExists(fabric::HostRegistry& registry, const XrcdId& id) {
  fabric::SlotTable& t = registry.xrcds();
  for (uint32_t i = 0; i < t.extent(); ++i) {
    fabric::HostSlot& slot = t.slot(i);
    const uint64_t owner = slot.owner.load(std::memory_order_acquire);
    if (owner == 0) continue;
    auto& e = fabric::EntryOf<fabric::XrcdEntry>(slot);
    if (e.ready.load(std::memory_order_acquire) == 0 || e.dev.load() != id.dev || e.ino.load() != id.ino) continue;
    if (fabric::ProcessToken(owner).IsAlive()) return true;
  }
  return false;
}

}  // namespace

XrcdHold::~XrcdHold() {
  fabric::HostSlot& slot = context_.registry().xrcds().slot(slot_);
  fabric::EntryOf<fabric::XrcdEntry>(slot).ready.store(0, std::memory_order_release);
  context_.registry().xrcds().Free(slot_, fabric::ProcessToken::Self());
}

Result<std::unique_ptr<Xrcd>> Xrcd::Open(Context& context, int fd, int oflags) {
  XrcdId id;
  fabric::HostRegistry& registry = context.registry();
  // A lock word of the registry: two processes opening the same file with O_CREAT | O_EXCL
  // must not both create the domain.
  fabric::TokenLock lock(registry.xrcd_lock(), fabric::ProcessToken::Self());
  if (fd == -1) {
    static std::atomic<uint32_t> next{1};
    id = {kAnonymous, static_cast<uint64_t>(context.local().slot()) << 32 | next.fetch_add(1)};
  } else {
    struct stat st;
    if (fstat(fd, &st) != 0) return Status(EBADF, "fd " + std::to_string(fd) + " is not an open file descriptor");
    id = {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
    const bool exists = DomainExists(registry, id);
    // ib_uverbs_open_xrcd: no domain for the inode and no O_CREAT is EAGAIN; a domain and O_EXCL
    // is EINVAL.
    if (!exists && !(oflags & O_CREAT))
      return Status(EAGAIN, "no XRC domain is open for this file and oflags lacks O_CREAT");
    if (exists && (oflags & O_EXCL))
      return Status(EINVAL, "an XRC domain is already open for this file and oflags has O_EXCL");
  }
  auto slot = registry.xrcds().Allocate(fabric::ProcessToken::Self());
  if (!slot.ok())
    return Status(ENOMEM, "no XRC domain handle left on this host (" + slot.status().rule() + ")");
  auto& e = fabric::EntryOf<fabric::XrcdEntry>(registry.xrcds().slot(*slot));
  e.dev.store(id.dev);
  e.ino.store(id.ino);
  e.ready.store(1, std::memory_order_release);
  return std::unique_ptr<Xrcd>(new Xrcd(std::make_shared<XrcdHold>(context, *slot, id)));
}

Status Xrcd::CheckClose() const {
  if (!from_file() && hold_->users().count() > 0)
    return Busy("the XRC domain still has " + std::to_string(hold_->users().count()) +
                " SRQ(s) or QP(s), and without a file it ends with this handle");
  return Status::Ok();
}

}  // namespace softverbs::core
