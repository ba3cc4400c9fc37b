// One byte string holding named strings (a bundle's metadata: its graph, what deploy did)
// and named, shaped byte blobs (its coded weights), for bundles written by
// `deploy --compress` (engine/bundle.h, format 4). On a small net the metadata as plain
// JSON is as large as the coded weights; here it is deflated as one stream, and each entry
// costs a few bytes instead of a JSON object.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"

namespace bks {

struct PackedBlob {
  std::string name;
  Shape shape;  // of the tensor the bytes code
  std::string bytes;  // not empty
};

struct PackedParts {
  std::map<std::string, std::string> strings;
  std::vector<PackedBlob> blobs;
};

std::string pack_parts(const PackedParts& p);
// InputError "<what>: corrupt bundle: ..." when `bytes` are not what pack_parts writes.
// Shapes are returned as stored: the caller checks them.
PackedParts unpack_parts(std::string_view bytes, const std::string& what);

}  // namespace bks
