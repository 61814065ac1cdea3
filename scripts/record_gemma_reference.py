#!/usr/bin/env python3
"""Records llama.cpp's tokenization and greedy generations (raw top-10 logprobs) on Gemma 3 270M.

    ~/.cache/poot/venv/bin/python scripts/record_gemma_reference.py [MODEL [OUT]]

MODEL defaults to ~/.cache/poot/models/gemma-3-270m-q4_k_m.gguf (scripts/fetch-gemma.sh fetches
it), OUT to tests/data/gemma3_270m/llama_cpp.json. It runs MODEL in llama.cpp's server
(LLAMA_SERVER, default ~/.cache/poot/venv/bin/llama-server-vulkan, which runs on the CPU where
there is no Vulkan device) with the flags of scripts/tiny_models/record_llama_cpp.py (f32 KV
cache, flash attention off), waits for GET /health == 200 and then

  - POSTs /tokenize {"content": text, "add_special": .., "parse_special": ..} for each case in
    TOKENIZE (add_special false and parse_special true unless the case says otherwise);
  - builds each prompt in PROMPTS by /tokenize with add_special true (so it starts with <bos>,
    id 2) and parse_special true, then POSTs /completion with those ids (an id array: the server
    evaluates it as given, no second BOS; checked via tokens_evaluated) and REQUEST.

`top` comes from completion_probabilities[i].top_logprobs (`logprob` from
completion_probabilities[i].logprob) with post_sampling_probs=false: softmax(logits) over the
whole vocabulary (temperature 1, before any sampler), sorted by probability. `token` is the
server's greedy choice among the ids not in `excluded` (see EXCLUDED), so it is the first id of
`top` that is not excluded. Checked here: tokens_evaluated == len(prompt), each token is that
greedy choice, the top-10 probabilities are sorted and sum to <= 1, the chosen token's logprob
equals its entry in `top` when it is there, and /detokenize of the generated ids gives the
server's `content`.
"""

import hashlib
import json
import math
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in scripts/tiny_models
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiny_models"))
from record_llama_cpp import SERVER_FLAGS, Server, get, post, sha256  # noqa: E402

from gguf import GGUFReader  # noqa: E402

N_PREDICT = 12
N_PROBS = 10

# (text, add_special, parse_special)
TOKENIZE = [
    ("Hello world", False, True),
    ("Hello world", True, True),
    ("The quick brown fox jumps over the lazy dog.", False, True),
    ("The quick brown fox jumps over the lazy dog.", True, True),
    (" leading space", False, True),
    (" leading space", True, True),
    ("trailing space ", False, True),
    ("  two leading and three trailing   ", False, True),
    ("multiple   spaces   between  words", False, True),
    ("   ", False, True),
    ("", False, True),
    ("", True, True),
    ("line one\nline two\n\nline four", False, True),
    ("\n\n\n", False, True),
    ("\tindented\n    four spaces\n\t\ttwo tabs", False, True),
    ("windows\r\nline\r\nendings", False, True),
    ("Numbers: 0 7 42 123 2024 3.14159 -17 1,000,000 0x1F", False, True),
    ("Punctuation!? (parens) [brackets] {braces} ... --- 'single' \"double\" ;: @#$%^&*", False, True),
    ("fn main() {\n    println!(\"Hello, world!\");\n}\n", False, True),
    ("def add(a, b):\n\treturn a + b  # sum\n", False, True),
    ('{"name": "Alice", "age": 30, "tags": ["x", "y"], "ok": true, "n": null}', False, True),
    ("https://example.com/path?q=1&lang=en#top", False, True),
    ("HELLO hello HeLLo Supercalifragilisticexpialidocious", False, True),
    ("naïve café Ångström résumé façade Straße", False, True),
    ("Ελληνικά και русский текст", False, True),
    ("日本語のテキストです。", False, True),
    ("中文分词测试，你好世界！", False, True),
    ("안녕하세요 세계", False, True),
    ("I love 🦀 and 🧑‍💻! 👍🏽", False, True),
    ("E = mc^2, ∑ i = n(n+1)/2, α β γ → ∞", False, True),
    # Characters not in the vocabulary: byte fallback (<0xEA><0x99><0xAE> ...).
    ("ꙮ 𝔘 ⸘", False, True),
    ("<start_of_turn>user\nHi<end_of_turn>\n", False, True),
    ("<start_of_turn>user\nHi<end_of_turn>\n", True, True),
    ("<start_of_turn>user\nHi<end_of_turn>\n", False, False),
    ("a<bos>b<eos>c<pad>", False, True),
    ("a<bos>b<eos>c<pad>", False, False),
    # USER_DEFINED (token_type 4) tokens.
    ("<table><tr><td>1</td></tr></table>", False, True),
    ("<table><tr><td>1</td></tr></table>", False, False),
]

