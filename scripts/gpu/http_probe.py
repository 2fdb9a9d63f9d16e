#!/usr/bin/env python3
"""Probe `met serve` over real HTTP on the GPU machine (standard library only: that machine has
no network to install a client from).

  http_probe.py equal URL_A URL_B      greedy completions from two servers must be identical
  http_probe.py ladder URL --isl 128 --osl 256 --conc 1,8,64,128 --out FILE.json
                                       a quick throughput ladder (one timed rep a rung; the
                                       real benchmark with reps and spread is `metralectl bench`)
"""

import argparse
import json
import random
import statistics
import sys
import threading
import time
import urllib.request


def post(url, body, timeout=600):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def run_concurrently(fn, jobs):
    out = [None] * len(jobs)

    def work(i, job):
        try:
            out[i] = fn(job)
        except Exception as e:  # reported, never swallowed
            out[i] = e

    threads = [threading.Thread(target=work, args=(i, j)) for i, j in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def equal(a, b):
    prompts = [f"{w} " * n for n, w in zip(range(1, 13), "the quick brown fox jumps over a lazy dog and then sleeps".split())]
    def ask(base):
        return run_concurrently(
            lambda p: post(base + "/v1/completions", {"prompt": p, "max_tokens": 24, "temperature": 0, "ignore_eos": True, "logprobs": 0}),
            prompts)
    ra, rb = ask(a), ask(b)
    bad = 0
    for i, (x, y) in enumerate(zip(ra, rb)):
        if isinstance(x, Exception) or isinstance(y, Exception):
            print(f"prompt {i}: error {x if isinstance(x, Exception) else y}")
            bad += 1
            continue
        tx, ty = x["choices"][0]["text"], y["choices"][0]["text"]
        if tx != ty:
            bad += 1
            print(f"prompt {i}: differ\n  A {tx!r}\n  B {ty!r}")
    print(f"equal: {len(prompts) - bad}/{len(prompts)} greedy completions identical (A={a}, B={b})", flush=True)
    return 0 if bad == 0 else 1


def ladder(url, isl, osl, conc, out, max_id):
    rng = random.Random(0)
    def prompt():
        return [rng.randrange(100, max_id) for _ in range(isl)]
    body = lambda p, n: {"prompt": p, "max_tokens": n, "temperature": 0, "ignore_eos": True}
    post(url + "/v1/completions", body(prompt(), 8))  # warm-up
    ttft = []
    for _ in range(5):
        t0 = time.perf_counter()
        post(url + "/v1/completions", body(prompt(), 1))
        ttft.append((time.perf_counter() - t0) * 1000)
    rows = []
    for c in conc:
        jobs = [prompt() for _ in range(c)]
        def one(p):
            t0 = time.perf_counter()
            r = post(url + "/v1/completions", body(p, osl))
            return r["usage"]["completion_tokens"], time.perf_counter() - t0
        t0 = time.perf_counter()
        res = run_concurrently(one, jobs)
        wall = time.perf_counter() - t0
        errors = [r for r in res if isinstance(r, Exception)]
        ok = [r for r in res if not isinstance(r, Exception)]
        tokens = sum(n for n, _ in ok)
        lat = [l for _, l in ok]
        row = {"concurrency": c, "output_tokens": tokens, "wall_s": wall, "tok_s": tokens / wall,
               "per_request_tok_s": statistics.median([n / l for n, l in ok]) if ok else 0,
               "errors": len(errors)}
        rows.append(row)
        print(f"C={c:4d}  {row['tok_s']:9.1f} tok/s aggregate  {row['per_request_tok_s']:7.1f} tok/s a request  "
              f"wall {wall:6.2f} s  errors {len(errors)}", flush=True)
    result = {"isl": isl, "osl": osl, "ttft_ms_c1_median": statistics.median(ttft), "ttft_ms_c1_all": ttft, "rungs": rows}
    print(f"TTFT at C=1 (max_tokens=1 round trip, median of 5): {result['ttft_ms_c1_median']:.1f} ms")
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    return 0


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("equal")
    e.add_argument("a")
    e.add_argument("b")
    l = sub.add_parser("ladder")
    l.add_argument("url")
    l.add_argument("--isl", type=int, default=128)
    l.add_argument("--osl", type=int, default=256)
    l.add_argument("--conc", default="1,8,64,128")
    l.add_argument("--out", required=True)
    l.add_argument("--max-id", type=int, default=5000, help="prompt token ids are drawn below this")
    a = ap.parse_args()
    if a.cmd == "equal":
        return equal(a.a, a.b)
    return ladder(a.url, a.isl, a.osl, [int(x) for x in a.conc.split(",")], a.out, a.max_id)


if __name__ == "__main__":
    sys.exit(main())
