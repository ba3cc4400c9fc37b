// What bakusoku optimize shows and writes of its search (engine/optimize.h): one table (plain
// text for the terminal, Markdown for a file), the same as JSON, and an SVG plot of accuracy
// against the objective's figure with the Pareto front, the budget line and the choice marked.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "engine/optimize.h"

namespace bks {

// `markdown`: a GitHub table; otherwise aligned columns.
std::string optimize_table(const OptimizeResult& r, bool markdown);
// The choice against the unoptimised net and against the best single technique, in words.
std::string optimize_summary(const OptimizeResult& r);
nlohmann::json optimize_json(const OptimizeResult& r);
std::string optimize_svg(const OptimizeResult& r);

}  // namespace bks
