#include "core/signals.h"

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <mutex>
#include <thread>

namespace bks {
namespace {
std::atomic<int> g_signals{0};
std::atomic<bool> g_hangup{false};

// SIGINT/SIGTERM: the first asks to stop, a second ends the process at once. SIGHUP never
// escalates: a parent that dies (bakusoku serve's jobs get SIGHUP as their death signal) may
// deliver it more than once, once per thread the child is handed to.
void note_signal(int sig) {
  if (sig == SIGHUP) {
    g_hangup = true;
    return;
  }
  if (g_signals.fetch_add(1) >= 1) std::_Exit(128 + sig);
}

extern "C" void on_signal(int sig) { note_signal(sig); }

sigset_t interrupt_signals() {
  sigset_t s;
  sigemptyset(&s);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&s, sig);
  return s;
}
}  // namespace

// No interrupt may run on a computing thread: oneDNN 2.x's JIT sgemm kernels point the stack
// pointer into a heap buffer while they run, so a signal frame pushed there overwrites heap
// memory (weights, gradients, malloc's own bookkeeping; oneDNN issue #4845, fixed in 3.11).
// The signals are blocked in the calling thread, and so in every thread it starts afterwards
// (OpenMP's pool, the prefetcher, MPI's), and one thread of ours takes them with sigwait. The
// handlers stay for threads started before this call, which run none of oneDNN's kernels.
void install_interrupt_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    std::signal(SIGINT, on_signal);
    std::signal(SIGTERM, on_signal);
    std::signal(SIGHUP, on_signal);
    const sigset_t set = interrupt_signals();
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    std::thread([set] {
      while (true) {
        int sig = 0;
        if (sigwait(&set, &sig) == 0) note_signal(sig);
      }
    }).detach();
  });
}

bool interrupt_requested() { return g_signals.load() > 0 || g_hangup.load(); }
void clear_interrupt() {
  g_signals = 0;
  g_hangup = false;
}

}  // namespace bks
