#include "server/classify.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <optional>

#include "engine/deploy.h"
#include "engine/session.h"
#include "passes/deploy_model.h"
#include "server/api_error.h"
#include "server/layer_view.h"

namespace bks::server {

struct Classifier::Entry {
  std::string key;
  std::unique_ptr<InferenceSession> session;  // optimised (classify, evaluate)
  std::unique_ptr<BundleNet> plain;           // unoptimised, every value kept (visualize)
  std::mutex mu;                              // one request at a time per session
  Net& net() { return plain ? *plain->net : session->net(); }
};

namespace {
constexpr size_t kCached = 4;
constexpr float kScale = 0.00390625f;  // the Data layers bakusoku serve writes scale pixels so
}  // namespace

std::shared_ptr<Classifier::Entry> Classifier::session(const ClassifyInput& in, int64_t batch, bool plain) {
  const std::string key = fmt::format("{}|{}|{}|{}", in.net_file, in.weights_file, batch, plain);
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& e : cache_)
    if (e->key == key) return e;
  DeployOptions o;
  o.model = in.net_file;
  o.weights = in.weights_file;
  o.batch = batch;
  o.threads = 1;
  o.autotune = false;  // the session below builds the net
  auto e = std::make_shared<Entry>();
  e->key = key;
  if (plain) {
    // The TEST graph with only training layers stripped: every layer's output to look at.
    DeployModel m = load_deploy_model(o);
    strip_training(m);
    Bundle b;
    b.graph = bundle_graph(m);
    set_input_batch(b.graph, batch);
    b.weights = weights_by_layer(m);
    NetOptions opt;
    opt.reuse_buffers = false;
    e->plain = build_bundle_net(b, b.graph, in.weights_file, 1, opt);
  } else {
    e->session = std::make_unique<InferenceSession>(deploy(o).bundle, in.weights_file, 1);
  }
  cache_.push_back(e);
  if (cache_.size() > kCached) cache_.erase(cache_.begin());
  return e;
}

namespace {

int argmax(const float* p, int64_t n) { return static_cast<int>(std::max_element(p, p + n) - p); }

// The five likeliest of `classes` probabilities, named.
json top5(const float* p, int64_t classes, const ClassifyInput& in) {
  std::vector<int> order(static_cast<size_t>(classes));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
  json top = json::array();
  for (size_t k = 0; k < std::min<size_t>(5, order.size()); ++k) {
    int c = order[k];
    std::string name = c < static_cast<int>(in.classes.size()) ? in.classes[static_cast<size_t>(c)] : std::to_string(c);
    top.push_back({{"class", c}, {"name", name}, {"probability", p[c]}});
  }
  return top;
}

// Images a batched session runs at once (evaluate's, which classify_many shares), and the
// fewest images classify_many batches: below it, the batch-1 session runs each.
constexpr int64_t kEvalBatch = 100;
constexpr size_t kBatchFrom = 16;

// Images [0, count) through `s`, a session of `batch` images, `batch` at a time (the last
// batch repeats its last image): image k's C x H x W bytes (`per` of them) at pixels(k),
// scaled like the training data; use(k, probabilities, classes) for each. 409 when the
// network reads images of another size.
template <class Pixels, class Use>
void run_in_batches(InferenceSession& s, int64_t batch, int64_t per, int64_t count, Pixels pixels, Use use) {
  Tensor& x = s.value(s.inputs()[0]);
  if (x.numel() != batch * per)
    throw ApiError(409, "",
                   fmt::format("the network reads {} values per image, the dataset gives {}", x.numel() / batch, per));
  for (int64_t start = 0; start < count; start += batch) {
    const int64_t n = std::min(batch, count - start);
    for (int64_t i = 0; i < batch * per; ++i) x.f32()[i] = pixels(start + std::min(i / per, n - 1))[i % per] * kScale;
    s.run();
    const Tensor& prob = s.value(s.outputs()[0]);
    const int64_t classes = prob.numel() / batch;
    for (int64_t i = 0; i < n; ++i) use(start + i, prob.f32() + i * classes, classes);
  }
}

int64_t values_per_image(const ClassifyInput& in) {
  return std::accumulate(in.shape.begin(), in.shape.end(), int64_t{1}, std::multiplies<>());
}

}  // namespace

json Classifier::classify_pixels(const ClassifyInput& in, const uint8_t* chw) {
  return json{{"top", classify_many(in, {chw}).at(0)}};
}

