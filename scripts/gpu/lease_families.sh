#!/usr/bin/env bash
# The model families' ladders (issues 39 and 40), from the repository root, with
# .gpu/bins.tar.gz holding met (--features cuda) and metralectl (scripts/gpu/pack.sh).
#   lease_families.sh FAMILY...   one server each, at the real shapes of
#                                 scripts/gpu/families/<FAMILY>-config.json with dummy weights
#                                 drawn on the GPU: metralectl bench ladders at CONC (default
#                                 1,2,4,8,16,32,64,128), REPS (default 1), ISL 128, OSL 256.
# FAMILY is a config's stem: llama3.1-8b, mistral-small-3.2-24b, gemma3-27b, gpt-oss-20b, gpt-oss-120b,
# nemotron-nano-9b-v2, minimax-m2-16l (16 of its 62 layers: 60 GB of FP8 weights fit an 80 GB
# card), deepseek-v3.1-8l (its 3 dense layers and 5 of its 58 MoE layers).
# MAX_BATCH_<stem with - and . as _> overrides --max-batch-size (default 128), e.g.
# MAX_BATCH_gemma3_27b=64. Under $OUT: summary.txt, record-<FAMILY>.json (unsigned: sign them
# on the build machine, docs/benchmarks.md) and all.tgz (every log, versions included).
LEASE=families
# shellcheck source=scripts/gpu/lease_common.sh
. "$(dirname "$0")/lease_common.sh"
W=$ROOT_OUT/work
[ $# -gt 0 ] || { echo "usage: lease_families.sh FAMILY..." >&2; exit 2; }
for fam in "$@"; do
    cfg=scripts/gpu/families/$fam-config.json
    [ -f "$cfg" ] || { echo "== $fam: no $cfg" >>"$S"; continue; }
    o=$W/$fam
    mkdir -p "$o"
    var=MAX_BATCH_${fam//[-.]/_}
    OUT=$o MODEL_CONFIG=$cfg MODEL_NAME=$fam-shape OSL=256 REPS=${REPS:-1} \
        CONC=${CONC:-1,2,4,8,16,32,64,128} MAX_BATCH=${!var:-128} METRALE_GPU_BIN=.gpu/bin \
        BENCH_TIMEOUT=${BENCH_TIMEOUT:-150} bash scripts/gpu/bench_record.sh >"$o/bench.txt" 2>&1
    { echo "== $fam"; grep -E 'weights:|KV|error|Error|refus' "$o/serve.txt" | head -6
      grep -v 'step profile' "$o/bench.txt" | tail -n 12
      grep 'step profile' "$o/bench.txt" | tail -n 2; } >>"$S"
    [ -f "$o/record.json" ] && cp "$o/record.json" "$ROOT_OUT/record-$fam.json"
done
lease_end
