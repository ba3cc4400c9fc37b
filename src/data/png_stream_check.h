// A PNG's compressed pixels checked with zlib before stb decodes them. stb's inflate reads
// zeros past the end of a truncated or corrupt stream and can keep writing output until
// it asks for gigabytes (a fuzzed 3 x 4 PNG made it realloc 2 GiB); zlib stops at the
// end of its input. Only a complete stream that inflates to no more than the image can
// hold goes on to stb.
#pragma once

#include <string>
#include <string_view>

namespace bks {

// Whether the IDAT chunks of PNG file `bytes` (signature already checked) hold one complete
// zlib stream inflating to at most what a `width` x `height` image of any PNG pixel format
// needs; false with `why` otherwise.
bool png_stream_is_bounded(std::string_view bytes, int width, int height, std::string& why);

}  // namespace bks
