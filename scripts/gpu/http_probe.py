#!/usr/bin/env python3
"""Probe `met serve` over real HTTP on the GPU machine (standard library only: that machine has
no network to install a client from).

  http_probe.py equal URL_A URL_B      greedy completions from two servers must be identical
  http_probe.py ladder URL --isl 128 --osl 1024 --conc 1,2,4,8,16,32,64,128 --reps 3 --warmup 1 --out FILE.json
                                       a throughput ladder of streamed requests: tok/s mean and
                                       spread over reps, TTFT and ITL percentiles (the harness
                                       that will replace this is `metralectl bench`, issue 8)
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


def stream_one(url, body):
    """One streamed completion: (completion tokens, TTFT s, latency s). A stream that ends
    without [DONE] or carries an error raises, so it counts as an error, never a success."""
    body = dict(body, stream=True, stream_options={"include_usage": True})
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    t0 = time.perf_counter()
    ttft = None
    tokens = None
    done = False
    with urllib.request.urlopen(req, timeout=600) as r:
        for raw in r:
            line = raw.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                done = True
                break
            ev = json.loads(data)
            if "error" in ev:
                raise RuntimeError(f"in-band error: {ev['error']}")
            if ttft is None and ev.get("choices") and ev["choices"][0].get("text"):
                ttft = time.perf_counter() - t0
            if ev.get("usage"):
                tokens = ev["usage"]["completion_tokens"]
    latency = time.perf_counter() - t0
    if not done or tokens is None:
        raise RuntimeError("stream ended early")
    return tokens, ttft if ttft is not None else latency, latency


def pct(values, q):
    v = sorted(values)
    return v[min(len(v) - 1, int(round(q / 100 * (len(v) - 1))))] if v else float("nan")


def ladder(url, isl, osl, conc, out, max_id, reps, warmup):
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
        rep_tok_s, ttfts, itls, errors, tokens_total = [], [], [], 0, 0
        for rep in range(warmup + reps):
            jobs = [prompt() for _ in range(c)]
            t0 = time.perf_counter()
            res = run_concurrently(lambda p: stream_one(url, body(p, osl)), jobs)
            wall = time.perf_counter() - t0
            if rep < warmup:
                continue
            ok = [r for r in res if not isinstance(r, Exception)]
            bad = [r for r in res if isinstance(r, Exception)]
            short = [r for r in ok if r[0] != osl]
            errors += len(bad) + len(short)
            for e in bad[:2]:
                print(f"  error: {e}", flush=True)
            tokens = sum(n for n, _, _ in ok)
            tokens_total += tokens
            rep_tok_s.append(tokens / wall)
            ttfts += [t * 1000 for _, t, _ in ok]
            itls += [(l - t) / (n - 1) * 1000 for n, t, l in ok if n > 1]
        mean = statistics.mean(rep_tok_s)
        row = {"concurrency": c, "reps": reps, "tok_s_mean": mean, "tok_s_reps": rep_tok_s,
               "tok_s_spread": (max(rep_tok_s) - min(rep_tok_s)) / mean if mean else 0,
               "ttft_ms_p50": pct(ttfts, 50), "ttft_ms_p90": pct(ttfts, 90), "ttft_ms_p99": pct(ttfts, 99),
               "itl_ms_p50": pct(itls, 50), "itl_ms_p90": pct(itls, 90), "itl_ms_p99": pct(itls, 99),
               "output_tokens": tokens_total, "errors": errors}
        rows.append(row)
        print(f"C={c:4d}  {mean:9.1f} tok/s (spread {row['tok_s_spread']*100:4.1f}%)  "
              f"TTFT p50 {row['ttft_ms_p50']:7.1f} ms  ITL p50 {row['itl_ms_p50']:6.2f} p99 {row['itl_ms_p99']:6.2f} ms  "
              f"errors {errors}", flush=True)
    result = {"isl": isl, "osl": osl, "reps": reps, "warmup": warmup,
              "ttft_ms_c1_median": statistics.median(ttft), "ttft_ms_c1_all": ttft, "rungs": rows}
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
    l.add_argument("--reps", type=int, default=1)
    l.add_argument("--warmup", type=int, default=0)
    a = ap.parse_args()
    if a.cmd == "equal":
        return equal(a.a, a.b)
    return ladder(a.url, a.isl, a.osl, [int(x) for x in a.conc.split(",")], a.out, a.max_id, a.reps, a.warmup)


if __name__ == "__main__":
    sys.exit(main())
