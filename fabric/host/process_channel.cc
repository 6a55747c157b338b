#include "fabric/host/process_channel.h"

#include <poll.h>
#include <sys/uio.h>
#include <time.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace softverbs::fabric {
namespace {

constexpr uint8_t kMagic = 0x53;  // 'S'
constexpr size_t kPrefix = 2;     // magic, kind

Status Errno(const char* what) { return Status(errno, std::string(what) + ": " + strerror(errno)); }

// "\0softverbs-channel<registry>/<slot>": abstract (no file), per network namespace.
socklen_t AddressOf(const std::string& registry, uint32_t slot, sockaddr_un* a) {
  *a = sockaddr_un{};
  a->sun_family = AF_UNIX;
  const std::string name = "softverbs-channel" + registry + "/" + std::to_string(slot);
  const size_t n = std::min(name.size(), sizeof a->sun_path - 1);
  memcpy(a->sun_path + 1, name.data(), n);
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
}

UniqueFd NewSocket() { return UniqueFd(socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)); }

int64_t NowMs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

}  // namespace

Result<std::unique_ptr<ProcessChannel>> ProcessChannel::Open(const std::string& registry, uint32_t slot) {
  UniqueFd fd = NewSocket();
  if (!fd.valid()) return Errno("socket(AF_UNIX)");
  sockaddr_un a;
  const socklen_t len = AddressOf(registry, slot, &a);
  // A name held by a process that died is released with its socket: the slot's new owner binds.
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&a), len) != 0) return Errno("bind(process channel)");
  return std::unique_ptr<ProcessChannel>(new ProcessChannel(std::move(fd)));
}

Result<std::unique_ptr<ProcessChannel>> ProcessChannel::OpenUnnamed() {
  UniqueFd fd = NewSocket();
  if (!fd.valid()) return Errno("socket(AF_UNIX)");
  sockaddr_un a{};
  a.sun_family = AF_UNIX;  // a bare family: the kernel picks an abstract name (unix(7) autobind)
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(sa_family_t)) != 0) return Errno("bind(autobind)");
  return std::unique_ptr<ProcessChannel>(new ProcessChannel(std::move(fd)));
}

Status ProcessChannel::SendTo(const sockaddr_un& to, socklen_t len, ChannelKind kind,
                              std::span<const uint8_t> body) {
  if (kPrefix + body.size() > kMaxMessage) return Invalid("a channel message is at most 64 KiB");
  uint8_t prefix[kPrefix] = {kMagic, static_cast<uint8_t>(kind)};
  iovec iov[2] = {{prefix, kPrefix}, {const_cast<uint8_t*>(body.data()), body.size()}};
  msghdr m{};
  m.msg_name = const_cast<sockaddr_un*>(&to);
  m.msg_namelen = len;
  m.msg_iov = iov;
  m.msg_iovlen = 2;
  if (sendmsg(fd_.get(), &m, MSG_DONTWAIT | MSG_NOSIGNAL) < 0) return Errno("sendmsg(process channel)");
  return Status::Ok();
}

Status ProcessChannel::Send(const std::string& registry, uint32_t slot, ChannelKind kind,
                            std::span<const uint8_t> body) {
  sockaddr_un a;
  const socklen_t len = AddressOf(registry, slot, &a);
  return SendTo(a, len, kind, body);
}

Result<bool> ProcessChannel::Receive(std::span<uint8_t> buffer, ChannelMessage* out) {
  for (;;) {
    iovec iov{buffer.data(), buffer.size()};
    msghdr m{};
    m.msg_name = &out->from;
    m.msg_namelen = sizeof out->from;
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    const ssize_t n = recvmsg(fd_.get(), &m, MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
      if (errno == EINTR) continue;
      return Errno("recvmsg(process channel)");
    }
    const auto size = static_cast<size_t>(n);
    if ((m.msg_flags & MSG_TRUNC) != 0 || size < kPrefix || buffer[0] != kMagic) continue;
    const uint8_t kind = buffer[1];
    if (kind < 1 || kind > static_cast<uint8_t>(ChannelKind::kMad)) continue;
    out->kind = static_cast<ChannelKind>(kind);
    out->body = buffer.subspan(kPrefix, size - kPrefix);
    out->from_len = m.msg_namelen;
    return true;
  }
}

Status ProcessChannel::Answer(const ChannelMessage& question, std::span<const uint8_t> body) {
  if (question.from_len <= offsetof(sockaddr_un, sun_path)) return Invalid("the question came from an unnamed socket");
  return SendTo(question.from, question.from_len, ChannelKind::kAnswer, body);
}

Result<std::string> ProcessChannel::Ask(const std::string& registry, uint32_t slot, std::span<const uint8_t> question,
                                        int timeout_ms) {
  SV_RETURN_IF_ERROR(Send(registry, slot, ChannelKind::kQuestion, question));
  std::vector<uint8_t> buffer(kMaxMessage);
  const int64_t deadline = NowMs() + timeout_ms;
  for (;;) {
    ChannelMessage m;
    auto got = Receive(buffer, &m);
    if (!got.ok()) return got.status();
    if (*got && m.kind == ChannelKind::kAnswer) return std::string(m.body.begin(), m.body.end());
    if (*got) continue;
    const int64_t left = deadline - NowMs();
    if (left <= 0) return Status(ETIMEDOUT, "process slot " + std::to_string(slot) + " did not answer");
    pollfd p{fd_.get(), POLLIN, 0};
    (void)poll(&p, 1, static_cast<int>(left));
  }
}

}  // namespace softverbs::fabric
