#include "fabric/host/fault_guard.h"

#include <setjmp.h>
#include <signal.h>

#include <atomic>
#include <mutex>

namespace softverbs::fabric {
namespace {

struct Guard {
  sigjmp_buf env;
  volatile sig_atomic_t armed = 0;
};

// Touched by the arming thread before any fault can happen, so the handler never makes the
// thread-local block exist (which could allocate) from inside the signal.
thread_local Guard t_guard;

struct sigaction g_previous;
std::atomic<size_t> g_faults{0};

void Chain(int sig, siginfo_t* info, void* context) {
  const struct sigaction& p = g_previous;
  if (p.sa_flags & SA_SIGINFO) {
    if (p.sa_sigaction != nullptr) return p.sa_sigaction(sig, info, context);
  } else if (p.sa_handler != SIG_DFL && p.sa_handler != SIG_IGN) {
    return p.sa_handler(sig);
  }
  // The default action: a fault comes back when the instruction is retried, now fatal as it
  // would have been without us; a SIGBUS sent by kill() is raised again.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, nullptr);
  if (info == nullptr || info->si_code <= 0) raise(sig);
}

void OnSigbus(int sig, siginfo_t* info, void* context) {
  Guard& g = t_guard;
  // Only a fault of this thread's guarded copy: the kernel's own SIGBUS (si_code > 0), in the
  // thread that faulted (the handler runs there), while the guard is armed.
  if (g.armed && info != nullptr && info->si_code > 0) {
    g.armed = 0;
    g_faults.fetch_add(1, std::memory_order_relaxed);
    siglongjmp(g.env, 1);
  }
  Chain(sig, info, context);
}

}  // namespace

void InstallFaultGuard() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_sigaction = OnSigbus;
    // SA_NODEFER: the jump out of the handler leaves SIGBUS unblocked (sigsetjmp without a
    // saved mask costs no system call per copy). SA_ONSTACK: an alternate stack if the thread
    // has one.
    sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, &g_previous);
  });
}

bool RunGuarded(void (*fn)(void*), void* ctx) {
  // One lookup of the thread's guard (each names the thread-local block anew through
  // __tls_get_addr in a shared library); volatile: nothing cached in a register is trusted after
  // the jump (-Wclobbered), and after it only the return value is used.
  Guard* volatile guard = &t_guard;
  if (sigsetjmp(guard->env, 0) != 0) return false;  // came back from a fault
  guard->armed = 1;
  fn(ctx);
  guard->armed = 0;
  return true;
}

size_t GuardedFaults() { return g_faults.load(std::memory_order_relaxed); }

}  // namespace softverbs::fabric
