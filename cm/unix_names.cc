#include "cm/unix_names.h"

#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <linux/unix_diag.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/unique_fd.h"

namespace softverbs::cm {
namespace {

// One unix_diag_msg's name and uid, if it has both and the name is abstract with `prefix`.
void Collect(const nlmsghdr* h, const std::string& prefix, std::vector<std::pair<std::string, uid_t>>* out) {
  const auto* m = static_cast<const unix_diag_msg*>(NLMSG_DATA(h));
  int len = static_cast<int>(h->nlmsg_len) - static_cast<int>(NLMSG_LENGTH(sizeof(*m)));
  std::string name;
  bool has_name = false, has_uid = false;
  uid_t uid = 0;
  for (auto* a = reinterpret_cast<const rtattr*>(m + 1); RTA_OK(a, len); a = RTA_NEXT(a, len)) {
    const char* data = static_cast<const char*>(RTA_DATA(a));
    size_t n = RTA_PAYLOAD(a);
    if (a->rta_type == UNIX_DIAG_NAME && n > 1 && data[0] == '\0') {
      name.assign(data + 1, n - 1);
      has_name = true;
    } else if (a->rta_type == UNIX_DIAG_UID && n >= sizeof(uint32_t)) {
      uint32_t u;
      memcpy(&u, data, sizeof(u));
      uid = u;
      has_uid = true;
    }
  }
  if (has_name && has_uid && name.compare(0, prefix.size(), prefix) == 0) out->emplace_back(name, uid);
}

}  // namespace

Result<std::vector<std::pair<std::string, uid_t>>> AbstractNameOwners(const std::string& prefix) {
  UniqueFd fd(socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG));
  if (!fd.valid()) return Status(errno, std::string("sock_diag: ") + strerror(errno));
  struct {
    nlmsghdr h;
    unix_diag_req r;
  } req{};
  req.h.nlmsg_len = sizeof(req);
  req.h.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  req.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  req.r.sdiag_family = AF_UNIX;
  req.r.udiag_states = ~0u;
  req.r.udiag_show = UDIAG_SHOW_NAME | UDIAG_SHOW_UID;
  if (send(fd.get(), &req, sizeof(req), 0) != static_cast<ssize_t>(sizeof(req)))
    return Status(errno, std::string("sock_diag: ") + strerror(errno));
  std::vector<std::pair<std::string, uid_t>> out;
  alignas(nlmsghdr) char buf[32768];
  for (;;) {
    ssize_t n = recv(fd.get(), buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status(n < 0 ? errno : EIO, "sock_diag: no answer");
    int len = static_cast<int>(n);
    for (auto* h = reinterpret_cast<const nlmsghdr*>(buf); NLMSG_OK(h, len); h = NLMSG_NEXT(h, len)) {
      if (h->nlmsg_type == NLMSG_DONE) return out;
      if (h->nlmsg_type == NLMSG_ERROR) {
        const auto* e = static_cast<const nlmsgerr*>(NLMSG_DATA(h));
        return Status(-e->error, std::string("sock_diag: ") + strerror(-e->error));
      }
      if (h->nlmsg_type == SOCK_DIAG_BY_FAMILY) Collect(h, prefix, &out);
    }
  }
}

}  // namespace softverbs::cm
