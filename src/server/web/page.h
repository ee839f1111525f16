// The chat page `treespec serve` answers at `/` (src/server/web/chat.html, embedded in
// the binary at build time by embed.cmake: no files are read at run time and the page
// loads no external assets). docs/server.md, "Chat page".
#pragma once

#include <string_view>

namespace treespec::server {

std::string_view chat_page_html();

}  // namespace treespec::server
