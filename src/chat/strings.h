// Python str operations on UTF-8 strings, shared by the str methods and the filters.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace treespec::chat {

std::vector<std::string> py_split(std::string_view s, const std::string* sep, int64_t maxsplit);
std::vector<std::string> py_rsplit(std::string_view s, const std::string* sep, int64_t maxsplit);
std::vector<std::string> py_splitlines(std::string_view s, bool keepends = false);
std::string py_replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count);
std::string py_title(std::string_view s);       // str.title()
std::string py_capitalize(std::string_view s);  // str.capitalize()
std::string py_center(std::string_view s, int64_t width, char32_t fill = ' ');
int64_t py_count(std::string_view s, std::string_view sub);
// Code-point index of the first / last occurrence, -1 when absent.
int64_t py_find(std::string_view s, std::string_view sub, bool reverse = false);
bool py_islower(std::string_view s);
bool py_isupper(std::string_view s);
std::string html_escape(std::string_view s);

}  // namespace treespec::chat
