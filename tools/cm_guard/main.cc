// softverbs-cm-guard: speaks for a process that dies with connections on the wire
// (transport/wire/last_words.h). Started by that process with its socket pair's other end on
// fd 3; detaches (the process that started it reaps its first half at once); keeps the book of
// the MADs armed; when the process's end closes -- it exited or was killed -- sends each MAD
// still armed, three times a second apart as a lossy network may need (a peer answers a copy
// of a DREQ it has handled with another DREP: harmless), and exits.
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

#include "base/log.h"
#include "transport/wire/last_words.h"

namespace {

constexpr int kFromProcess = 3;
constexpr int kRounds = 3;

void CloseAllBut3() {
  // Whatever the application left open without FD_CLOEXEC must not be held here (a TCP
  // connection of its own would not close when it dies).
  if (syscall(SYS_close_range, 4u, ~0u, 0u) == 0) return;
  for (int fd = 4; fd < 1024; ++fd) close(fd);
}

}  // namespace

int main() {
  CloseAllBut3();
  // Detach: the starter waits for this first process only.
  const pid_t child = fork();
  if (child < 0) return 1;
  if (child > 0) _exit(0);

  softverbs::transport::LastWordsBook book;
  softverbs::transport::LastWordsRecord buffer;
  for (;;) {
    const ssize_t n = recv(kFromProcess, &buffer, sizeof buffer, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the process is gone
    auto applied = book.Apply({reinterpret_cast<const uint8_t*>(&buffer), static_cast<size_t>(n)});
    if (!applied.ok()) SV_LOG(kWarn, "softverbs-cm-guard: %s (ignored)", applied.rule().c_str());
  }
  // (Its stdio is /dev/null: what it says goes to SOFTVERBS_LOG_FILE, inherited from its process.)
  SV_LOG(kInfo, "softverbs-cm-guard: its process ended; %zu MAD(s) armed", book.armed().size());
  for (int round = 0; round < kRounds && !book.armed().empty(); ++round) {
    if (round > 0) sleep(1);
    for (const auto& [token, record] : book.armed()) {
      auto sent = softverbs::transport::SendLastWords(record, 4791);
      if (!sent.ok() && round == 0)
        SV_LOG(kError, "softverbs-cm-guard: the MAD for connection 0x%llx: %s", static_cast<unsigned long long>(token),
               sent.rule().c_str());
      else if (round == 0)
        SV_LOG(kInfo, "softverbs-cm-guard: sent the MAD for connection 0x%llx", static_cast<unsigned long long>(token));
    }
  }
  return 0;
}
