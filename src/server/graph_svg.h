// A drawing of a network for the dashboard: its TRAIN-phase net (the batch the user chose)
// laid out by Graphviz's `dot` (net_dot.h says what it shows), as SVG that scales to the
// width of the page.
#pragma once

#include <string>

namespace bks::server {

// Limits on one drawing: dot lays out a few thousand layers in seconds; a net too large
// for it to finish in time gets a clear error rather than holding a server thread.
constexpr double kDrawTimeoutS = 10;
constexpr size_t kMaxDrawingBytes = size_t{32} << 20;

// SVG text for the net in `net_file` (built once to know every shape; its data layers'
// files must exist), drawn by running `dot_program` (looked up on PATH). Throws InputError
// naming the file when the net does not build; ApiError 503 when `dot_program` is missing
// (install Debian's graphviz) or runs out of time, 500 when it fails.
std::string network_svg(const std::string& net_file, const std::string& dot_program = "dot");

// dot's SVG made to fill the width of whatever shows it: its fixed width and height
// (in points) replaced by width="100%", keeping the viewBox that gives the proportions.
// A drawing narrower than `min_width` points is centred in a viewBox that wide, so a
// small net is not blown up to the width of the page.
constexpr double kMinDrawingWidthPt = 900;
std::string fit_svg_to_width(std::string svg, double min_width = kMinDrawingWidthPt);

}  // namespace bks::server
