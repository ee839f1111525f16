// The C API (include/treespec.h): a thin layer over the engine that builds models,
// engines and sequences exactly as `treespec run` does (cli/session.h). Every entry
// point catches every exception and turns it into a status plus a per-thread message.
#include "treespec.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include "cli/options.h"
#include "cli/session.h"
#include "engine/engine.h"
#include "kv/kv_cache.h"
#include "tokenizer/tokenizer.h"
#include "treespec/status.h"

struct treespec_model {
  treespec::cli::LoadedModel lm;
  treespec::engine::EngineParams ep;
};

struct treespec_generation {
  treespec_model* model = nullptr;
  std::unique_ptr<treespec::engine::Engine> eng;
  treespec::cli::SamplingOptions sampling;
  int64_t max_tokens = -1;
  bool ignore_eos = false;
  treespec::drafters::SpecConfig spec;
  // The last run.
  std::string text;
  std::vector<int32_t> tokens;
  treespec_stats stats{};
};

namespace {

using namespace treespec;

thread_local std::string g_last_error;

treespec_status fail(treespec_status st, std::string msg) {
  g_last_error = std::move(msg);
  return st;
}

// Runs f, mapping every exception to a status and the thread's message.
template <class F>
treespec_status guarded(F&& f) noexcept {
  try {
    return f();
  } catch (const InvalidArgument& e) {
    return fail(TREESPEC_ERR_INVALID_ARGUMENT, e.what());
  } catch (const IoError& e) {
    return fail(TREESPEC_ERR_IO, e.what());
  } catch (const FormatError& e) {
    return fail(TREESPEC_ERR_FORMAT, e.what());
  } catch (const Unsupported& e) {
    return fail(TREESPEC_ERR_UNSUPPORTED, e.what());
  } catch (const Error& e) {
    // The remaining treespec::Errors are allocation failures ("out of memory: ...")
    // and a few "cannot happen" checks.
    const bool oom = std::string_view(e.what()).rfind("out of memory", 0) == 0;
    return fail(oom ? TREESPEC_ERR_OUT_OF_MEMORY : TREESPEC_ERR_INTERNAL, e.what());
  } catch (const std::bad_alloc&) {
    return fail(TREESPEC_ERR_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    return fail(TREESPEC_ERR_INTERNAL, fmt::format("internal error: {}", e.what()));
  } catch (...) {
    return fail(TREESPEC_ERR_INTERNAL, "internal error: unknown exception");
  }
}

void require(bool ok, const char* what) {
  if (!ok) throw InvalidArgument(what);
}

treespec_finish_reason finish_of(engine::FinishReason r) {
  switch (r) {
    case engine::FinishReason::eog: return TREESPEC_FINISH_EOG;
    case engine::FinishReason::length: return TREESPEC_FINISH_LENGTH;
    case engine::FinishReason::context: return TREESPEC_FINISH_CONTEXT;
    case engine::FinishReason::cancelled: return TREESPEC_FINISH_CANCELLED;
    case engine::FinishReason::stop: return TREESPEC_FINISH_EOG;  // stop strings: not offered by this API
    case engine::FinishReason::none: break;
  }
  return TREESPEC_FINISH_NONE;
}

treespec_stats stats_of(const engine::SpecStats& s, int64_t n_delivered, treespec_finish_reason reason) {
  treespec_stats o{};
  o.n_prompt_tokens = s.n_prompt;
  o.n_generated = n_delivered;
  o.n_steps = s.n_steps;
  o.n_drafts = s.n_drafts;
  o.n_draft_tokens = s.n_draft_tokens;
  o.n_accepted = s.n_accepted;
  o.mean_accepted_length = s.mean_accepted_length();
  o.mean_acceptance_length = s.mean_acceptance_length();
  o.acceptance_rate = s.acceptance_rate();
  o.rows_per_step = s.rows_per_step();
  o.tokens_per_s = s.tokens_per_s();
  o.prompt_s = s.t_prompt;
  o.decode_s = s.t_decode();
  o.finish_reason = reason;
  return o;
}

cli::SamplingOptions sampling_of(const treespec_generation_params& p) {
  if (!std::isfinite(p.temperature))
    throw InvalidArgument(fmt::format("temperature must be finite, got {}", p.temperature));
  if (p.seed < -1) throw InvalidArgument(fmt::format("seed must be >= 0 or -1 (random), got {}", p.seed));
  if (p.max_tokens < -1)
    throw InvalidArgument(fmt::format("max_tokens must be >= 0 or -1 (unlimited), got {}", p.max_tokens));
  cli::SamplingOptions o;
  o.params.temp = p.temperature;
  o.params.top_k = p.top_k;
  o.params.top_p = p.top_p;
  o.params.min_p = p.min_p;
  o.seed = p.seed;
  o.verify = p.verify != nullptr ? p.verify : "coupled";
  if (o.verify != "coupled" && o.verify != "lossless" && o.verify != "typical") {
    throw InvalidArgument(fmt::format("verify must be \"coupled\", \"lossless\" or \"typical\", got \"{}\"", o.verify));
  }
  return o;
}

// One run: the sequence `treespec run` would decode, streamed through the callback.
treespec_status run(treespec_generation* gen, std::vector<int32_t> ids, treespec_token_callback cb, void* ud) {
  gen->text.clear();
  gen->tokens.clear();
  gen->stats = treespec_stats{};
  const cli::LoadedModel& lm = gen->model->lm;
  const engine::SequenceParams sp = cli::resolve_sequence_params(gen->sampling, gen->max_tokens, gen->ignore_eos);
  tokenizer::StreamDecoder stream(*lm.tok);
  if (!ids.empty()) stream.prime(ids.back());  // empty: the engine reports it
  cli::PreparedSequence prepared = cli::prepare_sequence(*gen->eng, lm, std::move(ids), sp, gen->spec);
  engine::Sequence& seq = *prepared.seq;
  bool stopped = false;
  seq.on_tokens = [&](std::span<const int32_t> toks) {
    for (int32_t t : toks) {
      if (stopped) break;
      const std::string piece = stream.push(t);
      gen->text += piece;
      gen->tokens.push_back(t);
      if (cb != nullptr && cb(ud, t, piece.c_str(), piece.size()) != 0) {
        stopped = true;
        seq.cancel();
      }
    }
  };
  Status st;
  try {
    st = gen->eng->generate(seq);
  } catch (...) {
    gen->eng->set_budget_policy(nullptr);
    throw;
  }
  gen->eng->set_budget_policy(nullptr);  // the policy dies with `prepared`
  if (!st.ok()) return fail(TREESPEC_ERR_INVALID_ARGUMENT, st.message().empty() ? st.to_string() : st.message());
  const std::string rest = stream.flush();
  if (!rest.empty()) {
    gen->text += rest;
    if (cb != nullptr) cb(ud, -1, rest.c_str(), rest.size());
  }
  const treespec_finish_reason reason = stopped ? TREESPEC_FINISH_CANCELLED : finish_of(seq.finish_reason());
  gen->stats = stats_of(seq.stats(), static_cast<int64_t>(gen->tokens.size()), reason);
  gen->stats.seed = seq.params().sampling.seed;
  return TREESPEC_OK;
}

// Applies `edit` to a copy of gen's sampling parameters and keeps it if it validates.
template <class F>
treespec_status edit_sampling(treespec_generation* gen, const char* what, F&& edit) {
  return guarded([&] {
    require(gen != nullptr, fmt::format("{}: gen is NULL", what).c_str());
    sampling::SamplingParams p = gen->sampling.params;
    edit(p);
    try {
      p.validate();
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(fmt::format("{}: {}", what, e.what()));
    }
    gen->sampling.params = std::move(p);
    return TREESPEC_OK;
  });
}

}  // namespace

extern "C" {

int treespec_api_version(void) { return TREESPEC_API_VERSION; }

const char* treespec_version(void) { return TREESPEC_VERSION_STRING; }

const char* treespec_status_name(treespec_status status) {
  // A C caller may pass any int (a C enum is an int): read it as one, since loading a
  // value outside the enumerators as the C++ enum is undefined behaviour (clang's UBSan).
  static_assert(sizeof(treespec_status) == sizeof(int));
  int v = 0;
  std::memcpy(&v, &status, sizeof v);
  switch (v) {
    case TREESPEC_OK: return "ok";
    case TREESPEC_ERR_INVALID_ARGUMENT: return "invalid_argument";
    case TREESPEC_ERR_IO: return "io";
    case TREESPEC_ERR_FORMAT: return "format";
    case TREESPEC_ERR_UNSUPPORTED: return "unsupported";
    case TREESPEC_ERR_OUT_OF_MEMORY: return "out_of_memory";
    case TREESPEC_ERR_BUFFER_TOO_SMALL: return "buffer_too_small";
    case TREESPEC_ERR_INTERNAL: return "internal";
    default: return "unknown";
  }
}

const char* treespec_last_error(void) { return g_last_error.c_str(); }

treespec_model_params treespec_model_default_params(void) {
  treespec_model_params p;
  p.n_threads = 0;
  p.n_ctx = 0;
  p.n_batch = 512;
  return p;
}

treespec_status treespec_model_load(const char* path, const treespec_model_params* params, treespec_model** out) {
  return treespec_model_load_with_cache_types(path, params, nullptr, nullptr, out);
}

treespec_status treespec_model_load_with_cache_types(const char* path, const treespec_model_params* params,
                                                     const char* cache_type_k, const char* cache_type_v,
                                                     treespec_model** out) {
  return guarded([&] {
    require(out != nullptr, "treespec_model_load: out is NULL");
    require(path != nullptr && *path != '\0', "treespec_model_load: the model path is NULL or empty");
    const treespec_model_params p = params != nullptr ? *params : treespec_model_default_params();
    if (p.n_threads < 0)
      throw InvalidArgument(fmt::format("n_threads must be >= 0 (0 = all cores), got {}", p.n_threads));
    if (p.n_ctx < 0) throw InvalidArgument(fmt::format("n_ctx must be >= 0 (0 = the model's), got {}", p.n_ctx));
    if (p.n_batch < 0) throw InvalidArgument(fmt::format("n_batch must be >= 0 (0 = 512), got {}", p.n_batch));
    cli::ModelOptions mo;
    // Checked before the file is read, named as this function's parameters.
    if (cache_type_k != nullptr)
      mo.cache_type_k = kv::cache_type_name(kv::parse_cache_type(cache_type_k, "cache_type_k"));
    if (cache_type_v != nullptr)
      mo.cache_type_v = kv::cache_type_name(kv::parse_cache_type(cache_type_v, "cache_type_v"));
    auto m = std::make_unique<treespec_model>();
    m->lm = cli::load_model(path);
    mo.model = path;
    mo.n_threads = p.n_threads;
    mo.n_ctx = p.n_ctx;
    mo.n_batch = p.n_batch > 0 ? p.n_batch : 512;
    m->ep = cli::resolve_engine_params(mo, m->lm.model->hparams());
    *out = m.release();
    return TREESPEC_OK;
  });
}

void treespec_model_free(treespec_model* model) { delete model; }

const char* treespec_model_cache_type_k(const treespec_model* model) {
  return model != nullptr ? kv::cache_type_name(model->ep.type_k) : nullptr;
}
const char* treespec_model_cache_type_v(const treespec_model* model) {
  return model != nullptr ? kv::cache_type_name(model->ep.type_v) : nullptr;
}

int32_t treespec_model_n_vocab(const treespec_model* model) {
  return model != nullptr ? model->lm.model->hparams().n_vocab : 0;
}

int32_t treespec_model_n_ctx(const treespec_model* model) { return model != nullptr ? model->ep.n_ctx : 0; }

treespec_status treespec_tokenize(const treespec_model* model, const char* text, size_t text_len, int add_bos,
                                  int parse_special, int32_t* tokens, size_t capacity, size_t* n_tokens) {
  return guarded([&] {
    require(model != nullptr, "treespec_tokenize: model is NULL");
    require(text != nullptr || text_len == 0, "treespec_tokenize: text is NULL");
    require(n_tokens != nullptr, "treespec_tokenize: n_tokens is NULL");
    require(tokens != nullptr || capacity == 0, "treespec_tokenize: tokens is NULL but capacity is not 0");
    const std::vector<int32_t> ids = model->lm.tok->encode(std::string_view(text != nullptr ? text : "", text_len),
                                                           add_bos != 0, parse_special != 0);
    *n_tokens = ids.size();
    if (ids.size() > capacity) {
      return fail(TREESPEC_ERR_BUFFER_TOO_SMALL,
                  fmt::format("treespec_tokenize: the text has {} tokens, the buffer holds {}", ids.size(), capacity));
    }
    if (!ids.empty()) std::memcpy(tokens, ids.data(), ids.size() * sizeof(int32_t));
    return TREESPEC_OK;
  });
}

treespec_status treespec_detokenize(const treespec_model* model, const int32_t* tokens, size_t n_tokens, char* text,
                                    size_t capacity, size_t* n_bytes) {
  return guarded([&] {
    require(model != nullptr, "treespec_detokenize: model is NULL");
    require(tokens != nullptr || n_tokens == 0, "treespec_detokenize: tokens is NULL");
    require(n_bytes != nullptr, "treespec_detokenize: n_bytes is NULL");
    require(text != nullptr || capacity == 0, "treespec_detokenize: text is NULL but capacity is not 0");
    const int32_t n_vocab = model->lm.tok->n_vocab();
    std::vector<int32_t> ids(tokens, tokens + n_tokens);
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0 || ids[i] >= n_vocab) {
        throw InvalidArgument(fmt::format("treespec_detokenize: token {} at index {} is outside the vocabulary [0, {})",
                                          ids[i], i, n_vocab));
      }
    }
    const std::string s = model->lm.tok->decode(ids);
    *n_bytes = s.size();
    if (capacity < s.size() + 1) {
      return fail(TREESPEC_ERR_BUFFER_TOO_SMALL,
                  fmt::format("treespec_detokenize: the text has {} bytes (+1 for NUL), the buffer holds {}", s.size(),
                              capacity));
    }
    std::memcpy(text, s.data(), s.size());
    text[s.size()] = '\0';
    return TREESPEC_OK;
  });
}

