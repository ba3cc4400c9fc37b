# Writes OUT, a C++ source defining bks::server::web_assets(): every file in FILES (a
# ;-separated list) as bytes, by file name. Run by the build when a file under web/ changes.
set(body "")
set(table "")
set(i 0)
foreach(f IN LISTS FILES)
  get_filename_component(name "${f}" NAME)
  file(READ "${f}" hex HEX)
  string(LENGTH "${hex}" len)
  math(EXPR size "${len} / 2")
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
  string(APPEND body "const unsigned char f${i}[] = {${bytes} 0};\n")
  string(APPEND table "      {\"${name}\", std::string_view(reinterpret_cast<const char*>(f${i}), ${size})},\n")
  math(EXPR i "${i} + 1")
endforeach()
file(WRITE "${OUT}.tmp" "// Generated from web/ by cmake/embed_files.cmake; do not edit.
#include \"server/web_assets.h\"

namespace bks::server {
namespace {
${body}}  // namespace

const std::map<std::string, std::string_view>& web_assets() {
  static const std::map<std::string, std::string_view> assets{
${table}  };
  return assets;
}

}  // namespace bks::server
")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
