// `bakusoku export`: a trained network (Caffe prototxt and weights, or an ONNX model) out as
// an ONNX model, for runtimes that read ONNX. The TEST-phase graph goes through the passes
// that keep the arithmetic (training layers stripped, BatchNorm and constants folded into
// the convolutions), not fusion or quantization, which are bakusoku's own kernels.
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/model.h"
#include "engine/bundle.h"
#include "engine/deploy.h"
#include "formats/onnx_export.h"
#include "formats/onnx_import.h"
#include "ops/shape_inference.h"
#include "passes/stand_in_inputs.h"

namespace bks::cli {

Runner add_export(CLI::App& app) {
  auto* cmd = app.add_subcommand("export", "Write a trained network as an ONNX model (.onnx, opset 13)");
  struct Opts {
    std::string model, weights, out, input_shape;
    bool random_weights = false, dynamic_batch = false;
    int64_t batch = 0;
    StateFlags state;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--model", o->model, "Deploy prototxt, a train/test prototxt (its TEST phase), or an ONNX model")
      ->required();
  auto* weights = cmd->add_option("--weights", o->weights, "Trained weights (.safetensors or .caffemodel)");
  cmd->add_flag("--random-weights", o->random_weights, "No weights file: each layer's filler (seed 1)")->excludes(weights);
  cmd->add_option("-o,--output", o->out, "ONNX file to write (.onnx)")->required();
  cmd->add_option("--batch", o->batch, "Batch size of the model's inputs (default: the net's)")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--dynamic-batch", o->dynamic_batch,
                "The inputs' and outputs' first dimension is the symbol N: any batch size at run time");
  add_state_options(cmd, o->state);
  add_input_shape_option(cmd, o->input_shape);
  return [o] {
    if (o->weights.empty() && !o->random_weights && !is_onnx_file(o->model))
      input_error("export: give --weights (trained weights) or --random-weights");
    DeployOptions d;
    d.model = o->model;
    d.weights = o->weights;
    d.random_weights = o->random_weights;
    d.state = o->state;
    if (!o->input_shape.empty()) d.input_shape = parse_input_shape(o->input_shape);
    DeployModel m = load_deploy_model(d);
    int changes = 0;
    for (auto pass : {strip_training, fold_batchnorm, fold_constants}) changes += static_cast<int>(pass(m).changes.size());
    if (o->batch > 0) {
      set_input_batch(m.graph, o->batch);
      infer_shapes(m.graph, proto::TEST);
    }
    OnnxExportOptions eo;
    eo.dynamic_batch = o->dynamic_batch;
    OnnxExportResult r = export_onnx(m.graph, m.weights, o->out, eo);
    fmt::print("wrote {}: ONNX opset {}, {} nodes from {} layers ({} folded or stripped); inputs {}; outputs {}\n",
               o->out, r.opset, r.nodes, m.graph.nodes.size(), changes, fmt::join(r.inputs, ", "),
               fmt::join(r.outputs, ", "));
    return 0;
  };
}

}  // namespace bks::cli