treespec_generation_params treespec_generation_default_params(void) {
  const sampling::SamplingParams d;
  treespec_generation_params p;
  p.temperature = d.temp;
  p.top_k = d.top_k;
  p.top_p = d.top_p;
  p.min_p = d.min_p;
  p.seed = -1;
  p.max_tokens = -1;
  p.ignore_eos = 0;
  p.spec = "none";
  p.verify = "coupled";
  return p;
}

treespec_status treespec_generation_create(treespec_model* model, const treespec_generation_params* params,
                                           treespec_generation** out) {
  return guarded([&] {
    require(out != nullptr, "treespec_generation_create: out is NULL");
    require(model != nullptr, "treespec_generation_create: model is NULL");
    const treespec_generation_params p = params != nullptr ? *params : treespec_generation_default_params();
    auto gen = std::make_unique<treespec_generation>();
    gen->model = model;
    gen->sampling = sampling_of(p);
    gen->max_tokens = p.max_tokens;
    gen->ignore_eos = p.ignore_eos != 0;
    (void)cli::resolve_sequence_params(gen->sampling, gen->max_tokens, gen->ignore_eos);  // validates
    gen->spec = cli::spec_config_from_string(p.spec != nullptr ? p.spec : "");
    gen->eng = std::make_unique<engine::Engine>(*model->lm.model, model->ep);
    // Builds the method once so that its files (heads, draft model) and parameters are
    // checked now rather than at the first run.
    const int32_t bos = model->lm.tok->bos_id() >= 0 ? model->lm.tok->bos_id() : 0;
    (void)cli::prepare_sequence(*gen->eng, model->lm, {bos}, cli::resolve_sequence_params(gen->sampling, 1, false),
                                gen->spec);
    gen->eng->set_budget_policy(nullptr);
    *out = gen.release();
    return TREESPEC_OK;
  });
}

