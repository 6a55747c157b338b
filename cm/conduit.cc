#include "cm/conduit.h"

#include <cerrno>

namespace softverbs::cm {

Status SocketConduit::Receive(Message* message, bool* closed) { return ReceiveMessage(socket_.get(), message, closed); }

}  // namespace softverbs::cm
