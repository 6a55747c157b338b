// What carries an identifier's CM messages (docs/cm.md, "Across hosts"): the same-host socket
// (today's path, cm/service.h and cm/wire.h) or the MAD path for any destination not on this
// host (cm/mad_conduit.h). Each is readable through one fd, so a channel's epoll set waits on
// both alike. cm::Id does not use this interface yet; it is the seam the MAD path plugs into.
#pragma once

#include "base/status.h"
#include "base/unique_fd.h"
#include "cm/wire.h"

namespace softverbs::cm {

class Conduit {
 public:
  virtual ~Conduit() = default;
  // Sends one message to the peer; EPIPE/ECONNRESET when the peer is known to be gone.
  virtual Status Send(const Message& message) = 0;
  // Takes one pending message; `*closed` when the peer is gone (no message then). With nothing
  // pending: EAGAIN.
  virtual Status Receive(Message* message, bool* closed) = 0;
  // Readable while Receive has something to give.
  virtual int fd() const = 0;
};

// The same-host path: a connected SOCK_SEQPACKET socket (cm/service.h), messages as cm/wire.h
// sends them. Exactly what cm::Id does with its socket today.
class SocketConduit : public Conduit {
 public:
  explicit SocketConduit(UniqueFd socket) : socket_(std::move(socket)) {}
  Status Send(const Message& message) override { return SendMessage(socket_.get(), message); }
  Status Receive(Message* message, bool* closed) override;
  int fd() const override { return socket_.get(); }

 private:
  UniqueFd socket_;
};

}  // namespace softverbs::cm
