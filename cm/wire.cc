#include "cm/wire.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace softverbs::cm {
namespace {

// The datagram: a version, then the message as is (both ends are the same build on one host).
struct Datagram {
  uint32_t magic;
  Message message;
};
constexpr uint32_t kMagic = 0x53564d31;  // "SVM1"

}  // namespace

const char* MessageName(MessageType type) {
  switch (type) {
    case MessageType::kReq: return "REQ";
    case MessageType::kRep: return "REP";
    case MessageType::kRtu: return "RTU";
    case MessageType::kRej: return "REJ";
    case MessageType::kDreq: return "DREQ";
    case MessageType::kDrep: return "DREP";
    case MessageType::kSidrReq: return "SIDR_REQ";
    case MessageType::kSidrRep: return "SIDR_REP";
  }
  return "?";
}

size_t MaxPrivateData(MessageType type) {
  switch (type) {
    case MessageType::kReq: return 92 - 36;
    case MessageType::kRep: return 196;
    case MessageType::kRtu: return 224;
    case MessageType::kRej: return 148;
    case MessageType::kDreq: return 220;
    case MessageType::kDrep: return 224;
    case MessageType::kSidrReq: return 216 - 36;
    case MessageType::kSidrRep: return 136;
  }
  return 0;
}

Status SendMessage(int fd, const Message& message) {
  Datagram d{kMagic, message};
  ssize_t n;
  do n = send(fd, &d, sizeof(d), MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  if (n < 0) return Status(errno, std::string("cannot send ") + MessageName(message.type) + ": " +
                                      strerror(errno));
  return Status::Ok();
}

Status ReceiveMessage(int fd, Message* message, bool* closed) {
  *closed = false;
  Datagram d{};
  ssize_t n;
  do n = recv(fd, &d, sizeof(d), MSG_DONTWAIT);
  while (n < 0 && errno == EINTR);
  if (n == 0 || (n < 0 && (errno == ECONNRESET || errno == EPIPE))) {
    *closed = true;
    return Status::Ok();
  }
  if (n < 0) return Status(errno, std::string("cannot receive a CM message: ") + strerror(errno));
  if (static_cast<size_t>(n) != sizeof(d) || d.magic != kMagic)
    return Invalid("malformed CM message (" + std::to_string(n) + " bytes)");
  *message = d.message;
  return Status::Ok();
}

}  // namespace softverbs::cm
