#!/usr/bin/env python3
"""Renders every chat-template test case with Python's Jinja2, configured as
transformers' apply_chat_template configures it, and prints the cases with their
expected outputs as one JSON document on stdout. test_chat (tests/unit/chat/
test_conformance.cpp) runs this at test time and renders the same cases with
treespec's interpreter; nothing here is hand-written expectation.

Cases:
  * snippets.txt: one template per construct (### name / template / optional
    "@@@ {json vars}" line), rendered with DEFAULT_VARS plus the snippet's vars;
  * templates/*.jinja (ours) and, when present, $TREESPEC_SHARED/data/chat_templates/
    *.jinja (real model templates): each x conversations/*.json x
    add_generation_prompt in (False, True).

Usage: gen_expectations.py [--shared-templates DIR] [--now YYYY-MM-DD] [--only snippets|ours|shared]
"""
import argparse
import datetime
import glob
import json
import os
import sys

import jinja2
import jinja2.ext
from jinja2 import nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))


class GenerationTag(jinja2.ext.Extension):
    """transformers' AssistantTracker tag: {% generation %}...{% endgeneration %} renders its body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_env(now):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        # transformers overrides Jinja2's HTML-escaping tojson with plain json.dumps
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return now.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


DEFAULT_VARS = {
    "l": [1, 2, 3],
    "e": [],
    "d": {"a": 1, "b": "two", "items": 5},
    "s": "héllo wörld",
    "n": None,
    "t": True,
    "f": 1.5,
    "neg": -7,
    "words": ["banana", "Apple", "cherry", "apple"],
    "users": [
        {"name": "Ann", "age": 31, "admin": True, "tags": ["x"]},
        {"name": "bob", "age": 25, "admin": False, "tags": []},
        {"name": "Cid", "age": 40, "admin": True},
    ],
    "nested": {"a": {"b": {"c": "deep"}}, "list": [{"k": 1}, {"k": 2}]},
    "cjk": "你好，世界 🌍 café",
    "text": "  line one\nline two\n\n  line four  ",
}


def read_snippets(path):
    cases = []
    name, lines, extra = None, [], None
    with open(path, encoding="utf-8") as fh:
        raw = fh.read().split("\n")
    for line in raw + ["### <end>"]:
        if line.startswith("### "):
            if name is not None:
                cases.append((name, "\n".join(lines), extra))
            name, lines, extra = line[4:].strip(), [], None
        elif line.startswith("@@@ "):
            extra = json.loads(line[4:])
        elif name is not None:
            lines.append(line)
    return cases


def render(env, source, variables):
    try:
        out = env.from_string(source).render(**variables)
        return {"ok": True, "output": out}
    except Exception as e:  # every template failure is an expected error
        return {"ok": False, "error_type": type(e).__name__, "error_message": str(e)}


def conversation_cases(env, templates, conversations, label):
    cases = []
    for tpath in templates:
        with open(tpath, encoding="utf-8") as fh:
            source = fh.read()
        tname = os.path.splitext(os.path.basename(tpath))[0]
        for cpath in conversations:
            with open(cpath, encoding="utf-8") as fh:
                conv = json.load(fh)
            cname = os.path.splitext(os.path.basename(cpath))[0]
            for gen in (False, True):
                variables = {
                    "messages": conv["messages"],
                    "tools": conv.get("tools"),
                    "documents": None,
                    "add_generation_prompt": gen,
                    "bos_token": conv.get("bos_token", "<s>"),
                    "eos_token": conv.get("eos_token", "</s>"),
                }
                # Any other top-level key is a template variable too (e.g. enable_thinking).
                variables.update({k: v for k, v in conv.items() if k not in variables})
                case = {"name": f"{label}/{tname}/{cname}/{'gen' if gen else 'nogen'}",
                        "template": source, "vars": variables}
                case.update(render(env, source, variables))
                cases.append(case)
    return cases


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared-templates", default=None)
    ap.add_argument("--now", default="2024-07-26")
    ap.add_argument("--only", choices=["snippets", "ours", "shared"], default=None,
                    help="render only this group of cases (each conformance test asks for its own)")
    args = ap.parse_args()
    now = datetime.datetime.strptime(args.now, "%Y-%m-%d")
    env = make_env(now)

    cases = []
    want = lambda group: args.only is None or args.only == group
    for name, source, extra in (read_snippets(os.path.join(HERE, "snippets.txt")) if want("snippets") else []):
        variables = dict(DEFAULT_VARS)
        variables.update(extra or {})
        if name.endswith("[crlf]"):
            source = source.replace("\n", "\r\n")
        case = {"name": "snippet/" + name, "template": source, "vars": variables}
        case.update(render(env, source, variables))
        cases.append(case)

    conversations = sorted(glob.glob(os.path.join(HERE, "conversations", "*.json")))
    ours = sorted(glob.glob(os.path.join(HERE, "templates", "*.jinja")))
    if want("ours"):
        cases += conversation_cases(env, ours, conversations, "ours")
    if want("shared") and args.shared_templates and os.path.isdir(args.shared_templates):
        real = sorted(glob.glob(os.path.join(args.shared_templates, "*.jinja")))
        cases += conversation_cases(env, real, conversations, "shared")

    json.dump({"jinja2_version": jinja2.__version__, "now": args.now, "cases": cases}, sys.stdout,
              ensure_ascii=False)


if __name__ == "__main__":
    main()
