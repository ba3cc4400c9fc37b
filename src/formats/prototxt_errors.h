// Protobuf's text-format parse errors in the words of the file they are about: the layer
// (its name and type) and the field's path as the file spells it
// ("inner_product_param.weight_filler.typ"), never protobuf's message type names
// (bks.proto.FillerParameter), which mean nothing to whoever wrote the file.
#pragma once

#include <google/protobuf/message.h>
#include <google/protobuf/text_format.h>

#include <string>

namespace bks {

// One error of protobuf's parser, as its ErrorCollector receives it (0-based line and column).
struct TextParseError {
  int line = -1, column = -1;
  std::string message;
};

// "name:LINE[:COL]: [layer 'n' (type): ]field 'path': what" for `e`, an error in `text`
// parsed as a `root` message. Unknown fields keep the "name:LINE:" form (the field names
// the place well enough).
std::string describe_parse_error(const std::string& text, const std::string& name,
                                 const google::protobuf::Descriptor* root, const TextParseError& e);

// The same for `parsed`, which parsed but lacks a required field (`tree`: its locations),
// naming the first missing one: "name:LINE: layer 'c' (Clip): field 'clip_param.max' is
// required". Empty when nothing is missing.
std::string describe_missing_fields(const std::string& name, const google::protobuf::Message& parsed,
                                    const google::protobuf::TextFormat::ParseInfoTree& tree);

}  // namespace bks
