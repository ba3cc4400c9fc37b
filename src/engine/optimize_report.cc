#include "engine/optimize_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace bks {

namespace {

// Each candidate at its own batch (throughput, batch tuned): the tables get a batch column.
bool tuned_batch(const OptimizeResult& r) { return r.batch == 0; }

std::string speed_header(const OptimizeResult& r) {
  return tuned_batch(r) ? "ms per batch" : fmt::format("ms (batch {})", r.batch);
}

std::string timed_at(const OptimizeResult& r) {
  return tuned_batch(r) ? "at the batch that gives it the most items/s" : fmt::format("at batch {}", r.batch);
}

// The objective's figure as the plot's x axis shows it.
double plotted(const OptimizeResult& r, const Candidate& c) {
  if (r.objective == "throughput") return c.items_per_s;
  if (r.objective == "size") return static_cast<double>(c.bytes) / 1e3;
  return c.ms;
}

std::string axis_name(const OptimizeResult& r) {
  if (r.objective == "throughput")
    return tuned_batch(r) ? "items/s, each at its best batch (higher is better)"
                          : fmt::format("items/s at batch {} (higher is better)", r.batch);
  if (r.objective == "size") return "bundle KB (lower is better)";
  return fmt::format("ms per batch of {} (lower is better)", r.batch);
}

std::string marks(const OptimizeResult& r, int i) {
  const Candidate& c = r.candidates[static_cast<size_t>(i)];
  std::string m;
  if (i == r.best) m += "best ";
  if (i == r.best_single && i != r.best) m += "best single ";
  if (c.pareto) m += "pareto ";
  if (c.error.empty() && !c.fits) m += "over budget";
  while (!m.empty() && m.back() == ' ') m.pop_back();
  return m;
}

std::string escape_xml(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '<')
      out += "&lt;";
    else if (ch == '>')
      out += "&gt;";
    else if (ch == '&')
      out += "&amp;";
    else if (ch == '"')
      out += "&quot;";
    else
      out += ch;
  }
  return out;
}

