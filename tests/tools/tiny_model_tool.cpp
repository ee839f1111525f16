// Writes the architecture families of tests/common/arch_families.h as GGUF files, for
// side-by-side greedy runs against the reference engines in ../shared/anchors
// (scripts/arch_vs_anchor.sh; never part of the test suite).
//
//   tiny_model_tool --list
//   tiny_model_tool FAMILY OUT.gguf [--bpe | --gemma-vocab] [--scale S] [--seed N]
//     --bpe: a byte-level BPE vocabulary, so any engine tokenizes a text prompt the same way;
//     --gemma-vocab: a Gemma-style SentencePiece vocabulary (scripts/tokenize_vs_anchor.sh);
//     --n-vocab: the vocabulary's size (e.g. Gemma's 262144: padding pieces);
//     --arch: write the same weights under another general.architecture (to see whether
//       a reference engine treats two names alike);
//     --scale: weight scale (default the family's), larger gives less repetitive text;
//     --seed: another draw of the random weights.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include "common/arch_families.h"

int main(int argc, char** argv) {
  using namespace treespec;
  if (argc == 2 && std::strcmp(argv[1], "--list") == 0) {
    for (const test::Family& f : test::families()) std::printf("%s %s\n", f.name, f.cfg.arch.c_str());
    return 0;
  }
  bool bpe = false, gemma_vocab = false;
  float scale = 0.0f;
  unsigned long long seed = 0;
  long n_vocab = 0;
  std::string arch;
  bool ok = argc >= 3;
  for (int i = 3; ok && i < argc; ++i) {
    if (std::strcmp(argv[i], "--bpe") == 0) {
      bpe = true;
    } else if (std::strcmp(argv[i], "--gemma-vocab") == 0) {
      gemma_vocab = true;
    } else if (std::strcmp(argv[i], "--n-vocab") == 0 && i + 1 < argc) {
      n_vocab = std::strtol(argv[++i], nullptr, 10);
      ok = n_vocab > 0 && n_vocab <= (1L << 22);
    } else if (std::strcmp(argv[i], "--arch") == 0 && i + 1 < argc) {
      arch = argv[++i];
    } else if (std::strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else if (std::strcmp(argv[i], "--scale") == 0 && i + 1 < argc) {
      scale = std::strtof(argv[++i], nullptr);
      ok = scale > 0.0f;
    } else {
      ok = false;
    }
  }
  if (!ok || (bpe && gemma_vocab)) {
    std::fprintf(stderr,
                 "usage: tiny_model_tool --list | FAMILY OUT.gguf [--bpe | --gemma-vocab] [--n-vocab N] [--arch A] "
                 "[--scale S] [--seed N]\n");
    return 2;
  }
  for (test::Family f : test::families()) {
    if (f.name != std::string(argv[1])) continue;
    if (bpe) {
      f.cfg.tokenizer = "gpt2";
      f.cfg.bpe_pre = "qwen2";
      f.cfg.n_vocab = std::max(f.cfg.n_vocab, 320);
    }
    if (gemma_vocab) {
      f.cfg.tokenizer = "gemma";
      f.cfg.n_vocab = 1024;
    }
    if (n_vocab > 0) f.cfg.n_vocab = static_cast<int32_t>(n_vocab);
    if (!arch.empty()) f.cfg.arch = arch;
    if (scale > 0.0f) f.cfg.weight_scale = scale;
    if (seed > 0) f.cfg.seed = seed;
    // llama.cpp-family loaders default the rotated dims to n_embd / n_head, not to
    // key_length: state them whenever the head size differs.
    if (f.cfg.head_dim > 0 && f.cfg.n_rot == 0) f.cfg.n_rot = f.cfg.head_dim;
    // llama.cpp's Gemma 2 graph aborts unless the layer count is one of the released
    // models' (26, 42, 46: it picks the query scale by size); 26 = Gemma 2 2B.
    if (f.cfg.arch == "gemma2") f.cfg.n_layer = 26;
    try {
      test::write_tiny_model(argv[2], f.cfg);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tiny_model_tool: %s\n", e.what());
      return 1;
    }
    return 0;
  }
  std::fprintf(stderr, "tiny_model_tool: no family '%s' (--list names them)\n", argv[1]);
  return 2;
}
