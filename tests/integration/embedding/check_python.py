"""Checks the Python module on MODEL, then prints what `treespec run -m MODEL -p PROMPT
-n N --temp 0` prints (prompt echo, greedy continuation, newline) for the caller to
compare. Exits nonzero on the first failed check. Run by itest_embedding."""
import sys

import treespec


def main():
    model_path, prompt, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    heads = sys.argv[4] if len(sys.argv) > 4 else None
    m = treespec.Model(model_path, n_threads=1, n_ctx=256)
    ids = m.tokenize(prompt)
    assert len(ids) > 1 and all(isinstance(i, int) for i in ids), ids
    echo = m.detokenize(ids)
    text = m.generate(prompt, max_tokens=n, temperature=0)
    stats = m.last_stats
    assert stats["n_generated"] <= n and stats["n_prompt_tokens"] == len(ids), stats
    assert stats["finish_reason"] in ("length", "eog"), stats
    assert stats["mean_accepted_length"] >= 1.0 and stats["tokens_per_s"] > 0, stats
    # Streaming yields pieces that concatenate to the same text; speculation changes nothing.
    pieces = list(m.generate(prompt, max_tokens=n, temperature=0, stream=True, spec="lookup"))
    assert "".join(pieces) == text, (pieces, text)
    assert m.last_stats["n_drafts"] >= 0
    if heads:
        assert m.generate(prompt, max_tokens=n, temperature=0, heads=heads) == text
        assert m.last_stats["n_draft_tokens"] > 0, m.last_stats
        assert m.generate(prompt, max_tokens=n, temperature=0, spec="auto", heads=heads) == text
    assert m.generate(prompt, max_tokens=n, temperature=0, spec="auto") == text
    # KV cache types as run's -ctk / -ctv; a Q8_0 cache keeps every method's greedy text.
    assert m.cache_types == ("f16", "f16"), m.cache_types
    q8 = treespec.Model(model_path, n_threads=1, n_ctx=256, cache_type_k="q8_0", cache_type_v="q8_0")
    assert q8.cache_types == ("q8_0", "q8_0"), q8.cache_types
    q8_text = q8.generate(prompt, max_tokens=n, temperature=0)
    assert q8.generate(prompt, max_tokens=n, temperature=0, spec="lookup") == q8_text
    q8.close()
    # Closing a stream early cancels it.
    s = m.generate(prompt, max_tokens=n, temperature=0, stream=True)
    first = next(s)
    s.close()
    assert isinstance(first, str)
    # Sampling with a seed is reproducible.
    a = m.generate(prompt, max_tokens=16, temperature=0.8, seed=7)
    b = m.generate(prompt, max_tokens=16, temperature=0.8, seed=7)
    assert a == b, (a, b)
    # Errors carry the C API's message.
    for call, needle in ((lambda: treespec.Model(model_path + ".missing"), model_path + ".missing"),
                         (lambda: m.generate(prompt, spec="fancy"), "fancy"),
                         (lambda: treespec.Model(model_path, cache_type_v="q2"), "cache_type_v"),
                         (lambda: m.generate(prompt, top_p=2.0), "top_p"),
                         (lambda: m.detokenize([m.n_vocab]), "outside the vocabulary")):
        try:
            call()
        except treespec.Error as e:
            assert needle in str(e), (needle, str(e))
        else:
            raise AssertionError(f"no error for {needle}")
    sys.stdout.write(echo + text + "\n")


if __name__ == "__main__":
    main()
