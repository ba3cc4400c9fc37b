// The verbs of the `bakusoku` command line, each in its own file.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>

namespace bks::cli {

// Each add_* registers a subcommand and returns the function that runs it (exit code).
using Runner = std::function<int()>;
Runner add_train(CLI::App& app, const std::string& command_line);
Runner add_test(CLI::App& app);
Runner add_time(CLI::App& app);
Runner add_sample(CLI::App& app);
Runner add_device_query(CLI::App& app);
Runner add_deploy(CLI::App& app);
Runner add_export(CLI::App& app);
Runner add_factorize(CLI::App& app);
Runner add_prune_channels(CLI::App& app);
Runner add_optimize(CLI::App& app);
Runner add_bench(CLI::App& app);
Runner add_serve(CLI::App& app);
Runner add_pack_dataset(CLI::App& app);
Runner add_allreduce_bench(CLI::App& app);
Runner add_convert_imageset(CLI::App& app);
Runner add_compute_image_mean(CLI::App& app);
// Caffe's upgrade_net_proto_text / _binary and upgrade_solver_proto_text (cmd_upgrade.cc).
Runner add_upgrade_net_text(CLI::App& app);
Runner add_upgrade_net_binary(CLI::App& app);
Runner add_upgrade_solver_text(CLI::App& app);

}  // namespace bks::cli
