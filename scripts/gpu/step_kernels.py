#!/usr/bin/env python3
"""Where a served step's GPU time goes, from `ncu --csv --metrics gpu__time_duration.sum` of
`met serve` (scripts/gpu/lease_issue33.sh profile): the kernels in launch order are cut into
forwards at each embedding launch, the forwards grouped by their kernel count (a target step,
a prefill chunk, an MTP pass), and each group's mean time per kernel name printed, largest
first. Usage: step_kernels.py NCU_CSV[.gz] [--skip N] [--top K]"""
import argparse
import collections
import csv
import gzip
import io


def rows(path):
    raw = gzip.open(path, "rt") if path.endswith(".gz") else open(path)
    text = raw.read()
    start = text.find('"ID"')
    for r in csv.DictReader(io.StringIO(text[start:])):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        v = float(r["Metric Value"].replace(",", ""))
        unit = r.get("Metric Unit", "nsecond")
        scale = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3}.get(unit, 1e-3)
        yield r["Kernel Name"].split("(")[0], v * scale


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--skip", type=int, default=0, help="forwards to drop at the start")
    ap.add_argument("--top", type=int, default=14)
    a = ap.parse_args()
    forwards, cur = [], []
    for name, us in rows(a.csv):
        if name.startswith("embedding") and cur:
            forwards.append(cur)
            cur = []
        cur.append((name, us))
    if cur:
        forwards.append(cur)
    forwards = forwards[a.skip:]
    groups = collections.defaultdict(list)
    for f in forwards:
        groups[len(f)].append(f)
    print(f"{len(forwards)} forwards; sequence of kernel counts: "
          + " ".join(str(len(f)) for f in forwards[:80]))
    for n, fs in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        total = sum(us for f in fs for _, us in f) / len(fs)
        print(f"\n== {len(fs)} forwards of {n} kernels: {total:.1f} us each")
        by = collections.defaultdict(lambda: [0.0, 0])
        for f in fs:
            for name, us in f:
                by[name][0] += us / len(fs)
                by[name][1] += 1
        for name, (us, c) in sorted(by.items(), key=lambda kv: -kv[1][0])[: a.top]:
            print(f"  {us:9.1f} us  {c // len(fs):4d}x  {name}")


if __name__ == "__main__":
    main()
