#include "core/signals.h"

#include <atomic>
#include <csignal>
#include <cstdlib>

namespace bks {
namespace {
std::atomic<int> g_signals{0};
std::atomic<bool> g_hangup{false};

extern "C" void on_signal(int sig) {
  if (g_signals.fetch_add(1) >= 1) std::_Exit(128 + sig);
}

// SIGHUP never escalates: a parent that dies (bakusoku serve's jobs get SIGHUP as their
// death signal) may deliver it more than once, once per thread the child is handed to.
extern "C" void on_hangup(int) { g_hangup = true; }
}  // namespace

void install_interrupt_handler() {
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::signal(SIGHUP, on_hangup);
}

bool interrupt_requested() { return g_signals.load() > 0 || g_hangup.load(); }
void clear_interrupt() {
  g_signals = 0;
  g_hangup = false;
}

}  // namespace bks
