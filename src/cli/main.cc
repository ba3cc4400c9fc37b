// bakusoku: train, test, time and inspect Caffe networks.
// Exit codes: 0 success, 1 runtime failure, 2 bad usage or bad input, 130 interrupted.
#include <cstdio>
#include <memory>
#include <new>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"
#include "dist/communicator.h"

int main(int argc, char** argv) {
  std::string command_line;
  for (int i = 0; i < argc; ++i) command_line += (i ? " " : "") + std::string(argv[i]);

  CLI::App app{"bakusoku (爆速): train, profile and deploy Caffe networks, fast"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("bakusoku ") + BKS_VERSION);
  bool verbose = false;
  app.add_flag("-v,--verbose", verbose, "Log chosen kernels and per-layer details");
  std::vector<std::pair<CLI::App*, bks::cli::Runner>> verbs;
  auto add = [&](const char* name, auto adder) {
    size_t before = app.get_subcommands({}).size();
    auto run = adder(app);
    verbs.emplace_back(app.get_subcommands({})[before], std::move(run));
    (void)name;
  };
  add("train", [&](CLI::App& a) { return bks::cli::add_train(a, command_line); });
  add("test", bks::cli::add_test);
  add("time", bks::cli::add_time);
  add("sample", bks::cli::add_sample);
  add("device_query", bks::cli::add_device_query);
  add("deploy", bks::cli::add_deploy);
  add("export", bks::cli::add_export);
  add("factorize", bks::cli::add_factorize);
  add("prune-channels", bks::cli::add_prune_channels);
  add("optimize", bks::cli::add_optimize);
  add("bench", bks::cli::add_bench);
  add("serve", bks::cli::add_serve);
  add("pack-dataset", bks::cli::add_pack_dataset);
  add("allreduce-bench", bks::cli::add_allreduce_bench);
  add("convert_imageset", bks::cli::add_convert_imageset);
  add("compute_image_mean", bks::cli::add_compute_image_mean);
  add("upgrade_net_proto_text", bks::cli::add_upgrade_net_text);
  add("upgrade_net_proto_binary", bks::cli::add_upgrade_net_binary);
  add("upgrade_solver_proto_text", bks::cli::add_upgrade_solver_text);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "bakusoku: %s (see bakusoku --help)\n", e.what());
    return 2;
  }
  if (verbose) bks::log::set_level(bks::log::Level::debug);
  // In a data-parallel run every rank runs this: the messages of ranks other than 0 (and
  // every rank's errors) say which rank wrote them.
  if (bks::dist::launched_by_mpi() && bks::dist::world().rank() > 0) bks::log::set_prefix(bks::dist::message_prefix());
  auto fail = [](int code, const char* what) {
    std::fprintf(stderr, "%serror: %s\n", bks::dist::message_prefix().c_str(), what);
    return bks::dist::finish(code, true);
  };
  try {
    for (auto& [cmd, run] : verbs)
      if (cmd->parsed()) return bks::dist::finish(run(), false);
  } catch (const bks::dist::QuietExit& e) {
    return bks::dist::finish(e.code, true);
  } catch (const bks::InputError& e) {
    return fail(2, e.what());
  } catch (const bks::RuntimeError& e) {
    return fail(1, e.what());
  } catch (const std::bad_alloc&) {
    // Readers check declared sizes against their input first; this is a real shortage.
    return fail(1, "out of memory (the network or its data need more than this machine has)");
  } catch (const std::exception& e) {
    return fail(1, e.what());
  }
  return 2;
}
