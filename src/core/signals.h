// SIGINT/SIGTERM become a request that long-running loops poll (Caffe's sigint_effect:
// snapshot, then stop). A second signal ends the process at once.
#pragma once

namespace bks {

void install_interrupt_handler();
bool interrupt_requested();
void clear_interrupt();

}  // namespace bks
