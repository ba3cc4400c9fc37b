// Reading protobuf text and binary files against bakusoku's Caffe schema, with errors that
// name the file, line and column (protobuf's own parser does the parsing).
#pragma once

#include <google/protobuf/message.h>

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace bks {

// Parses `path` as text format into `msg`. Throws InputError "path:line[:col]: what" on a
// syntax error, an unknown field or a missing required one, naming the layer and the field's
// path as the file spells it (prototxt_errors.h). `layer_lines`, when given, receives the
// line of each element of the repeated field `layer` (for error messages about layers), or
// where that is empty, of `layers` (an old net, caffe_upgrade.h).
void read_prototxt(const std::string& path, google::protobuf::Message& msg, std::vector<int>* layer_lines = nullptr);
void parse_prototxt_string(const std::string& text, const std::string& name, google::protobuf::Message& msg,
                           std::vector<int>* layer_lines = nullptr);

}  // namespace bks
