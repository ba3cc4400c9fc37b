// The words on a network drawing (net_dot.h): names made safe for Graphviz's HTML-like
// labels (and so for the SVG it writes), shapes and a layer's key attributes.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "graph/graph.h"

namespace bks::server {

// `s` as text inside a DOT HTML-like label: XML's special characters as entities, control
// characters as spaces and invalid UTF-8 as '?' (Graphviz and XML refuse them).
std::string dot_html_text(std::string_view s);

// A blob's shape as people read it: "64×20×24×24"; "scalar" for a shape without axes.
std::string shape_text(const Shape& s);

// A layer's key attributes in a few words ("num_output 20, kernel 5×5, stride 1"), from
// a short list of attributes known to matter; "" for layers with none of them.
std::string attrs_text(const Node& n);

// ", "-separated `text` as lines of about `width` characters, for a box that stays narrow.
std::vector<std::string> wrap(const std::string& text, size_t width);

}  // namespace bks::server
