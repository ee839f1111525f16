// Tokenizers built from GGUF metadata (tokenizer.ggml.*).
//
// Tokenizer::from_gguf picks the algorithm from tokenizer.ggml.model: "llama" is
// SentencePiece-style BPE (merge the adjacent pair with the highest score, leading-space
// dummy prefix, byte fallback <0xNN>); other models raise Unsupported naming the model.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
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
  std::string model;                 // tokenizer.ggml.model
  std::string pre;                   // tokenizer.ggml.pre (may be empty)
  std::vector<std::string> tokens;   // piece text, '▁' (U+2581) for spaces in SPM vocabs
  std::vector<float> scores;         // empty or one per token
  std::vector<TokenType> types;      // one per token (normal when absent)
  std::vector<std::string> merges;   // BPE merges "a b" (gpt2-style models)
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t eot_id = -1;
  int32_t eom_id = -1;
  int32_t unk_id = -1;
  int32_t pad_id = -1;
  bool add_bos = true;
  bool add_eos = false;
  bool add_space_prefix = true;      // tokenizer.ggml.add_space_prefix
};

// Reads tokenizer.ggml.* from a GGUF file; FormatError naming the key on bad metadata
// (e.g. token ids out of range, scores/types of the wrong length).
Vocab load_vocab(const gguf::GgufFile& file);

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

  // Whole-sequence decode: concatenates pieces; drops the leading space of the first
  // piece after BOS (SentencePiece convention). May contain invalid UTF-8 if the ids do.
  std::string decode(const std::vector<int32_t>& ids, bool render_special = false) const;

  const Vocab& vocab() const { return vocab_; }
  int32_t n_vocab() const { return static_cast<int32_t>(vocab_.tokens.size()); }
  int32_t bos_id() const { return vocab_.bos_id; }
  int32_t eos_id() const { return vocab_.eos_id; }
  // End of generation: eos, eot or eom.
  bool is_eog(int32_t id) const;
  std::vector<int32_t> eog_ids() const;
  bool is_control(int32_t id) const;

 protected:
  explicit Tokenizer(Vocab vocab) : vocab_(std::move(vocab)) {}
  Vocab vocab_;
};

// Incremental decoder for streaming: returns only complete UTF-8 text, holding back a
// partial multi-byte sequence until its remaining bytes arrive; flush() returns the rest
// (invalid bytes replaced by U+FFFD).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok) : tok_(tok) {}
  std::string push(int32_t id);
  std::string flush();

 private:
  const Tokenizer& tok_;
  std::string pending_;
  int32_t prev_ = -1;
};

}  // namespace treespec::tokenizer
