// Prompt sets for `treespec bench` and `treespec train-heads` (the one prompt-file reader):
// JSONL files (one object per line), JSON arrays of objects, plain text (one prompt per
// line), or lines (one prompt per line, a line starting with '{' being a JSON object;
// train-heads' default), each optionally gzip-compressed (.gz).
//
// The prompt of an object is one field: a string, or an array of strings (MT-Bench /
// Spec-Bench "turns") from which `turn` is taken. Without an explicit field the first
// present of prompt, turns, question, text, instruction, input, content is used, so the
// shared sets (Spec-Bench, MT-Bench, GSM8K, HumanEval, MBPP, the stories260K goldens)
// load without options. Every malformed line is an error naming file, line and field.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace treespec::bench {

// One --prompts argument: PATH[:KEY=VALUE...] with keys field, turn, format
// (jsonl | json | text | lines), name.
struct PromptSource {
  std::string path;
  std::string field;  // empty = auto-detect
  int32_t turn = 0;
  std::string format;  // empty = from the extension (.jsonl, .json, otherwise text) or the caller's default
  std::string name;    // label in tables; default = file name without extensions
};

PromptSource parse_prompt_source(std::string_view arg);

struct PromptSet {
  std::string name;
  std::string path;
  std::string format;  // resolved
  std::string field;   // resolved ("" for text)
  int32_t turn = 0;
  int64_t n_available = 0;           // prompts in the file
  std::vector<std::string> prompts;  // the first n_prompts (all if n_prompts == 0)
};

// Loads a prompt set; n_prompts > 0 keeps the first n_prompts. IoError / FormatError
// naming the file and line.
PromptSet load_prompts(const PromptSource& src, int64_t n_prompts = 0);

// Whole file as bytes, gunzipped when it starts with the gzip magic. IoError / FormatError.
std::string read_file_maybe_gzip(const std::string& path);

}  // namespace treespec::bench
