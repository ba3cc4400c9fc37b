// A solver prototxt as `bakusoku train` reads it before building nets: parse, the
// learning-rate policy and the solver's own checks, the schedule at a few iterations, and
// nets given inline (net_param, train_net_param, test_net_param) up to shape inference.
#include "formats/caffe_upgrade.h"
#include "fuzz_util.h"
#include "net_check.h"
#include "train/lr_policy.h"
#include "train/solver.h"

namespace {

void check_inline(const bks::proto::NetParameter& p, const std::string& where) {
  if (!bks::fuzz::sources_stay_local(p)) return;
  bks::NetLoad net;
  net.param = p;
  net.source = where;
  bks::fuzz::check_net_phases(net);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace bks;
  fuzz::write_data_fixtures();
  std::string path = fuzz::write_scratch("solver.prototxt", data, size);
  fuzz::expect_input_errors([&] {
    proto::SolverParameter sp;
    read_solver_file(path, sp);  // with Caffe's solver and inline-net upgrades, as train reads it
    check_lr_policy(sp, path);
    auto solver = Solver::create(sp, path);
    for (int64_t iter : {int64_t{0}, int64_t{1}, int64_t{sp.max_iter()} / 2, int64_t{sp.max_iter()}})
      (void)learning_rate(sp, iter);
    if (sp.has_net_param()) check_inline(sp.net_param(), path + ": net_param");
    if (sp.has_train_net_param()) check_inline(sp.train_net_param(), path + ": train_net_param");
    for (const auto& t : sp.test_net_param()) check_inline(t, path + ": test_net_param");
  });
  return 0;
}
