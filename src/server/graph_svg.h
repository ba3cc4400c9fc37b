// A drawing of a network for the dashboard: its TEST-phase layers as boxes (name, type)
// in rows by depth, with every blob an arrow labelled with its name and shape.
#pragma once

#include <string>

namespace bks::server {

// SVG text for the net in `net_file` (built once to know every shape; its data layers'
// files must exist). Throws InputError naming the file when it does not build.
std::string network_svg(const std::string& net_file);

}  // namespace bks::server
