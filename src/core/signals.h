// SIGINT/SIGTERM become a request that long-running loops poll (Caffe's sigint_effect:
// snapshot, then stop). A second such signal ends the process at once. SIGHUP makes the
// same request however often it comes (a dead parent's death signal can repeat).
#pragma once

namespace bks {

// Call before starting threads that compute: the signals are taken by a thread of their own,
// never by a thread inside a kernel (see signals.cc), and threads inherit that from the caller.
// Processes the caller execs inherit the blocked signals: unblock them in the child first.
void install_interrupt_handler();
bool interrupt_requested();
void clear_interrupt();

}  // namespace bks
