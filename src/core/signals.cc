#include "core/signals.h"

#include <csignal>
#include <cstdlib>
#include <atomic>

namespace bks {
namespace {
std::atomic<int> g_signals{0};

extern "C" void on_signal(int sig) {
  if (g_signals.fetch_add(1) >= 1) std::_Exit(128 + sig);
}
}  // namespace

void install_interrupt_handler() {
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
}

bool interrupt_requested() { return g_signals.load() > 0; }
void clear_interrupt() { g_signals = 0; }

}  // namespace bks
