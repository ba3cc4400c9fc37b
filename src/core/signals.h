// SIGINT/SIGTERM become a request that long-running loops poll (Caffe's sigint_effect:
// snapshot, then stop). A second such signal ends the process at once. SIGHUP makes the
// same request however often it comes (a dead parent's death signal can repeat).
#pragma once

namespace bks {

void install_interrupt_handler();
bool interrupt_requested();
void clear_interrupt();

}  // namespace bks
