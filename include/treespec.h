/* treespec.h: the C API of treespec, a speculative-decoding inference engine for GGUF
 * models on CPUs. C11 (and C++) compatible; link with libtreespec
 * (`pkg-config --cflags --libs treespec`, or CMake `find_package(treespec)` and the
 * target `treespec::treespec`). Design notes: docs/embedding.md.
 *
 * Handles. Two opaque handles: a treespec_model (the weights and the tokenizer,
 * immutable after loading) and a treespec_generation (one decoding context: its KV
 * cache, thread pool, sampling parameters and speculative method, plus the result of
 * its last run). A generation borrows its model: free every generation of a model
 * before the model. Strings the library returns stay owned by the library (see each
 * function for how long they stay valid); buffers the caller passes stay the caller's.
 *
 * Errors. Every function that can fail returns a treespec_status; TREESPEC_OK (0) is
 * success. On failure, treespec_last_error() gives a message naming the problem (the
 * file, the parameter, the limit). No C++ exception ever crosses this API; a bug
 * inside the library is reported as TREESPEC_ERR_INTERNAL, not a crash. Output
 * parameters are left untouched on failure unless said otherwise.
 *
 * Thread safety.
 *  - treespec_model: after treespec_model_load returns, a model is read-only. Any
 *    number of threads may tokenize, detokenize and run generations of the same model
 *    at the same time. treespec_model_free must not run concurrently with any other
 *    use of that model or of its generations.
 *  - treespec_generation: one thread at a time. Different generations (of the same or
 *    different models) may run concurrently on different threads; each has its own
 *    thread pool, so size n_threads accordingly.
 *  - Callbacks run on the thread that called treespec_generate, synchronously; a
 *    callback must not call treespec_generate or treespec_generation_free on its own
 *    generation (other functions are fine).
 *  - treespec_last_error() is per thread.
 *
 * Versioning. TREESPEC_API_VERSION is incremented on every change of this header that
 * breaks source or binary compatibility (a changed struct layout, signature or
 * meaning); the shared library's SONAME (libtreespec.so.N) changes with it, so a
 * program built against one version never loads an incompatible library.
 * treespec_api_version() returns the version the library was built with; compare it
 * with TREESPEC_API_VERSION to detect a mismatched header at run time.
 */
#ifndef TREESPEC_H
#define TREESPEC_H

#include <stddef.h>
#include <stdint.h>

#define TREESPEC_API_VERSION 1

#if defined(_WIN32)
#define TREESPEC_API
#elif defined(__GNUC__)
#define TREESPEC_API __attribute__((visibility("default")))
#else
#define TREESPEC_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum treespec_status {
  TREESPEC_OK = 0,
  TREESPEC_ERR_INVALID_ARGUMENT = 1, /* a parameter, prompt or method string is invalid */
  TREESPEC_ERR_IO = 2,               /* a file could not be opened or read */
  TREESPEC_ERR_FORMAT = 3,           /* a file is corrupt or inconsistent */
  TREESPEC_ERR_UNSUPPORTED = 4,      /* a well-formed model treespec does not handle */
  TREESPEC_ERR_OUT_OF_MEMORY = 5,
  TREESPEC_ERR_BUFFER_TOO_SMALL = 6, /* the output buffer is too small; the size needed is returned */
  TREESPEC_ERR_INTERNAL = 7          /* a bug in treespec; the message says what failed */
} treespec_status;

typedef enum treespec_finish_reason {
  TREESPEC_FINISH_NONE = 0,     /* no generation has run yet */
  TREESPEC_FINISH_EOG = 1,      /* the model emitted an end-of-generation token */
  TREESPEC_FINISH_LENGTH = 2,   /* max_tokens reached */
  TREESPEC_FINISH_CONTEXT = 3,  /* the context (n_ctx) is full */
  TREESPEC_FINISH_CANCELLED = 4 /* the token callback returned nonzero */
} treespec_finish_reason;

typedef struct treespec_model treespec_model;
typedef struct treespec_generation treespec_generation;

/* ---- library ------------------------------------------------------------------ */

/* TREESPEC_API_VERSION of the library actually loaded. */
TREESPEC_API int treespec_api_version(void);
/* The library's version, e.g. "0.1.0"; a static string. */
TREESPEC_API const char* treespec_version(void);
/* "ok", "invalid_argument", ...; a static string ("unknown" for other values). */
TREESPEC_API const char* treespec_status_name(treespec_status status);
/* The message of the last failed call on this thread ("" if none). Valid until the
 * next call into the library on this thread. */
TREESPEC_API const char* treespec_last_error(void);

/* ---- model -------------------------------------------------------------------- */

typedef struct treespec_model_params {
  int32_t n_threads; /* threads per generation; 0 = all cores */
  int32_t n_ctx;     /* positions per generation (prompt + output); 0 = the model's, at most 4096 */
  int32_t n_batch;   /* prompt processing chunk; 0 = 512 */
} treespec_model_params;

/* Defaults: n_threads 0, n_ctx 0, n_batch 512 (those of `treespec run`). */
TREESPEC_API treespec_model_params treespec_model_default_params(void);

