// Builtin filters, split by kind: filters_text.cpp (strings, numbers, tojson) and
// filters_seq.cpp (sequences, mappings, the registry).
#pragma once

#include "chat/interpreter.h"

namespace treespec::chat::filters {

#define TREESPEC_FILTER(name) Value name(Interpreter& in, const Value& v, Args& a)
TREESPEC_FILTER(f_abs);
TREESPEC_FILTER(f_capitalize);
TREESPEC_FILTER(f_center);
TREESPEC_FILTER(f_default);
TREESPEC_FILTER(f_escape);
TREESPEC_FILTER(f_float);
TREESPEC_FILTER(f_format);
TREESPEC_FILTER(f_indent);
TREESPEC_FILTER(f_int);
TREESPEC_FILTER(f_lower);
TREESPEC_FILTER(f_replace);
TREESPEC_FILTER(f_round);
TREESPEC_FILTER(f_safe);
TREESPEC_FILTER(f_string);
TREESPEC_FILTER(f_title);
TREESPEC_FILTER(f_tojson);
TREESPEC_FILTER(f_trim);
TREESPEC_FILTER(f_truncate);
TREESPEC_FILTER(f_upper);
TREESPEC_FILTER(f_wordcount);
TREESPEC_FILTER(f_attr);
#undef TREESPEC_FILTER

// str(v) as Jinja2's soft_str: Undefined becomes "".
std::string soft_str(const Value& v);

}  // namespace treespec::chat::filters
