// A multi-turn conversation with one model (`treespec chat`, `run -cnv`): the messages
// are rendered with the model's chat template (chat::Formatter, exactly as `serve` renders
// /v1/chat/completions), each answer is decoded by an Engine with one slot and its prefix
// cache on, so the next turn reuses the KV of everything before it and prefills only its
// new tokens. Every answer equals what `run` gives for the same rendered prompt, with any
// drafter (the prefix cache's cells are the bits a fresh prefill computes; docs/kv.md).
#pragma once

#include <nlohmann/json.hpp>

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "chat/formatter.h"
#include "cli/session.h"
#include "engine/engine.h"

namespace treespec::cli {

struct ConversationConfig {
  engine::SequenceParams sequence;  // sampling, verification, n_predict per answer
  drafters::SpecConfig spec;
  std::string system_prompt;  // "" = none
};

struct TurnResult {
  std::string text;  // the answer as added to the messages
  engine::FinishReason finish = engine::FinishReason::none;
  engine::SpecStats stats;      // of this answer (n_prompt_cached: prompt tokens whose KV was reused)
  std::vector<int32_t> prompt;  // the rendered conversation's tokens this answer continued
  std::vector<int32_t> tokens;  // the answer's tokens
};

class Conversation {
 public:
  // The engine must have one free slot and its prefix cache on (make_chat_engine_params);
  // model, engine and formatter must outlive the conversation.
  Conversation(const LoadedModel& m, engine::Engine& eng, const chat::Formatter& fmt, ConversationConfig cfg);
  ~Conversation();

  // Adds the user's message and generates the assistant's answer, streaming its text to
  // on_text (complete UTF-8 only; stop strings of a built-in format cut it). cancel()
  // ends it early: the partial answer is kept (finish "cancelled"). InvalidArgument when
  // the conversation no longer fits the context (the user's message is not kept then);
  // TemplateError from the template.
  TurnResult reply(const std::string& user, const std::function<void(const std::string&)>& on_text = {});
  // Safe from a signal handler or another thread: the running (or next) answer stops at
  // its next step.
  void cancel() { cancel_.store(true); }

  void reset();  // back to the system prompt alone (the KV stays cached for a repeat)
  const nlohmann::ordered_json& messages() const { return messages_; }
  // Writes the messages as JSON (what `chat-template --messages` reads). IoError.
  void save(const std::string& path) const;
  const TurnResult* last() const { return last_ ? last_.get() : nullptr; }

 private:
  const LoadedModel& m_;
  engine::Engine& eng_;
  const chat::Formatter& fmt_;
  ConversationConfig cfg_;
  std::unique_ptr<engine::BudgetPolicy> policy_;
  nlohmann::ordered_json messages_ = nlohmann::ordered_json::array();
  std::unique_ptr<TurnResult> last_;
  std::atomic<bool> cancel_{false};
};

// Engine parameters for a conversation: -t/-c/-ctk/-ctv as `run` resolves them, one
// slot, the prefix cache on.
engine::EngineParams make_chat_engine_params(const ModelOptions& o, const model::Hparams& hp);

}  // namespace treespec::cli