void treespec_generation_free(treespec_generation* gen) { delete gen; }

treespec_status treespec_generation_set_penalties(treespec_generation* gen, float repeat_penalty, int32_t repeat_last_n,
                                                  float frequency_penalty, float presence_penalty) {
  return edit_sampling(gen, "treespec_generation_set_penalties", [&](sampling::SamplingParams& p) {
    p.repeat_penalty = repeat_penalty;
    p.repeat_last_n = repeat_last_n;
    p.frequency_penalty = frequency_penalty;
    p.presence_penalty = presence_penalty;
  });
}

treespec_status treespec_generation_set_typical_p(treespec_generation* gen, float typical_p) {
  return edit_sampling(gen, "treespec_generation_set_typical_p",
                       [&](sampling::SamplingParams& p) { p.typical_p = typical_p; });
}

treespec_status treespec_generation_set_logit_bias(treespec_generation* gen, const int32_t* tokens, const float* biases,
                                                   size_t n) {
  return edit_sampling(gen, "treespec_generation_set_logit_bias", [&](sampling::SamplingParams& p) {
    require(n == 0 || (tokens != nullptr && biases != nullptr),
            "treespec_generation_set_logit_bias: tokens or biases is NULL");
    const int32_t n_vocab = gen->model->lm.model->hparams().n_vocab;
    p.logit_bias.clear();
    for (size_t i = 0; i < n; ++i) {
      if (tokens[i] < 0 || tokens[i] >= n_vocab) {
        throw InvalidArgument(
            fmt::format("treespec_generation_set_logit_bias: token {} at index {} is outside the vocabulary [0, {})",
                        tokens[i], i, n_vocab));
      }
      p.logit_bias.push_back({tokens[i], biases[i]});
    }
  });
}

