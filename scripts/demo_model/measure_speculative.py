#!/usr/bin/env python3
"""Measure speculative decoding on the demo hybrid (`models/demo-hybrid`) on the CPU: for plain
decoding and `--speculative --num-drafts K`, serve the model with `met serve`, send chat prompts
one at a time (C=1, greedy, each reply ending at its end-of-turn token or --max-tokens; with
--ignore-eos, always --max-tokens), and report
tokens a second (completion tokens over the requests' wall time) and, from `/metrics`, the
acceptance of each draft position. Configurations alternate, rep by rep, so a drifting machine
affects them all alike. Standard library only.

    cargo build --release -p metrale-engine --bin met
    python3 scripts/demo_model/measure_speculative.py --met target/release/met [--reps 2]

`--draft-cost 0` (the default here) drafts K every step whatever the acceptance, so each
position's acceptance is measured; `--draft-cost` omitted from met (`--draft-cost default`) runs
the adaptive policy as served by default.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PROMPTS = [
    "Hello!",
    "Who are you?",
    "What is Metrale?",
    "What is the difference between met and metralectl?",
    "What is the capital of France?",
    "what's the capital of japan",
    "What is 7 + 5?",
    "What sound does a cow make?",
    "What colour is a banana?",
    "What is the opposite of hot?",
    "What day comes after Friday?",
    "Count to 10.",
    "Tell me a short story about a cat.",
    "Tell me a story about a fox at the beach.",
    "How do I bake bread?",
    "Thanks, bye!",
]


def post(url, body, timeout=600):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def get(url):
    with urllib.request.urlopen(url, timeout=30) as r:
        return r.read().decode()


def serve(met, model, extra):
    cmd = [met, "serve", model, "--device", "cpu", "--port", "0", "--model-name", "demo-hybrid", *extra]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    deadline = time.time() + 120
    for line in p.stdout:
        m = re.search(r"listening on (\S+)", line)
        if m:
            base = m.group(1).rstrip("/")
            break
        if time.time() > deadline:
            break
    else:
        p.kill()
        sys.exit(f"met serve {' '.join(extra)}: no `listening on` line")
    threading.Thread(target=lambda: [None for _ in p.stdout], daemon=True).start()
    while time.time() < deadline:
        try:
            get(base + "/ready")
            return p, base
        except Exception:  # noqa: BLE001 - not ready yet
            time.sleep(0.2)
    p.kill()
    sys.exit("met serve: not ready")


def per_position(metrics):
    def series(name):
        out = {}
        for m in re.finditer(re.escape(name) + r'\{[^}]*position="(\d+)"[^}]*\} (\S+)', metrics):
            out[int(m.group(1))] = float(m.group(2))
        return out

    acc = series("vllm:spec_decode_num_accepted_tokens_per_pos_total")
    prop = series("metrale:spec_decode_num_draft_tokens_per_pos_total")
    return [(int(acc.get(p, 0)), int(prop[p])) for p in sorted(prop) if prop[p] > 0]


def run(met, model, extra, max_tokens, ignore_eos):
    p, base = serve(met, model, extra)
    try:
        def chat(prompt):
            body = {"model": "demo-hybrid", "messages": [{"role": "user", "content": prompt}],
                    "max_tokens": max_tokens, "temperature": 0.0,
                    "chat_template_kwargs": {"enable_thinking": False}}
            if ignore_eos:
                body["ignore_eos"] = True
            r = post(base + "/v1/chat/completions", body)
            return r["usage"]["completion_tokens"], r["choices"][0]["message"]["content"]

        chat(PROMPTS[0])  # warm-up, untimed
        before = per_position(get(base + "/metrics")) if extra else []
        tokens, t0, replies = 0, time.time(), []
        for prompt in PROMPTS:
            n, text = chat(prompt)
            tokens += n
            replies.append(text)
        secs = time.time() - t0
        after = per_position(get(base + "/metrics")) if extra else []
        pos = [(a - (before[i][0] if i < len(before) else 0), n - (before[i][1] if i < len(before) else 0))
               for i, (a, n) in enumerate(after)]
        return tokens, secs, pos, replies
    finally:
        p.terminate()
        p.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--met", default=os.path.join(ROOT, "target", "release", "met"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "demo-hybrid"))
    ap.add_argument("--drafts", default="1,2,3")
    ap.add_argument("--draft-cost", default="0", help="met's --speculative-draft-cost, or `default`")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("--ignore-eos", action="store_true",
                    help="generate --max-tokens every request (past the reply: the model goes on as its corpus does)")
    ap.add_argument("--json", default=None, help="also write the results here")
    args = ap.parse_args()
    configs = [("plain", [])]
    for k in args.drafts.split(","):
        extra = ["--speculative", "--num-drafts", k]
        if args.draft_cost != "default":
            extra += ["--speculative-draft-cost", args.draft_cost]
        configs.append((f"{k} drafts", extra))
    totals = {name: [0, 0.0, {}] for name, _ in configs}
    plain_replies = None
    for rep in range(args.reps):
        for name, extra in configs:
            tokens, secs, pos, replies = run(args.met, args.model, extra, args.max_tokens, args.ignore_eos)
            if plain_replies is None and not extra:
                plain_replies = replies
            elif plain_replies is not None and replies != plain_replies:
                print(f"warning: {name}: replies differ from plain decoding", file=sys.stderr)
            t = totals[name]
            t[0] += tokens
            t[1] += secs
            for i, (a, n) in enumerate(pos):
                s = t[2].setdefault(i, [0, 0])
                s[0] += a
                s[1] += n
            print(f"rep {rep} {name:9s}: {tokens} tokens in {secs:6.2f}s = {tokens / secs:7.1f} tok/s  "
                  f"acceptance by position {[round(a / n, 3) for a, n in pos]}", flush=True)
    plain = totals["plain"][0] / totals["plain"][1]
    results = []
    print(f"\n{'config':10s} {'tok/s':>8s} {'speed-up':>9s}  acceptance by position (accepted/verified)")
    for name, _ in configs:
        tokens, secs, pos = totals[name]
        rate = tokens / secs
        acc = [(pos[i][0], pos[i][1]) for i in sorted(pos)]
        results.append({"config": name, "tokens": tokens, "seconds": round(secs, 3), "tok_s": round(rate, 2),
                        "speedup": round(rate / plain, 3), "accepted_verified": acc})
        shown = "  ".join(f"{a / n:.3f} ({a}/{n})" for a, n in acc)
        print(f"{name:10s} {rate:8.1f} {rate / plain:8.2f}x  {shown}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"results": results, "replies": plain_replies}, f, indent=2)


if __name__ == "__main__":
    main()
