#include "server/images.h"

namespace bks::server {

Decoded decode_chw(const std::string& bytes, int c, int h, int w, std::vector<uint8_t>& chw, std::string& why) {
  ImageDecodeOptions o;
  o.channels = c;
  o.height = h;
  o.width = w;
  o.resize = ImageDecodeOptions::Resize::filtered;
  DecodedImage img;
  Decoded d = decode_image(bytes, o, img, why);
  if (d == Decoded::ok) chw.insert(chw.end(), img.chw.begin(), img.chw.end());
  return d;
}

}  // namespace bks::server