treespec_status treespec_generate(treespec_generation* gen, const char* prompt, size_t prompt_len,
                                  treespec_token_callback callback, void* user_data) {
  return guarded([&] {
    require(gen != nullptr, "treespec_generate: gen is NULL");
    require(prompt != nullptr || prompt_len == 0, "treespec_generate: prompt is NULL");
    // As `treespec run -p`: BOS added, special-token text parsed.
    std::vector<int32_t> ids =
        gen->model->lm.tok->encode(std::string_view(prompt != nullptr ? prompt : "", prompt_len), true, true);
    return run(gen, std::move(ids), callback, user_data);
  });
}

treespec_status treespec_generate_tokens(treespec_generation* gen, const int32_t* prompt, size_t n_prompt,
                                         treespec_token_callback callback, void* user_data) {
  return guarded([&] {
    require(gen != nullptr, "treespec_generate_tokens: gen is NULL");
    require(prompt != nullptr || n_prompt == 0, "treespec_generate_tokens: prompt is NULL");
    return run(gen, std::vector<int32_t>(prompt, prompt + n_prompt), callback, user_data);
  });
}

const char* treespec_generation_text(const treespec_generation* gen, size_t* len) {
  if (gen == nullptr) {
    if (len != nullptr) *len = 0;
    return "";
  }
  if (len != nullptr) *len = gen->text.size();
  return gen->text.c_str();
}

const int32_t* treespec_generation_tokens(const treespec_generation* gen, size_t* n) {
  if (n != nullptr) *n = gen != nullptr ? gen->tokens.size() : 0;
  return gen != nullptr ? gen->tokens.data() : nullptr;
}

treespec_status treespec_generation_stats(const treespec_generation* gen, treespec_stats* out) {
  return guarded([&] {
    require(gen != nullptr, "treespec_generation_stats: gen is NULL");
    require(out != nullptr, "treespec_generation_stats: out is NULL");
    *out = gen->stats;
    return TREESPEC_OK;
  });
}

}  // extern "C"
