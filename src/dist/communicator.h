// The processes of a data-parallel run and the collectives they use (DESIGN.md's dist/
// layer). Launched by an MPI launcher (mpirun, srun), the world is MPI's; otherwise it is a
// world of one whose collectives do nothing, so a plain `bakusoku train` never starts MPI.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace bks::dist {

// A reduction in flight (MPI_Iallreduce on CPU).
class Pending {
 public:
  virtual ~Pending();
  // Lets the reduction progress; true once it is complete.
  virtual bool done() = 0;
  virtual void wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator();
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // This process's place among the ranks on its host, and how many those are.
  virtual int local_rank() const = 0;
  virtual int local_size() const = 0;
  // Hosts the ranks run on.
  virtual int hosts() const = 0;
  virtual std::string host() const = 0;
  // "rank R on HOST", for messages that must say where they come from.
  std::string who() const;

  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  // In-place sum over ranks, blocking.
  virtual void allreduce_sum(double* data, size_t n) = 0;
  virtual void allreduce_sum(float* data, size_t n) = 0;
  // In-place sum over ranks, started now and completed by the Pending.
  virtual std::unique_ptr<Pending> iallreduce_sum(float* data, size_t n) = 0;
  // Every rank's value, in rank order.
  virtual std::vector<uint64_t> allgather(uint64_t value) = 0;
  // Ends every rank now (a rank failed alone; the others would wait for it forever).
  [[noreturn]] virtual void abort(int code) = 0;
};

// Whether an MPI launcher started this process (its environment says so); the rank and the
// size then come from the MPI library.
bool launched_by_mpi();
// The world this process belongs to; MPI is initialised on the first call when launched by MPI.
Communicator& world();

// "rank R on HOST: " in a data-parallel run of more than one rank, "" otherwise: what a
// rank puts before its messages.
std::string message_prefix();

// Every rank reached the same error at the same point (they agreed on it through a
// collective), so they can all stop normally; otherwise an error on one rank ends the job.
void mark_error_agreed();
// How the process ends with `code`: finalises MPI where it was started; after an error that
// the ranks did not agree on, aborts every rank instead (MPI_Abort) so that none waits.
int finish(int code, bool after_error);

// Thrown by ranks that stop because another rank reported an error at start-up: they
// exit with `code` and print nothing (the failing rank said what went wrong).
struct QuietExit {
  int code;
};

}  // namespace bks::dist
