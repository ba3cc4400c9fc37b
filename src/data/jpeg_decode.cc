#include "data/jpeg_decode.h"

#include <csetjmp>
#include <cstdio>
// jpeglib.h needs FILE and size_t declared first.
#include <jpeglib.h>

namespace bks {
namespace {

// libjpeg reports a fatal error through error_exit, which must not return: it jumps back to
// decode_jpeg's setjmp with the message. No C++ object is created between the two.
struct ErrorJump {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void error_exit(j_common_ptr cinfo) {
  auto* e = reinterpret_cast<ErrorJump*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, e->message);
  std::longjmp(e->jump, 1);
}

void no_output(j_common_ptr) {}  // warnings (e.g. a truncated file's) go to the caller, not stderr

}  // namespace

bool decode_jpeg(std::string_view bytes, int channels, int64_t max_pixels, std::vector<uint8_t>& hwc, int& width,
                 int& height, std::string& why) {
  jpeg_decompress_struct cinfo;
  ErrorJump err;
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = error_exit;
  err.mgr.output_message = no_output;
  err.message[0] = 0;
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    why = err.message;
    return false;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&cinfo, TRUE);
  // The caller checked the size stb reads from the header; libjpeg's reading must agree.
  if (static_cast<int64_t>(cinfo.image_width) * cinfo.image_height > max_pixels) {
    jpeg_destroy_decompress(&cinfo);
    why = "more pixels than the header first read declared";
    return false;
  }
  if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
    jpeg_destroy_decompress(&cinfo);
    why = "a CMYK JPEG";
    return false;
  }
  cinfo.out_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_start_decompress(&cinfo);
  width = static_cast<int>(cinfo.output_width);
  height = static_cast<int>(cinfo.output_height);
  const size_t row = static_cast<size_t>(width) * static_cast<size_t>(channels);
  hwc.resize(row * static_cast<size_t>(height));
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW line = hwc.data() + row * cinfo.output_scanline;
    jpeg_read_scanlines(&cinfo, &line, 1);
  }
  // A file with extraneous bytes or cut short decodes with a warning (and grey rows where
  // data is missing), as OpenCV decodes it for Caffe.
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return true;
}

}  // namespace bks
