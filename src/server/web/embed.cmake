# cmake -DIN=page.html -DOUT=page.cpp -DNAME=chat_page_html -P embed.cmake
# Writes OUT defining `std::string_view treespec::server::NAME()` with IN's bytes (as a
# char array, so any content is safe), for `treespec serve`'s built-in page.
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" n)
math(EXPR n_bytes "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "'\\\\x\\1'," body "${hex}")
string(REGEX REPLACE "((('\\\\x[0-9a-f][0-9a-f]',)){32})" "\\1\n" body "${body}")
file(WRITE "${OUT}.tmp" "// Generated from ${IN} by src/server/web/embed.cmake; do not edit.\n#include <string_view>\nnamespace treespec::server {\nnamespace {\nconstexpr char kBytes[${n_bytes} + 1] = {\n${body}'\\0'};\n}  // namespace\nstd::string_view ${NAME}() { return {kBytes, ${n_bytes}}; }\n}  // namespace treespec::server\n")
file(RENAME "${OUT}.tmp" "${OUT}")