# Prompt texts; each is tokenized with add_special true (leading <bos>) and parse_special true.
PROMPTS = [
    ("chat", "<start_of_turn>user\nWhat is the capital of France?<end_of_turn>\n"
             "<start_of_turn>model\n"),
    ("text", "Once upon a time, in a small village by the sea, there lived"),
    ("json", '{"name": "Alice", "age": 30, "city": "Paris", "hobbies": ['),
    ("code", 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n'),
]

EXCLUDED_RULE = ("ids llama.cpp may not generate (logit_bias false): the byte tokens <0x80>..<0xFF> "
                 "(token_type 6; a lone one is invalid UTF-8 and this llama-server build fails "
                 "the request with HTTP 500) and every CONTROL token (token_type 3: <pad>, <eos>, "
                 "<bos>, <unk>, <mask>, <start_of_turn>, <end_of_turn>, <unusedN>), so that no "
                 "end-of-generation token ends a prompt early. The raw top-10 still includes them.")


def excluded_ids(model):
    r = GGUFReader(model)
    toks = r.fields["tokenizer.ggml.tokens"].contents()
    types = r.fields["tokenizer.ggml.token_type"].contents()
    out = []
    for i, (t, ty) in enumerate(zip(toks, types)):
        if ty == 3:
            out.append(i)
        elif ty == 6:
            assert t.startswith("<0x") and t.endswith(">") and len(t) == 6, t
            if int(t[3:5], 16) >= 0x80:
                out.append(i)
    return out, len(toks)


def request(excluded):
    return {
        "n_predict": N_PREDICT,
        "temperature": 0,
        "top_k": 1,
        "samplers": ["top_k"],
        "logit_bias": [[t, False] for t in excluded],
        "n_probs": N_PROBS,
        "post_sampling_probs": False,
        "cache_prompt": False,
        "return_tokens": True,
    }


def tokenize(base, text, add_special, parse_special):
    res = post(base + "/tokenize", {"content": text, "add_special": add_special,
                                    "parse_special": parse_special})
    ids = res["tokens"]
    assert all(isinstance(t, int) for t in ids), ids
    return ids


def record_prompt(base, tokens, req, excluded):
    res = post(base + "/completion", dict(req, prompt=tokens), timeout=300)
    n_eval = res["tokens_evaluated"]
    prompt_n = res["timings"]["prompt_n"]
    if n_eval != len(tokens) or prompt_n != len(tokens):
        raise RuntimeError(f"prompt of {len(tokens)} ids: tokens_evaluated={n_eval}, "
                           f"timings.prompt_n={prompt_n} (BOS added or prompt cached?)")
    probs = res["completion_probabilities"]
    if len(probs) != N_PREDICT or res["tokens"] != [p["id"] for p in probs]:
        raise RuntimeError(f"expected {N_PREDICT} steps, got {len(probs)} "
                           f"(stop_type={res.get('stop_type')}, tokens={res['tokens']})")
    steps = []
    for i, p in enumerate(probs):
        top = [[t["id"], t["logprob"]] for t in p["top_logprobs"]]
        if len(top) != N_PROBS:
            raise RuntimeError(f"step {i}: {len(top)} top_logprobs")
        if any(top[j][1] < top[j + 1][1] for j in range(N_PROBS - 1)):
            raise RuntimeError(f"step {i}: top_logprobs not sorted: {top}")
        chosen = p["id"]
        if chosen in excluded:
            raise RuntimeError(f"step {i}: generated excluded token {chosen}")
        allowed = [t for t, _ in top if t not in excluded]
        if allowed and allowed[0] != chosen:
            raise RuntimeError(f"step {i}: generated {chosen}, but the best allowed raw id is "
                               f"{allowed[0]}: {top}")
        if p["logprob"] > top[0][1]:
            raise RuntimeError(f"step {i}: chosen logprob {p['logprob']} > top-1 {top[0][1]}")
        for t, lp in top:
            if t == chosen and lp != p["logprob"]:
                raise RuntimeError(f"step {i}: chosen logprob {p['logprob']} != top entry {lp}")
        s = sum(math.exp(lp) for _, lp in top)
        if not s <= 1.0 + 1e-5:
            raise RuntimeError(f"step {i}: top-{N_PROBS} probabilities sum to {s} (not raw softmax?)")
        steps.append({"token": chosen, "logprob": p["logprob"], "top": top})
    detok = post(base + "/detokenize", {"tokens": res["tokens"]})["content"]
    if detok != res["content"]:
        raise RuntimeError(f"/detokenize {detok!r} != content {res['content']!r}")
    return steps, res["content"], n_eval


def main():
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    model = sys.argv[1] if len(sys.argv) > 1 else os.path.expanduser(
        "~/.cache/poot/models/gemma-3-270m-q4_k_m.gguf")
    out_path = sys.argv[2] if len(sys.argv) > 2 else os.path.join(
        here, "tests", "data", "gemma3_270m", "llama_cpp.json")
    binary = os.environ.get("LLAMA_SERVER",
                            os.path.expanduser("~/.cache/poot/venv/bin/llama-server-vulkan"))
    excluded, n_vocab = excluded_ids(model)
    excluded_set = set(excluded)
    req = request(excluded)
    flags = list(SERVER_FLAGS)
    server = Server(binary, model, flags)
    try:
        server.wait_ready()
        build = get(server.base + "/props")[1].get("build_info", "")
        tokenize_cases = [{"text": text, "add_special": add, "parse_special": parse,
                           "ids": tokenize(server.base, text, add, parse)}
                          for text, add, parse in TOKENIZE]
        prompts = []
        for name, text in PROMPTS:
            ids = tokenize(server.base, text, True, True)
            assert ids[0] == 2 and ids.count(2) == 1, ids
            steps, content, n_eval = record_prompt(server.base, ids, req, excluded_set)
            prompts.append({"name": name, "text": text, "tokens": ids,
                            "tokens_evaluated": n_eval, "greedy_text": content,
                            "steps": steps})
    finally:
        server.stop()
    out = {
        "model": os.path.basename(model),
        "sha256": sha256(model),
        "bytes": os.path.getsize(model),
        "n_vocab": n_vocab,
        "llama_cpp": build,
        "flags": flags,
        "request": {k: v for k, v in req.items() if k != "logit_bias"},
        "excluded_rule": EXCLUDED_RULE,
        "excluded": excluded,
        "tokenize": tokenize_cases,
        "prompts": prompts,
    }
    os.makedirs(os.path.dirname(out_path), exist_ok=True)
    with open(out_path, "w") as f:
        f.write(to_json(out))
    steps = [s for p in prompts for s in p["steps"]]
    argmax = sum(s["token"] == s["top"][0][0] for s in steps)
    with_excluded = sum(any(t in excluded_set for t, _ in s["top"]) for s in steps)
    print(f"{out_path}: llama.cpp {build}; {len(tokenize_cases)} tokenize cases; "
          f"{len(excluded)} excluded ids; chosen == raw top-1 at {argmax}/{len(steps)} steps; "
          f"an excluded id in the top-10 at {with_excluded}/{len(steps)}")
    for p in prompts:
        print(f"  {p['name']}: {len(p['tokens'])} ids -> {[s['token'] for s in p['steps']]} "
              f"{p['greedy_text']!r}")


def to_json(out):
    """JSON with one line per tokenize case and per step, so diffs stay readable."""
    lines = ["{"]
    for k in ("model", "sha256", "bytes", "n_vocab", "llama_cpp", "flags", "request", "excluded_rule", "excluded"):
        lines.append(f"  {json.dumps(k)}: {json.dumps(out[k], ensure_ascii=False)},")
    lines.append('  "tokenize": [')
    for i, c in enumerate(out["tokenize"]):
        comma = "," if i + 1 < len(out["tokenize"]) else ""
        lines.append(f"    {json.dumps(c, ensure_ascii=False)}{comma}")
    lines.append("  ],")
    lines.append('  "prompts": [')
    for i, p in enumerate(out["prompts"]):
        head = {k: p[k] for k in ("name", "text", "tokens", "tokens_evaluated", "greedy_text")}
        lines.append("    " + json.dumps(head, ensure_ascii=False)[:-1] + ', "steps": [')
        for j, s in enumerate(p["steps"]):
            comma = "," if j + 1 < len(p["steps"]) else ""
            lines.append(f"      {json.dumps(s)}{comma}")
        lines.append("    ]}" + ("," if i + 1 < len(out["prompts"]) else ""))
    lines.append("  ]")
    lines.append("}")
    text = "\n".join(lines) + "\n"
    assert json.loads(text) == json.loads(json.dumps(out))
    return text


if __name__ == "__main__":
    main()
