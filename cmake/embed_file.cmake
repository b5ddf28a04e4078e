# Writes OUTPUT, a C++ file defining `std::string_view NAMESPACE::FUNCTION()` that returns the
# bytes of INPUT. Bytes, not a raw string literal: no content can end the literal early.
# cmake -DINPUT=... -DOUTPUT=... -DNAMESPACE=... -DFUNCTION=... -DHEADER=... -P embed_file.cmake
file(READ "${INPUT}" hex HEX)
string(LENGTH "${hex}" hex_length)
math(EXPR size "${hex_length} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "'\\\\x\\1'," bytes "${hex}")
string(REGEX REPLACE "(([^,]*,){16})" "\\1\n    " bytes "${bytes}")
file(WRITE "${OUTPUT}.tmp" "// Generated from ${INPUT} by cmake/embed_file.cmake; do not edit.
#include \"${HEADER}\"

namespace ${NAMESPACE} {
namespace {
constexpr char kBytes[] = {
    ${bytes}'\\0'};
}  // namespace

std::string_view ${FUNCTION}() { return {kBytes, ${size}}; }

}  // namespace ${NAMESPACE}
")
file(RENAME "${OUTPUT}.tmp" "${OUTPUT}")
