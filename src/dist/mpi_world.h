// The Open MPI side of dist/communicator.h (internal to dist/).
#pragma once

#include "dist/communicator.h"

namespace bks::dist {

// MPI_COMM_WORLD, initialised on the first call.
Communicator& mpi_world();
// MPI_Finalize, when MPI was initialised and not yet finalised.
void finalize_mpi();

}  // namespace bks::dist
