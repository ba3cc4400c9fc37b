// Caffe's upgrade tools under their own names: an old (V0/V1) net or solver file in, the
// current form out, written atomically. Input errors exit 2 with one line (cli/main.cc).
#include <google/protobuf/text_format.h>

#include <fmt/format.h>

#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "core/file_io.h"
#include "formats/caffe_upgrade.h"
#include "formats/prototxt.h"

namespace bks::cli {
namespace {

std::string as_text(const google::protobuf::Message& m) {
  std::string out;
  if (!google::protobuf::TextFormat::PrintToString(m, &out)) runtime_error("cannot print {}", m.GetTypeName());
  return out;
}

// The whole of Caffe's UpgradeNetAsNeeded, including the forms bakusoku reads directly.
NetFormat upgrade_all(proto::NetParameter& net, const std::string& in, std::vector<int>* lines) {
  NetFormat f = upgrade_net(net, in, lines);
  upgrade_net_input(net, in);
  upgrade_batch_norm_params(net);
  return f;
}

void report(const std::string& in, const std::string& out, NetFormat f) {
  if (f == NetFormat::current)
    fmt::print("{}: already in the current net format; wrote {}\n", in, out);
  else
    fmt::print("{}: upgraded from Caffe's {} net format; wrote {}\n", in, net_format_name(f), out);
}

struct Paths {
  std::string in, out;
};

CLI::App* verb(CLI::App& app, const char* name, const char* help, Paths& p) {
  CLI::App* cmd = app.add_subcommand(name, help);
  cmd->add_option("IN", p.in, "The old file")->required();
  cmd->add_option("OUT", p.out, "Where to write the upgraded file")->required();
  return cmd;
}

}  // namespace

Runner add_upgrade_net_text(CLI::App& app) {
  auto p = std::make_shared<Paths>();
  verb(app, "upgrade_net_proto_text", "Rewrite a V0/V1 net prototxt in the current format (Caffe's tool)", *p);
  return [p] {
    proto::NetParameter net;
    std::vector<int> lines;
    read_prototxt(p->in, net, &lines);
    NetFormat f = upgrade_all(net, p->in, &lines);
    write_file_atomic(p->out, as_text(net));
    report(p->in, p->out, f);
    return 0;
  };
}

Runner add_upgrade_net_binary(CLI::App& app) {
  auto p = std::make_shared<Paths>();
  verb(app, "upgrade_net_proto_binary", "Rewrite a V0/V1 .caffemodel in the current format (Caffe's tool)", *p);
  return [p] {
    proto::NetParameter net;
    read_binary_proto(p->in, net);
    NetFormat f = upgrade_all(net, p->in, nullptr);
    std::string bytes;
    if (!net.SerializeToString(&bytes)) runtime_error("{}: cannot serialise the upgraded net", p->in);
    write_file_atomic(p->out, bytes);
    report(p->in, p->out, f);
    return 0;
  };
}

Runner add_upgrade_solver_text(CLI::App& app) {
  auto p = std::make_shared<Paths>();
  verb(app, "upgrade_solver_proto_text", "Rewrite a solver's old solver_type enum as type (Caffe's tool)", *p);
  return [p] {
    proto::SolverParameter s;
    read_prototxt(p->in, s);
    const bool changed = upgrade_solver(s, p->in);
    int nets = 0;
    auto net = [&](proto::NetParameter& n, const std::string& field) {
      nets += upgrade_all(n, fmt::format("{}: {}", p->in, field), nullptr) != NetFormat::current;
    };
    if (s.has_net_param()) net(*s.mutable_net_param(), "net_param");
    if (s.has_train_net_param()) net(*s.mutable_train_net_param(), "train_net_param");
    for (int i = 0; i < s.test_net_param_size(); ++i)
      net(*s.mutable_test_net_param(i), fmt::format("test_net_param[{}]", i));
    write_file_atomic(p->out, as_text(s));
    if (changed || nets)
      fmt::print("{}: upgraded ({}{}{}); wrote {}\n", p->in, changed ? "solver_type -> type \"" + s.type() + "\"" : "",
                 changed && nets ? ", " : "", nets ? fmt::format("{} inline net(s)", nets) : "", p->out);
    else
      fmt::print("{}: already in the current solver format; wrote {}\n", p->in, p->out);
    return 0;
  };
}

}  // namespace bks::cli