// Up to about six round tick values spanning [lo, hi].
std::vector<double> ticks(double lo, double hi) {
  const double span = hi - lo;
  double step = std::pow(10.0, std::floor(std::log10(span / 5)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (span / (step * m) <= 6) {
      step *= m;
      break;
    }
  std::vector<double> t;
  for (double v = std::ceil(lo / step) * step; v <= hi + 1e-9 * span; v += step) t.push_back(v);
  return t;
}

}  // namespace

std::string optimize_table(const OptimizeResult& r, bool markdown) {
  const Candidate& base = r.candidates.at(0);
  const bool batches = tuned_batch(r);
  // A row of a message fills the cells after the accuracy's with blanks.
  const std::string empty_cells = batches ? " | | | | | |" : " | | | | |";
  std::string s;
  if (markdown) {
    s += fmt::format("| # | candidate | accuracy | change (points) | {} |{} items/s | bundle KB | |\n", speed_header(r),
                     batches ? " batch |" : "");
    s += batches ? "|---|---|---|---|---|---|---|---|---|\n" : "|---|---|---|---|---|---|---|---|\n";
  } else {
    s += fmt::format("{:>3}  {:<56} {:>9} {:>7} {:>14}{} {:>10} {:>10}  {}\n", "#", "candidate", "accuracy", "change",
                     speed_header(r), batches ? fmt::format(" {:>6}", "batch") : "", "items/s", "KB", "");
  }
  for (size_t i = 0; i < r.candidates.size(); ++i) {
    const Candidate& c = r.candidates[i];
    const std::string m = marks(r, static_cast<int>(i));
    if (!c.error.empty()) {
      s += markdown ? fmt::format("| {} | {} | failed: {} |{}\n", i + 1, c.name, c.error, empty_cells)
                    : fmt::format("{:>3}  {:<56} failed: {}\n", i + 1, c.name, c.error);
      continue;
    }
    const double change = 100 * (c.accuracy - base.accuracy);
    const std::string batch = !batches ? "" : markdown ? fmt::format(" {} |", c.batch) : fmt::format(" {:>6}", c.batch);
    s += markdown ? fmt::format("| {} | {} | {:.4f} | {:+.2f} | {:.4f} |{} {:.0f} | {:.1f} | {} |\n", i + 1, c.name,
                                c.accuracy, change, c.ms, batch, c.items_per_s, c.bytes / 1e3, m)
                  : fmt::format("{:>3}  {:<56} {:>9.4f} {:>+7.2f} {:>14.4f}{} {:>10.0f} {:>10.1f}  {}\n", i + 1, c.name,
                                c.accuracy, change, c.ms, batch, c.items_per_s, c.bytes / 1e3, m);
  }
  for (const std::string& n : r.not_tried)
    s += markdown ? fmt::format("| | {} | not tried: the time budget ran out |{}\n", n, empty_cells)
                  : fmt::format("{:>3}  {:<56} not tried: the time budget ran out\n", "", n);
  return s;
}

std::string optimize_summary(const OptimizeResult& r) {
  const Candidate& base = r.candidates.at(0);
  std::string s = fmt::format(
      "{} candidates in {:.0f} s, each scored on {} test items and timed {} with {} threads; budget: "
      "accuracy at least {:.4f} ({:.2f} points below the unoptimised {:.4f})\n",
      r.candidates.size(), r.seconds, r.test_items, timed_at(r), r.threads, base.accuracy - r.max_accuracy_drop / 100,
      r.max_accuracy_drop, base.accuracy);
  if (r.best < 0) return s + "No candidate fits the budget.\n";
  const Candidate& best = r.candidates[static_cast<size_t>(r.best)];
  auto against = [&](const Candidate& c) {
    if (r.objective == "size") return fmt::format("{:.2f}x smaller", static_cast<double>(c.bytes) / best.bytes);
    // Throughput compares items/s: with the batch tuned, candidates ran at different batches.
    if (r.objective == "throughput") return fmt::format("{:.2f}x faster", best.items_per_s / c.items_per_s);
    return fmt::format("{:.2f}x faster", c.ms / best.ms);
  };
  s += fmt::format("Best {}: {} (accuracy {:.4f}, {:+.2f} points), {} than the unoptimised net", r.objective, best.name,
                   best.accuracy, 100 * (best.accuracy - base.accuracy), against(base));
  if (r.best_single >= 0 && r.best_single != r.best) {
    const Candidate& single = r.candidates[static_cast<size_t>(r.best_single)];
    s += fmt::format(" and {} than the best single technique, {}", against(single), single.name);
  } else if (r.best == r.best_single) {
    s += "; no combination beat this single technique";
  }
  return s + "\n";
}

nlohmann::json optimize_json(const OptimizeResult& r) {
  nlohmann::json cs = nlohmann::json::array();
  for (size_t i = 0; i < r.candidates.size(); ++i) {
    const Candidate& c = r.candidates[i];
    nlohmann::json j = {{"name", c.name},       {"techniques", c.techniques}, {"model", c.model},
                        {"weights", c.weights}, {"precision", c.precision},   {"bundle", c.bundle},
                        {"seconds", c.seconds}};
    if (!c.calibration.empty()) j["calibration"] = c.calibration;
    if (c.weight_bits > 0) j["weight_bits"] = c.weight_bits;
    if (!c.error.empty()) {
      j["error"] = c.error;
    } else {
      j["accuracy"] = c.accuracy;
      j["batch"] = c.batch;
      j["latency_ms"] = c.ms;
      j["items_per_s"] = c.items_per_s;
      j["bytes"] = c.bytes;
      j["fits"] = c.fits;
      j["pareto"] = c.pareto;
    }
    cs.push_back(j);
  }
  nlohmann::json j = {{"objective", r.objective}, {"max_accuracy_drop", r.max_accuracy_drop},
                      {"threads", r.threads},     {"test_items", r.test_items},
                      {"seconds", r.seconds},     {"candidates", cs},
                      {"not_tried", r.not_tried}};
  // The batch every candidate ran at, or "auto" when each ran at its own best.
  j["batch"] = tuned_batch(r) ? nlohmann::json("auto") : nlohmann::json(r.batch);
  j["best"] = r.best >= 0 ? nlohmann::json(r.best) : nlohmann::json(nullptr);
  j["best_single"] = r.best_single >= 0 ? nlohmann::json(r.best_single) : nlohmann::json(nullptr);
  j["summary"] = optimize_summary(r);
  return j;
}

std::string optimize_svg(const OptimizeResult& r) {
  constexpr double kW = 760, kH = 460, kLeft = 70, kRight = 20, kTop = 40, kBottom = 60;
  const Candidate& base = r.candidates.at(0);
  std::vector<size_t> shown;
  for (size_t i = 0; i < r.candidates.size(); ++i)
    if (r.candidates[i].error.empty()) shown.push_back(i);
  const double floor_accuracy = 100 * base.accuracy - r.max_accuracy_drop;
  double x0 = 1e300, x1 = -1e300, y0 = floor_accuracy, y1 = floor_accuracy;
  for (size_t i : shown) {
    x0 = std::min(x0, plotted(r, r.candidates[i]));
    x1 = std::max(x1, plotted(r, r.candidates[i]));
    y0 = std::min(y0, 100 * r.candidates[i].accuracy);
    y1 = std::max(y1, 100 * r.candidates[i].accuracy);
  }
  // The interesting band is near the budget line: candidates far below it sit on the bottom
  // edge as triangles rather than squash the rest.
  const double lowest = floor_accuracy - std::max(2.0, 2 * r.max_accuracy_drop);
  const bool clipped = y0 < lowest;
  y0 = std::max(y0, lowest);
  const double xpad = std::max((x1 - x0) * 0.08, std::fabs(x1) * 0.02 + 1e-9);
  const double ypad = std::max((y1 - y0) * 0.08, 0.05);
  x0 = std::max(0.0, x0 - xpad), x1 += xpad, y0 -= clipped ? 0 : ypad, y1 += ypad;
  auto px = [&](double x) { return kLeft + (x - x0) / (x1 - x0) * (kW - kLeft - kRight); };
  auto py = [&](double y) { return kH - kBottom - (y - y0) / (y1 - y0) * (kH - kTop - kBottom); };
  // Where a candidate is drawn: one below the plot sits on its bottom edge.
  auto point_y = [&](const Candidate& c) { return 100 * c.accuracy < y0 ? kH - kBottom : py(100 * c.accuracy); };
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"{0}\" height=\"{1}\" fill=\"white\"/>\n"
      "<text x=\"{2}\" y=\"22\" font-size=\"14\">bakusoku optimize: accuracy against {3}</text>\n",
      kW, kH, kLeft, escape_xml(r.objective));
  for (double t : ticks(x0, x1))
    s += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#eee\"/><text x=\"{0:.1f}\" y=\"{3}\" "
        "text-anchor=\"middle\">{4:.4g}</text>\n",
        px(t), kTop, kH - kBottom, kH - kBottom + 16, t);
  for (double t : ticks(y0, y1))
    s += fmt::format(
        "<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" stroke=\"#eee\"/><text x=\"{3}\" y=\"{4:.1f}\" "
        "text-anchor=\"end\">{5:.4g}</text>\n",
        kLeft, py(t), kW - kRight, kLeft - 6, py(t) + 4, t);
  s += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#888\"/>\n"
      "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n"
      "<text transform=\"translate(18 {}) rotate(-90)\" text-anchor=\"middle\">top-1 accuracy (%)</text>\n",
      kLeft, kTop, kW - kLeft - kRight, kH - kTop - kBottom, (kLeft + kW - kRight) / 2, kH - 18,
      escape_xml(axis_name(r)), (kTop + kH - kBottom) / 2);
  // The budget: candidates below this line lost more accuracy than allowed.
  s += fmt::format(
      "<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" stroke=\"#c33\" stroke-dasharray=\"6 4\"/>"
      "<text x=\"{3}\" y=\"{4:.1f}\" fill=\"#c33\" text-anchor=\"end\">accuracy budget ({5:.2f} points)</text>\n",
      kLeft, py(floor_accuracy), kW - kRight, kW - kRight - 4, py(floor_accuracy) - 4, r.max_accuracy_drop);
  // The front in the plot's two dimensions (accuracy and the objective's figure), joined
  // left to right; rings mark the three-way front (accuracy, time, size) of the table.
  const bool higher_better = r.objective == "throughput";
  std::vector<size_t> front;
  for (size_t i : shown) {
    const Candidate& c = r.candidates[i];
    bool dominated = false;
    for (size_t k : shown) {
      const Candidate& d = r.candidates[k];
      const double cx = plotted(r, c), dx = plotted(r, d);
      const bool faster = higher_better ? dx > cx : dx < cx, as_fast = higher_better ? dx >= cx : dx <= cx;
      dominated |= k != i && d.accuracy >= c.accuracy && as_fast && (d.accuracy > c.accuracy || faster);
    }
    if (!dominated) front.push_back(i);
  }
  std::sort(front.begin(), front.end(),
            [&](size_t a, size_t b) { return plotted(r, r.candidates[a]) < plotted(r, r.candidates[b]); });
  if (front.size() > 1) {
    s += "<polyline fill=\"none\" stroke=\"#39c\" stroke-width=\"1.5\" points=\"";
    for (size_t i : front)
      s += fmt::format("{:.1f},{:.1f} ", px(plotted(r, r.candidates[i])), point_y(r.candidates[i]));
    s += "\"/>\n";
  }
  // Points carry their row number in the table (names would overlap); hovering shows the name.
  for (size_t i : shown) {
    const Candidate& c = r.candidates[i];
    const bool best = static_cast<int>(i) == r.best, below = 100 * c.accuracy < y0;
    const double x = px(plotted(r, c)), y = point_y(c);
    const char* fill = best ? "#e80" : c.fits ? "#393" : "#aaa";
    const std::string title =
        fmt::format("<title>{} {}: {:.4f}, {:.4g}</title>", i + 1, escape_xml(c.name), c.accuracy, plotted(r, c));
    if (below)
      s += fmt::format("<path d=\"M{:.1f} {:.1f} l-5 -8 h10 z\" fill=\"{}\">{}</path>\n", x, y, fill, title);
    else
      s += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"{}\" fill=\"{}\"{}>{}</circle>\n", x, y, best ? 6 : 4,
                       fill, c.pareto ? " stroke=\"#39c\" stroke-width=\"2\"" : "", title);
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"10\"{}>{}</text>\n", x + 6, below ? y - 10 : y - 5,
                     best ? " font-weight=\"bold\"" : "", i + 1);
  }
  // The legend, and the choice by name.
  s += fmt::format(
      "<text x=\"{0}\" y=\"{1}\"><tspan fill=\"#393\">&#9679;</tspan> within the budget  <tspan "
      "fill=\"#aaa\">&#9679;</tspan> outside it{2}  <tspan fill=\"#39c\">&#9711;</tspan> Pareto front  <tspan "
      "fill=\"#e80\">&#9679;</tspan> chosen</text>\n",
      kLeft, kH - 4, clipped ? " (&#9660; below the plot)" : "");
  if (r.best >= 0)
    s += fmt::format("<text x=\"{}\" y=\"34\" font-weight=\"bold\" text-anchor=\"end\">chosen: {} {}</text>\n",
                     kW - kRight, r.best + 1, escape_xml(r.candidates[static_cast<size_t>(r.best)].name));
  return s + "</svg>\n";
}

}  // namespace bks
