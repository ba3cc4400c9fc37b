#include "dist/communicator.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "dist/mpi_world.h"

namespace bks::dist {

Pending::~Pending() = default;
Communicator::~Communicator() = default;

std::string Communicator::who() const { return fmt::format("rank {} on {}", rank(), host()); }

namespace {

class DonePending final : public Pending {
 public:
  bool done() override { return true; }
  void wait() override {}
};

// One process: every collective leaves its data as it is.
class SingleProcess final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_rank() const override { return 0; }
  int local_size() const override { return 1; }
  int hosts() const override { return 1; }
  std::string host() const override {
    char name[256] = {};
    gethostname(name, sizeof(name) - 1);
    return name;
  }
  void broadcast(void*, size_t, int) override {}
  void allreduce_sum(double*, size_t) override {}
  void allreduce_sum(float*, size_t) override {}
  std::unique_ptr<Pending> iallreduce_sum(float*, size_t) override { return std::make_unique<DonePending>(); }
  std::vector<uint64_t> allgather(uint64_t value) override { return {value}; }
  [[noreturn]] void abort(int code) override { std::_Exit(code); }
};

bool g_error_agreed = false;
Communicator* g_world = nullptr;

}  // namespace

bool launched_by_mpi() {
  // Open MPI's mpirun, PMIx launchers (srun --mpi=pmix, prterun) and PMI-1/2 ones (srun, MPICH).
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"})
    if (std::getenv(v)) return true;
  return false;
}

Communicator& world() {
  if (!g_world) {
    static SingleProcess single;
    g_world = launched_by_mpi() ? &mpi_world() : static_cast<Communicator*>(&single);
  }
  return *g_world;
}

std::string message_prefix() {
  if (!launched_by_mpi() || world().size() == 1) return "";
  return world().who() + ": ";
}

void mark_error_agreed() { g_error_agreed = true; }

int finish(int code, bool after_error) {
  if (!g_world || !launched_by_mpi()) return code;
  if (after_error && !g_error_agreed && g_world->size() > 1) g_world->abort(code);
  finalize_mpi();
  return code;
}

}  // namespace bks::dist
