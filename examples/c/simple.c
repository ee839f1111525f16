/* simple MODEL PROMPT N: prints the greedy continuation of N tokens, exactly what
 * `treespec run -m MODEL -p PROMPT -n N --temp 0` prints on stdout (the prompt as
 * decoded from its tokens, the generated text, a newline).
 *
 *   cc simple.c $(pkg-config --cflags --libs treespec) -o simple
 *   LD_LIBRARY_PATH=PREFIX/lib ./simple models/kjv-5m.gguf "And it came to pass" 64
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <treespec.h>

struct echo {
  const char* prompt_text; /* printed before the first piece */
  int shown;
};

static void show_prompt(struct echo* e) {
  if (e->shown) return;
  e->shown = 1;
  fputs(e->prompt_text, stdout);
}

static int on_token(void* user_data, int32_t token, const char* piece, size_t len) {
  (void)token;
  show_prompt((struct echo*)user_data);
  fwrite(piece, 1, len, stdout);
  fflush(stdout);
  return 0; /* nonzero would stop the generation */
}

static int fail(const char* what) {
  fprintf(stderr, "simple: %s: %s\n", what, treespec_last_error());
  return 1;
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s MODEL PROMPT N\n", argv[0]);
    return 2;
  }
  char* end = NULL;
  errno = 0;
  const long n = strtol(argv[3], &end, 10);
  if (errno != 0 || end == argv[3] || *end != '\0' || n < 0 || n > 1000000000L) {
    fprintf(stderr, "simple: N must be a token count >= 0, got '%s'\n", argv[3]);
    return 2;
  }

  treespec_model* model = NULL;
  if (treespec_model_load(argv[1], NULL, &model) != TREESPEC_OK) return fail("cannot load the model");

  /* The prompt's ids as `treespec run` encodes them (BOS, special tokens), then their
   * text, which run echoes. A first call with no buffer asks for the sizes. */
  const char* prompt = argv[2];
  size_t n_ids = 0;
  treespec_tokenize(model, prompt, strlen(prompt), 1, 1, NULL, 0, &n_ids);
  int32_t* ids = malloc((n_ids > 0 ? n_ids : 1) * sizeof *ids);
  size_t n_text = 0;
  char* text = NULL;
  int rc = 1;
  if (ids == NULL || treespec_tokenize(model, prompt, strlen(prompt), 1, 1, ids, n_ids, &n_ids) != TREESPEC_OK) {
    fail("cannot tokenize the prompt");
    goto done;
  }
  treespec_detokenize(model, ids, n_ids, NULL, 0, &n_text);
  text = malloc(n_text + 1);
  if (text == NULL || treespec_detokenize(model, ids, n_ids, text, n_text + 1, &n_text) != TREESPEC_OK) {
    fail("cannot decode the prompt");
    goto done;
  }

  treespec_generation_params params = treespec_generation_default_params();
  params.temperature = 0.0f; /* greedy */
  params.max_tokens = (int32_t)n;
  treespec_generation* gen = NULL;
  if (treespec_generation_create(model, &params, &gen) != TREESPEC_OK) {
    fail("cannot create the generation");
    goto done;
  }
  struct echo e = {text, 0};
  if (treespec_generate_tokens(gen, ids, n_ids, on_token, &e) != TREESPEC_OK) {
    fail("generation failed");
  } else {
    show_prompt(&e);
    fputs("\n", stdout);
    rc = 0;
  }
  treespec_generation_free(gen);

done:
  free(text);
  free(ids);
  treespec_model_free(model);
  return rc;
}