/* Loads a GGUF model and its tokenizer. params may be NULL (defaults). On success
 * *out is a new model to release with treespec_model_free; errors name the file. */
TREESPEC_API treespec_status treespec_model_load(const char* path, const treespec_model_params* params,
                                                 treespec_model** out);
/* As treespec_model_load, with the element types of its generations' KV cache
 * (llama.cpp's -ctk / -ctv): "f16" (the default, also for NULL), "q8_0" or "f32", the
 * names `treespec run --help` lists for --cache-type-k. An unknown name is
 * TREESPEC_ERR_INVALID_ARGUMENT naming it. Each type gives the tokens `treespec run
 * -ctk K -ctv V` gives; greedy output of every spec equals plain greedy with that cache. */
TREESPEC_API treespec_status treespec_model_load_with_cache_types(const char* path, const treespec_model_params* params,
                                                                  const char* cache_type_k, const char* cache_type_v,
                                                                  treespec_model** out);
/* The KV cache types its generations get ("f16", "q8_0", ...; NULL for a NULL model). */
TREESPEC_API const char* treespec_model_cache_type_k(const treespec_model* model);
TREESPEC_API const char* treespec_model_cache_type_v(const treespec_model* model);
/* Frees a model (NULL is a no-op). Its generations must be freed first. */
TREESPEC_API void treespec_model_free(treespec_model* model);

TREESPEC_API int32_t treespec_model_n_vocab(const treespec_model* model);
/* The context size generations of this model get (n_ctx resolved). */
TREESPEC_API int32_t treespec_model_n_ctx(const treespec_model* model);

/* ---- tokenizer ---------------------------------------------------------------- */

/* Encodes text_len bytes of text (UTF-8). add_bos: prepend BOS where the vocabulary
 * asks for it (as `treespec run` does); parse_special: special-token text such as
 * "</s>" becomes that token. Writes at most capacity ids to tokens and sets *n_tokens
 * to the number of ids of the encoding; TREESPEC_ERR_BUFFER_TOO_SMALL (with *n_tokens
 * set) when capacity is smaller. tokens may be NULL when capacity is 0. */
TREESPEC_API treespec_status treespec_tokenize(const treespec_model* model, const char* text, size_t text_len,
                                               int add_bos, int parse_special, int32_t* tokens, size_t capacity,
                                               size_t* n_tokens);

/* Decodes ids to UTF-8 text exactly as `treespec run` echoes a prompt (BOS/EOS are
 * not rendered; invalid UTF-8 becomes U+FFFD). Writes the text and a terminating NUL
 * if capacity allows; *n_bytes is set to the text's length without the NUL, and
 * TREESPEC_ERR_BUFFER_TOO_SMALL is returned when capacity < *n_bytes + 1. An id
 * outside the vocabulary is TREESPEC_ERR_INVALID_ARGUMENT. */
TREESPEC_API treespec_status treespec_detokenize(const treespec_model* model, const int32_t* tokens, size_t n_tokens,
                                                 char* text, size_t capacity, size_t* n_bytes);

/* ---- generation --------------------------------------------------------------- */

typedef struct treespec_generation_params {
  /* Sampling (`treespec run --temp --top-k --top-p --min-p -s`): temperature first,
   * then top-k, top-p, min-p. temperature <= 0 is greedy. */
  float temperature;  /* default 0.8 */
  int32_t top_k;      /* default 40; 0 = off */
  float top_p;        /* default 0.95; 1 = off */
  float min_p;        /* default 0.05; 0 = off */
  int64_t seed;       /* default -1 = random; >= 0 reproducible */
  int32_t max_tokens; /* tokens to generate; default -1 = until end of generation or context */
  int ignore_eos;     /* nonzero: do not stop at end-of-generation tokens */
  /* The speculative method, as one `treespec run --spec` / `bench --spec` item:
   * NAME[:KEY[=VALUE]...], KEY being the method's own `--NAME-KEY` flag of `run`
   * (or `--FLAG` verbatim): "none", "lookup", "lookup:draft=4", "lookahead", "ptd",
   * "medusa:heads=FILE", "medusa:heads=FILE:tree=auto:16", "propd:heads=FILE",
   * "draft:--model-draft=SMALL.gguf", "eagle:layer=LAYER.gguf" (docs/eagle.md), "auto"
   * (chooses among the methods it is given, e.g. "auto:heads=FILE:--draft-layers=0+1",
   * "auto:heads=FILE:eagle=LAYER.gguf"; docs/auto.md). NULL or "" = "none".
   * Copied at create time. */
  const char* spec;
  /* Verification at temperature > 0: "coupled" (default when NULL; exact distribution,
   * and for a seed the same tokens whatever the spec), "lossless" (exact distribution,
   * rejection sampling) or "typical" (Medusa's, lossy). Copied at create time. */
  const char* verify;
} treespec_generation_params;

/* Defaults: as `treespec run` (temperature 0.8, top_k 40, top_p 0.95, min_p 0.05,
 * seed -1, max_tokens -1, spec "none", verify "coupled"). */
TREESPEC_API treespec_generation_params treespec_generation_default_params(void);

