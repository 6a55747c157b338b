// XRC domains (ibv_open_xrcd(3), ibv_close_xrcd; IBA annex A14). A domain is named host-wide by
// the file it was opened through -- the same inode is the same domain, in any process, as the
// kernel keys its XRCDs -- or, opened without a file, by a number of its own. XRC SRQs and
// XRC_RECV QPs record the domain's id: a message reaches an SRQ only through a target QP of the
// same domain.
#pragma once

#include <cstdint>
#include <memory>

#include "base/status.h"
#include "core/pd.h"

namespace softverbs::core {

class Context;

struct XrcdId {
  uint64_t dev = 0;  // st_dev of the file, or fabric::kAnonymousXrcd
  uint64_t ino = 0;  // st_ino of the file, or a host-unique number
  friend bool operator==(const XrcdId&, const XrcdId&) = default;
};

// One open handle's hold on its domain: its host-registry slot (which tells other processes the
// domain exists) lives while the handle or any SRQ or QP made through it does (the kernel's
// xrcd usecnt).
class XrcdHold {
 public:
  XrcdHold(Context& context, uint32_t slot, XrcdId id) : context_(context), slot_(slot), id_(id) {}
  ~XrcdHold();
  XrcdHold(const XrcdHold&) = delete;
  XrcdHold& operator=(const XrcdHold&) = delete;
  const XrcdId& id() const { return id_; }
  UseCount& users() { return users_; }  // SRQs and QPs created (or opened) through the handle

 private:
  Context& context_;
  uint32_t slot_;
  XrcdId id_;
  UseCount users_;
};

class Xrcd {
 public:
  // ibv_open_xrcd: `fd` -1 opens a new domain; otherwise the domain of fd's file, created if
  // none exists and `oflags` has O_CREAT (EAGAIN without it), refused with O_EXCL if one does
  // (EINVAL), as the kernel's ib_uverbs_open_xrcd.
  static Result<std::unique_ptr<Xrcd>> Open(Context& context, int fd, int oflags);

  const XrcdId& id() const { return hold_->id(); }
  bool from_file() const { return id().dev != kAnonymous; }
  std::shared_ptr<XrcdHold> hold() const { return hold_; }
  UseCount& users() { return hold_->users(); }  // SRQs and QPs created through this handle
  // ibv_close_xrcd: a domain without a file ends with its handle, so it must be unused (EBUSY);
  // a file's domain lives on in the SRQs and QPs still using it (the kernel only drops a use).
  Status CheckClose() const;

 private:
  static constexpr uint64_t kAnonymous = ~0ull;
  explicit Xrcd(std::shared_ptr<XrcdHold> hold) : hold_(std::move(hold)) {}
  std::shared_ptr<XrcdHold> hold_;
};

}  // namespace softverbs::core
