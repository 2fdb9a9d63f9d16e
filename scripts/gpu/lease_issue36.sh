#!/usr/bin/env bash
# Issue 36's lease (constrained decoding at nearly the speed of free text), from the repository
# root, with .gpu/bins.tar.gz holding met (--features cuda) and metralectl (docs/cuda.md says how
# to build and pack them).
#   lease_issue36.sh ladder   Qwen3-8B shape (dummy weights, bf16, ISL 128): one server a run,
#                             `metralectl bench --response-format F --against` the same server, so
#                             each rung runs the constrained ladder and the free one rep by rep in
#                             turn; the record's against.ratio is constrained / free (the issue
#                             asks >= 0.9 at every rung). RUNS picks them (default "json schema":
#                             json_object, and scripts/gpu/issue36-schema.json); "json-inline"
#                             is json_object with METRALE_GRAMMAR_OVERLAP=0 (masks computed when
#                             sampling), to show what the overlap buys. CONC (default
#                             1,2,4,8,16,32,64), OSL (default 256) and REPS (default 2) override.
# The bench's ignore_eos makes the server write one value after another to OSL, every token under
# the grammar. One kernel cache for every process. Under $OUT: summary.txt, record-<run>.json
# (unsigned: sign them on the build machine, docs/benchmarks.md) and all.tgz (every log).
LEASE=issue36
# shellcheck source=scripts/gpu/lease_common.sh
. "$(dirname "$0")/lease_common.sh"
case ${1:-ladder} in
ladder)
    for run in ${RUNS:-json schema}; do
        format=json_object overlap=
        case $run in
        schema) format=scripts/gpu/issue36-schema.json ;;
        json-inline) overlap=0 ;;
        esac
        o=$ROOT_OUT/work/$run
        mkdir -p "$o"
        env ${overlap:+METRALE_GRAMMAR_OVERLAP=$overlap} OUT=$o \
            BENCH_FLAGS="--response-format $format --against http://127.0.0.1:8104" \
            OSL=${OSL:-256} REPS=${REPS:-2} CONC=${CONC:-1,2,4,8,16,32,64} \
            METRALE_GPU_BIN=.gpu/bin BENCH_TIMEOUT=${BENCH_TIMEOUT:-280} \
            bash scripts/gpu/bench_record.sh >"$o/bench.txt" 2>&1
        { echo "== $run (--response-format $format${overlap:+, METRALE_GRAMMAR_OVERLAP=$overlap})"
          grep -v 'step profile' "$o/bench.txt" | tail -n 24
          grep 'step profile' "$o/bench.txt" | tail -n 3; grep -iE 'graph|error|warn' "$o/serve.txt" | head -5
          [ -f "$o/record.json" ] && python3 -c 'import json,sys
r=json.load(open(sys.argv[1])); a=r.get("against") or {}
for rung,ratio in zip(r["rungs"], a.get("ratio", [])):
    print("C=%-3d constrained %8.1f tok/s  free %8.1f  ratio %.3f %s" % (rung["concurrency"],
          rung["output_tok_s"]["mean"], rung["output_tok_s"]["mean"]/ratio if ratio else 0, ratio,
          "ok" if ratio >= 0.9 else "BELOW 0.9"))' "$o/record.json"; } >>"$S"
        [ -f "$o/record.json" ] && cp "$o/record.json" "$ROOT_OUT/record-$run.json"
    done
    ;;
*)
    echo "usage: lease_issue36.sh ladder" >&2
    exit 2
    ;;
esac
lease_end
