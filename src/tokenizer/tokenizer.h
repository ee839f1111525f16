// Tokenizers built from GGUF metadata (tokenizer.ggml.*).
//
// Tokenizer::from_gguf picks the algorithm from tokenizer.ggml.model: "llama" is
// SentencePiece-style BPE (merge the adjacent pair with the highest score, leading-space
// dummy prefix, byte fallback <0xNN>; spm.h); "gpt2" is byte-level BPE (ranked merges
// after a regex pre-tokenizer; bpe.h); other models raise Unsupported naming the model.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace treespec::gguf {
class GgufFile;
}

namespace treespec::tokenizer {

enum class TokenType : int32_t {
  undefined = 0,
  normal = 1,
  unknown = 2,
  control = 3,
  user_defined = 4,
  unused = 5,
  byte = 6,
};

struct Vocab {
  std::string model;                // tokenizer.ggml.model
  std::string pre;                  // tokenizer.ggml.pre (may be empty)
  std::vector<std::string> tokens;  // piece text, '▁' (U+2581) for spaces in SPM vocabs
  std::vector<float> scores;        // empty or one per token
  std::vector<TokenType> types;     // one per token (normal when absent)
  std::vector<std::string> merges;  // BPE merges "a b" (gpt2-style models)
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t eot_id = -1;
  int32_t eom_id = -1;
  int32_t unk_id = -1;
  int32_t pad_id = -1;
  bool add_bos = true;
  bool add_eos = false;
  bool add_space_prefix = true;  // tokenizer.ggml.add_space_prefix

  // Whitespace stripping next to special tokens matched in text (llama.cpp's LSTRIP /
  // RSTRIP token attributes, set by model name since GGUF has no key for them): empty,
  // or one entry per token with bit kStripLeft / kStripRight. load_vocab sets them for
  // Phi-3 models as llama.cpp does.
  static constexpr uint8_t kStripLeft = 1;
  static constexpr uint8_t kStripRight = 2;
  std::vector<uint8_t> strip;

  int32_t n_tokens() const { return static_cast<int32_t>(tokens.size()); }
  TokenType type(int32_t id) const { return types[static_cast<size_t>(id)]; }

  // End of generation, the one rule: eos, eot and eom (those that exist), ascending,
  // without repeats. Run, bench, serve and train-heads take their ids from here (through
  // Tokenizer::eog_ids); the engine's default and drafters given none through
  // tokenizer::eog_ids(file, n_vocab).
  std::vector<int32_t> eog_ids() const;
  bool is_eog(int32_t id) const { return id >= 0 && (id == eos_id || id == eot_id || id == eom_id); }
};

// Reads tokenizer.ggml.* from a GGUF file; FormatError naming the key on bad metadata
// (e.g. token ids out of range, scores/types of the wrong length).
//
// Defaults for model "llama" (as llama.cpp): bos 1, eos 2, unk 0, add_bos true,
// add_eos false, add_space_prefix true. For "gpt2": no default ids, add_space_prefix
// false, add_bos true only for the Llama 3 pre-tokenizer (llama-bpe). When
// tokenizer.ggml.eot_token_id / eom_token_id are absent, a token spelled like a known
// end-of-turn marker ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", ...;
// "<|eom_id|>") is taken, as llama.cpp does. See docs/tokenizer.md.
Vocab load_vocab(const gguf::GgufFile& file);

// The end-of-generation ids of a model file without building a tokenizer: its
// vocabulary's (Vocab::eog_ids) below n_vocab, or none when the file has no vocabulary.
// FormatError as load_vocab.
std::vector<int32_t> eog_ids(const gguf::GgufFile& file, int32_t n_vocab);

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  static std::unique_ptr<Tokenizer> create(Vocab vocab);
  static std::unique_ptr<Tokenizer> from_gguf(const gguf::GgufFile& file);

  // add_special: add BOS (and EOS) as the vocab's add_bos/add_eos flags say.
  // parse_special: text such as "<s>" that spells a control/user-defined token becomes
  // that token; otherwise it is ordinary text. Invalid UTF-8 is encoded through byte
  // fallback (never dropped, never an exception).
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special = true,
                                      bool parse_special = false) const = 0;

  // Text of one token: byte tokens become their raw byte, '▁' becomes ' ', control
  // tokens become "" unless render_special.
  virtual std::string token_to_piece(int32_t id, bool render_special = false) const = 0;

  // Whole-sequence decode: concatenates pieces; for vocabs with the dummy-prefix space
  // (add_space_prefix) drops the leading space of the first piece after BOS
  // (SentencePiece convention). May contain invalid UTF-8 if the ids do.
  std::string decode(const std::vector<int32_t>& ids, bool render_special = false) const;

  const Vocab& vocab() const { return vocab_; }
  int32_t n_vocab() const { return static_cast<int32_t>(vocab_.tokens.size()); }
  int32_t bos_id() const { return vocab_.bos_id; }
  int32_t eos_id() const { return vocab_.eos_id; }
  // End of generation: eos, eot or eom (Vocab::eog_ids).
  bool is_eog(int32_t id) const { return vocab_.is_eog(id); }
  std::vector<int32_t> eog_ids() const { return vocab_.eog_ids(); }
  bool is_control(int32_t id) const;
  bool is_byte(int32_t id) const;

  // Exact piece lookup (the vocab's spelling, e.g. "\xe2\x96\x81the"); -1 if absent.
  // With duplicate spellings the lowest id wins.
  int32_t token_id(std::string_view piece) const;
  // Token for a raw byte: "<0xNN>", else the one-byte piece, else unk (-1 if none).
  int32_t byte_token(uint8_t b) const { return byte_to_token_[b]; }

 protected:
  explicit Tokenizer(Vocab vocab);

  // Text split around special tokens written literally in it (llama.cpp's
  // tokenizer_st_partition): user-defined tokens always, control and unknown tokens
  // only when parse_special; longer tokens first; strip attributes applied.
  struct Fragment {
    int32_t token = -1;  // >= 0: a special token; -1: raw text [offset, offset + length)
    size_t offset = 0;
    size_t length = 0;
  };
  std::vector<Fragment> partition_special(std::string_view text, bool parse_special) const;

  Vocab vocab_;
  std::unordered_map<std::string, int32_t> token_to_id_;
  std::array<int32_t, 256> byte_to_token_{};
  std::vector<int32_t> special_by_length_;  // control / user-defined / unknown ids, longest first
};

// Incremental decoder for streaming: returns only complete UTF-8 text, holding back a
// partial multi-byte sequence until its remaining bytes arrive; flush() returns the rest
// (invalid bytes replaced by U+FFFD).
//
// Applies the same rule as Tokenizer::decode: with add_space_prefix, the piece right
// after BOS loses its leading space. When streaming only generated tokens, prime() with the prompt's last
// token so that rule sees it.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok, bool render_special = false)
      : tok_(tok), render_special_(render_special) {}
  std::string push(int32_t id);
  std::string flush();
  void prime(int32_t prev_token) { prev_ = prev_token; }

 private:
  const Tokenizer& tok_;
  bool render_special_ = false;
  std::string pending_;
  int32_t prev_ = -1;
};

}  // namespace treespec::tokenizer
