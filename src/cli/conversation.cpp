#include "cli/conversation.h"

#include <fmt/format.h>

#include <fstream>

#include "engine/budget_controller.h"
#include "tokenizer/text_stream.h"
#include "treespec/status.h"

namespace treespec::cli {

engine::EngineParams make_chat_engine_params(const ModelOptions& o, const model::Hparams& hp) {
  engine::EngineParams ep = resolve_engine_params(o, hp);
  ep.n_slots = 1;
  ep.prefix_cache = true;
  return ep;
}

Conversation::Conversation(const LoadedModel& m, engine::Engine& eng, const chat::Formatter& fmt,
                           ConversationConfig cfg)
    : m_(m), eng_(eng), fmt_(fmt), cfg_(std::move(cfg)) {
  if (!eng_.params().prefix_cache || eng_.free_slots() < 1)
    throw InvalidArgument("a conversation needs an engine with a free slot and its prefix cache on");
  // One budget policy for the whole conversation (the dynamic controller keeps what it
  // measured across turns).
  policy_ = engine::make_budget_policy(cfg_.spec, eng_);
  eng_.set_budget_policy(policy_.get());
  reset();
}

Conversation::~Conversation() { eng_.set_budget_policy(nullptr); }

void Conversation::reset() {
  messages_ = nlohmann::ordered_json::array();
  if (!cfg_.system_prompt.empty()) messages_.push_back({{"role", "system"}, {"content", cfg_.system_prompt}});
  last_.reset();
}

TurnResult Conversation::reply(const std::string& user, const std::function<void(const std::string&)>& on_text) {
  cancel_.store(false);
  messages_.push_back({{"role", "user"}, {"content", user}});
  auto forget_user = [&] { messages_.erase(messages_.size() - 1); };
  chat::ChatPrompt p;
  try {
    p = fmt_.render(messages_);
  } catch (...) {
    forget_user();
    throw;
  }
  const int32_t n_ctx = eng_.params().n_ctx;
  if (static_cast<int64_t>(p.tokens.size()) >= n_ctx) {
    forget_user();
    throw InvalidArgument(
        fmt::format("the conversation has {} tokens and the context holds {} (-c/--ctx-size): /reset to "
                    "start again, or a larger -c",
                    p.tokens.size(), n_ctx));
  }
  auto seq = make_sequence(eng_, m_, p.tokens, cfg_.sequence, cfg_.spec);
  tokenizer::TextStream text(*m_.tok, p.tokens.back(), p.stops);
  TurnResult r;
  seq->on_tokens = [&](std::span<const int32_t> toks) {
    std::string piece;
    for (int32_t t : toks) piece += text.push(t);
    if (!piece.empty()) {
      r.text += piece;
      if (on_text) on_text(piece);
    }
    if (text.stopped() || cancel_.load()) seq->cancel();
  };
  const Status st = eng_.generate(*seq);
  if (!st.ok()) {
    forget_user();
    throw Error(st.to_string());
  }
  const std::string rest = text.finish();
  r.text += rest;
  if (on_text && !rest.empty()) on_text(rest);
  r.finish = text.stopped() ? engine::FinishReason::stop : seq->finish_reason();
  r.stats = seq->stats();
  r.prompt = std::move(p.tokens);
  r.tokens.assign(seq->generated().begin(), seq->generated().begin() + text.n_tokens());
  messages_.push_back({{"role", "assistant"}, {"content", r.text}});
  last_ = std::make_unique<TurnResult>(r);
  return r;
}

void Conversation::save(const std::string& path) const {
  std::ofstream f(path, std::ios::binary);
  if (f) f << messages_.dump(2) << "\n";
  if (!f) throw IoError(fmt::format("cannot write the conversation to '{}'", path));
}

}  // namespace treespec::cli