/* Sampling parameters beyond treespec_generation_params, set on a created generation
 * for its following runs (setters rather than struct fields, so that programs built
 * against an earlier header keep working with this library). Each checks its values
 * (TREESPEC_ERR_INVALID_ARGUMENT naming the parameter; the generation is then left
 * unchanged). Every one keeps speculation lossless: with any spec, greedy output is
 * plain greedy output under the same parameters.
 *
 * Penalties (`treespec run --repeat-penalty --repeat-last-n --frequency-penalty
 * --presence-penalty`, llama.cpp's): repeat_penalty > 0 (1 = off); repeat_last_n >= -1
 * tokens looked back on (0 = off, -1 = the whole context); frequency_penalty and
 * presence_penalty in [-2, 2] (0 = off). Defaults: 1, 64, 0, 0. */
TREESPEC_API treespec_status treespec_generation_set_penalties(treespec_generation* gen, float repeat_penalty,
                                                               int32_t repeat_last_n, float frequency_penalty,
                                                               float presence_penalty);
/* Locally typical sampling (`--typical`): typical_p in [0, 1], 1 = off (the default). */
TREESPEC_API treespec_status treespec_generation_set_typical_p(treespec_generation* gen, float typical_p);
/* Logit bias (`-l/--logit-bias`): biases[i] is added to the logit of tokens[i] before
 * the penalties, for n entries (replacing the previous ones; n = 0 clears them). A
 * bias of -INFINITY bans the token; NaN and +INFINITY are refused, as are ids outside
 * the vocabulary. The arrays are copied. */
TREESPEC_API treespec_status treespec_generation_set_logit_bias(treespec_generation* gen, const int32_t* tokens,
                                                                const float* biases, size_t n);

/* Creates a generation of `model`: checks the parameters and the method (loading the
 * files it names, e.g. Medusa heads) and allocates the KV cache. params may be NULL
 * (defaults). Errors name the bad parameter or file. */
TREESPEC_API treespec_status treespec_generation_create(treespec_model* model, const treespec_generation_params* params,
                                                        treespec_generation** out);
TREESPEC_API void treespec_generation_free(treespec_generation* gen); /* NULL is a no-op */

/* Called once per generated token, in order, with the text it completes: `piece` holds
 * piece_len bytes of whole UTF-8 characters (possibly 0 bytes while a multi-byte
 * character is incomplete; NUL-terminated, valid during the call only). When the
 * generation ends, a last call with token -1 delivers held-back bytes, if any. The
 * concatenation of all pieces is the generated text (treespec_generation_text).
 * Return 0 to continue, nonzero to stop after this token (finish reason CANCELLED). */
typedef int (*treespec_token_callback)(void* user_data, int32_t token, const char* piece, size_t piece_len);

/* Generates from a prompt: text_len bytes of UTF-8, encoded as `treespec run` does
 * (BOS added, special tokens parsed). callback may be NULL. The generation can be run
 * again; each run starts from an empty context and replaces the previous result. */
TREESPEC_API treespec_status treespec_generate(treespec_generation* gen, const char* prompt, size_t prompt_len,
                                               treespec_token_callback callback, void* user_data);
/* The same from prompt ids (none of them added or changed). */
TREESPEC_API treespec_status treespec_generate_tokens(treespec_generation* gen, const int32_t* prompt, size_t n_prompt,
                                                      treespec_token_callback callback, void* user_data);

/* The text generated by the last run (NUL-terminated; *len, if not NULL, gets its
 * length). Valid until the next treespec_generate* or treespec_generation_free. */
TREESPEC_API const char* treespec_generation_text(const treespec_generation* gen, size_t* len);
/* The ids generated by the last run (*n gets their count); lifetime as above. */
TREESPEC_API const int32_t* treespec_generation_tokens(const treespec_generation* gen, size_t* n);

typedef struct treespec_stats {
  int64_t n_prompt_tokens;
  int64_t n_generated;           /* tokens delivered */
  int64_t n_steps;               /* verification steps (forward passes of the decode) */
  int64_t n_drafts;              /* steps that verified at least one drafted token */
  int64_t n_draft_tokens;        /* drafted tokens verified */
  int64_t n_accepted;            /* drafted tokens accepted */
  double mean_accepted_length;   /* tokens per step incl. the bonus token */
  double mean_acceptance_length; /* vLLM's: 1 + accepted / drafts */
  double acceptance_rate;        /* accepted / drafted */
  double rows_per_step;          /* tree rows fed per step */
  double tokens_per_s;           /* generated tokens / decode seconds */
  double prompt_s;               /* prompt processing seconds */
  double decode_s;               /* decode seconds (draft + forward + verify + commit) */
  treespec_finish_reason finish_reason;
  uint64_t seed; /* the seed sampled with (drawn when params.seed was -1):
                                  * giving it as params.seed reproduces the run */
} treespec_stats;

/* Statistics of the last run (all zero, finish reason NONE, before the first). */
TREESPEC_API treespec_status treespec_generation_stats(const treespec_generation* gen, treespec_stats* out);

#ifdef __cplusplus
}
#endif

#endif /* TREESPEC_H */
