#include "server/images.h"

#include <stb_image.h>
#include <stb_image_resize.h>

namespace bks::server {

bool decode_chw(const std::string& bytes, int c, int h, int w, std::vector<uint8_t>& chw, std::string& why) {
  int iw = 0, ih = 0, ic = 0;
  stbi_uc* px = stbi_load_from_memory(reinterpret_cast<const stbi_uc*>(bytes.data()), static_cast<int>(bytes.size()),
                                      &iw, &ih, &ic, c);
  if (!px) {
    why = stbi_failure_reason();
    return false;
  }
  std::vector<uint8_t> hwc(static_cast<size_t>(w * h * c));
  int ok = stbir_resize_uint8(px, iw, ih, 0, hwc.data(), w, h, 0, c);
  stbi_image_free(px);
  if (!ok) {
    why = "cannot resize";
    return false;
  }
  for (int ch = 0; ch < c; ++ch)  // HWC -> CHW
    for (int i = 0; i < w * h; ++i) chw.push_back(hwc[static_cast<size_t>(i * c + ch)]);
  return true;
}

}  // namespace bks::server
