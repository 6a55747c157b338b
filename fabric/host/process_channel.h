// A process's datagram channel on the host: an abstract AF_UNIX socket named after the host
// registry and the process's slot in it, so any process of the host (the same network namespace:
// abstract names are per namespace, as the registry is) reaches any other by its slot.
//
// Uses (docs/wire.md, docs/cm.md "Dispatch"):
// - forwarding: the kernel hands a RoCEv2 datagram to one member of the per-user UDP 4791 group,
//   not necessarily the process that owns its destination QP; a response (ACK, READ response,
//   atomic ACK) must reach the requester's own process, so the member forwards it here; a MAD
//   for QP1 goes to the process whose CM connection or listener it is for;
// - questions: `softverbs status` asks every live process for its wire counters.
//
// A message is a kind and a body. The socket never blocks: a full receiver drops the forwarded datagram (a loss, which RC recovers).
#pragma once

#include <sys/socket.h>
#include <sys/un.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "base/status.h"
#include "base/unique_fd.h"

namespace softverbs::fabric {

// kForward: a RoCEv2 datagram for one of the receiver's QPs; kMad: a MAD that arrived for QP1 of
// another process (transport/wire/wire_fabric.h, ForwardMad).
enum class ChannelKind : uint8_t { kForward = 1, kQuestion = 2, kAnswer = 3, kMad = 4 };

struct ChannelMessage {
  ChannelKind kind = ChannelKind::kForward;
  std::span<const uint8_t> body;
  sockaddr_un from{};  // who sent it: Answer() replies there
  socklen_t from_len = 0;
};

class ProcessChannel {
 public:
  static constexpr size_t kMaxMessage = 64 * 1024;

  // Binds the channel of process slot `slot` of the registry named `registry` (its /dev/shm
  // name). EADDRINUSE if a live process holds that slot's channel.
  static Result<std::unique_ptr<ProcessChannel>> Open(const std::string& registry, uint32_t slot);
  // An unnamed channel (autobound), for a process that only asks (the CLI).
  static Result<std::unique_ptr<ProcessChannel>> OpenUnnamed();

  int fd() const { return fd_.get(); }

  // Sends a message to process slot `slot`'s channel. EAGAIN: its queue is full; ECONNREFUSED
  // or ENOENT: no process listens there.
  Status Send(const std::string& registry, uint32_t slot, ChannelKind kind, std::span<const uint8_t> body);
  // Receives one message into `buffer` (at least kMaxMessage bytes); false: nothing pending.
  // Anyone on the host may write here: a message that is not well formed is skipped.
  Result<bool> Receive(std::span<uint8_t> buffer, ChannelMessage* out);
  // Answers a question received on this channel.
  Status Answer(const ChannelMessage& question, std::span<const uint8_t> body);
  // Asks process slot `slot` and waits at most `timeout_ms` for its answer.
  Result<std::string> Ask(const std::string& registry, uint32_t slot, std::span<const uint8_t> question, int timeout_ms);

 private:
  explicit ProcessChannel(UniqueFd fd) : fd_(std::move(fd)) {}
  Status SendTo(const sockaddr_un& to, socklen_t len, ChannelKind kind, std::span<const uint8_t> body);

  UniqueFd fd_;
};

}  // namespace softverbs::fabric