std::vector<json> Classifier::classify_many(const ClassifyInput& in, const std::vector<const uint8_t*>& images) {
  const int64_t count = static_cast<int64_t>(images.size());
  const int64_t batch = images.size() < kBatchFrom ? 1 : kEvalBatch;
  auto e = session(in, batch);
  std::lock_guard<std::mutex> lock(e->mu);
  std::vector<json> tops;
  run_in_batches(
      *e->session, batch, values_per_image(in), count, [&](int64_t k) { return images[static_cast<size_t>(k)]; },
      [&](int64_t, const float* p, int64_t classes) { tops.push_back(top5(p, classes, in)); });
  return tops;
}

json Classifier::evaluate(const ClassifyInput& in, const uint8_t* images, const float* labels, int64_t count) {
  const int64_t per = values_per_image(in);
  const int64_t batch = std::max<int64_t>(1, std::min<int64_t>(kEvalBatch, count));
  auto e = session(in, batch);
  std::lock_guard<std::mutex> lock(e->mu);
  int64_t classes = 0, correct = 0, counted = 0;
  std::vector<std::vector<int64_t>> confusion;
  run_in_batches(
      *e->session, batch, per, count, [&](int64_t k) { return images + k * per; },
      [&](int64_t k, const float* p, int64_t n) {
        if (classes == 0) {
          classes = n;
          confusion.assign(static_cast<size_t>(classes), std::vector<int64_t>(static_cast<size_t>(classes), 0));
        }
        auto truth = static_cast<int64_t>(labels[k]);
        int64_t guess = argmax(p, classes);
        if (truth < 0 || truth >= classes) return;
        ++confusion[static_cast<size_t>(truth)][static_cast<size_t>(guess)];
        correct += truth == guess;
        ++counted;
      });
  json per_class = json::array();
  for (int64_t c = 0; c < classes; ++c) {
    const auto& row = confusion[static_cast<size_t>(c)];
    int64_t total = std::accumulate(row.begin(), row.end(), int64_t{0});
    std::string name =
        c < static_cast<int64_t>(in.classes.size()) ? in.classes[static_cast<size_t>(c)] : std::to_string(c);
    per_class.push_back(
        {{"class", c},
         {"name", name},
         {"count", total},
         {"accuracy", total ? static_cast<double>(row[static_cast<size_t>(c)]) / static_cast<double>(total) : 0.0}});
  }
  return {{"count", counted},
          {"accuracy", counted ? static_cast<double>(correct) / static_cast<double>(counted) : 0.0},
          {"per_class", per_class},
          {"confusion", confusion}};
}

json Classifier::visualize(const ClassifyInput& in, const uint8_t* chw) {
  auto e = session(in, 1, true);
  std::lock_guard<std::mutex> lock(e->mu);
  Net& net = e->net();
  const int64_t per = values_per_image(in);
  Tensor& x = net.value(net.inputs()[0]);
  if (x.numel() != per)
    throw ApiError(409, "", fmt::format("the network reads {} values per image, the dataset gives {}", x.numel(), per));
  for (int64_t i = 0; i < per; ++i) x.f32()[i] = chw[i] * kScale;
  // Each output is read as soon as its layer ran: a later layer may write into the same
  // buffer (an in-place ReLU after a convolution, an Eltwise adding onto it), and the row
  // of a layer is to show what that layer produced.
  std::vector<std::optional<Tensor>> produced(static_cast<size_t>(net.num_nodes()));
  net.set_forward_hook([&](int n) {
    const Node& node = net.graph().nodes[n];
    if (!node.outputs.empty()) produced[static_cast<size_t>(n)] = net.plain_copy(node.outputs[0]);
  });
  struct Unhook {  // the net stays cached; its hook must not outlive `produced`
    Net& net;
    ~Unhook() { net.set_forward_hook(nullptr); }
  } unhook{net};
  net.forward();
  json layers = json::array();
  const Graph& g = net.graph();
  for (int n = 0; n < net.num_nodes(); ++n) {
    const Node& node = g.nodes[n];
    if (node.outputs.empty()) continue;
    json l{{"name", node.name}, {"type", node.type}};
    auto& out = produced[static_cast<size_t>(n)];
    if (!out) out = net.plain_copy(node.outputs[0]);  // a layer that did not run (an empty batch)
    add_activation(l, *out);
    out.reset();
    if (!node.params.empty())
      add_weights(l, e->plain->store.at(net.param_index(n, 0)).data, op_traits(node).convolution);
    layers.push_back(std::move(l));
  }
  return {{"layers", layers}};
}

}  // namespace bks::server
