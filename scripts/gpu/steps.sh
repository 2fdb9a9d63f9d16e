#!/usr/bin/env bash
# One device call as a list of steps, each under its own time limit, from the repository root:
#   bash scripts/gpu/steps.sh DEADLINE STEP...
# DEADLINE: seconds for the whole call (keep it under the call's limit); a step starts only
# with at least 60 s left and runs under `timeout` (what is left - 20, or its T).
# STEP: KIND-ARG[~SUFFIX][@VAR=v+VAR2=v2...] (the variables are exported for that step only;
# T=seconds caps its time):
#   cc-SECTIONS     cuda_check --only SECTIONS (comma-separated)
#   bench-STEM      bench_record.sh on scripts/gpu/STEM-config.json (ISL, OSL, CONC, REPS,
#                   MAX_SEQ_LEN, MAX_BATCHED, METRALE_* from the variables; GPU_BIN=DIR
#                   serves another build packed beside, its met and metralectl in DIR)
#   fam-STEM        the same on scripts/gpu/families/STEM-config.json (OSL 256, REPS 1)
#   sh-NAME         bash -c "$CMD_NAME" (set CMD_NAME in the call's command line)
# e.g. bash scripts/gpu/steps.sh 560 "cc-ops-flash@T=130" \
#        "bench-qwen3-8b~8k@ISL=8192+OSL=16+CONC=1,8+MAX_SEQ_LEN=8256+MAX_BATCHED=8192+T=110"
# A bench step's bench gets what is left of its limit once the server is ready (BENCH_DEADLINE).
# A fresh machine compiles each kernel module on its first use (NVRTC, cached under
# METRALE_KERNEL_CACHE for the rest of the call): give the first step that touches a module
# 30-60 s more (a 70 s ladder step ran out in its bench that way, performance log part 27).
# Binaries: .gpu/bins.txz (xz: smaller to carry) or .gpu/bins.tar.gz from scripts/gpu/pack.sh.
# Under $OUT: summary.txt (each step's tail, as soon as it ends), record-NAME.json for each
# step's record (unsigned: sign them on the build machine), all.tgz (every log).
set -uo pipefail
START=$SECONDS
DEADLINE=${1:?usage: steps.sh DEADLINE STEP...}
shift
cd "$(dirname "$0")/../.." || exit 2
O=${OUT:-/tmp/metrale-steps}
mkdir -p "$O/work" .gpu/bin
S=$O/summary.txt
if [ -f .gpu/bins.txz ]; then
    tar xJf .gpu/bins.txz -C .gpu/bin && tar czf .gpu/bins.tar.gz -C .gpu/bin .
else
    tar xzf .gpu/bins.tar.gz -C .gpu/bin
fi || { echo "no binaries: run scripts/gpu/pack.sh on the build machine" >>"$S"; exit 2; }
export METRALE_KERNEL_CACHE=/tmp/metrale-kernel-cache
mkdir -p "$METRALE_KERNEL_CACHE"
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export LD_LIBRARY_PATH=$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit \
    --format=csv >>"$S" 2>&1
for step in "$@"; do
    left=$((DEADLINE - (SECONDS - START)))
    if [ $left -lt 60 ]; then
        echo "== $step: skipped ($left s left)" >>"$S"
        continue
    fi
    lim=$((left - 20))
    spec=${step%%@*}
    envs=
    [[ $step == *@* ]] && envs=${step#*@}
    # T= as a whole variable (not the tail of another, e.g. ..._ACCEPT=0.7+T=130).
    case "+$envs+" in *+T=*) t=+$envs t=${t##*+T=} t=${t%%+*}; [ "$t" -lt $lim ] && lim=$t ;; esac
    name=${spec//[^A-Za-z0-9_.-]/_}
    kind=${spec%%-*} arg=${spec#*-}
    arg=${arg%%~*}
    w=$O/work/$name
    mkdir -p "$w"
    (
        IFS=+
        for kv in $envs; do export "${kv?}"; done
        unset IFS
        t0=$SECONDS
        case $kind in
        cc)
            timeout -k 5 "$lim" .gpu/bin/cuda_check --fixtures tests/fixtures --out "$w" \
                --only "$arg" >"$w/log.txt" 2>&1
            echo "== $step rc $? ($((SECONDS - t0)) s)"
            grep -E 'FAIL' "$w/log.txt" | sort -u | head -20
            grep -v ': skipped$' "$w/summary.txt" 2>/dev/null | tail -n 60
            ;;
        bench | fam)
            cfg=scripts/gpu/$arg-config.json
            [ "$kind" = fam ] && cfg=scripts/gpu/families/$arg-config.json && export OSL=${OSL:-256} REPS=${REPS:-1}
            OUT=$w MODEL_CONFIG=$cfg MODEL_NAME=$arg-shape METRALE_GPU_BIN=${GPU_BIN:-.gpu/bin} \
                BENCH_DEADLINE=$(($(date +%s) + lim - 10)) timeout -k 5 "$lim" \
                bash scripts/gpu/bench_record.sh >"$w/bench.txt" 2>&1
            echo "== $step rc $? ($((SECONDS - t0)) s)"
            grep -E 'weights:|KV|rror|refus' "$w/serve.txt" 2>/dev/null | head -6
            grep -v 'step profile' "$w/bench.txt" | tail -n 14
            ;;
        sh)
            v=CMD_$arg
            OUT=$w timeout -k 5 "$lim" bash -c "${!v}" >"$w/out.txt" 2>&1
            echo "== $step rc $? ($((SECONDS - t0)) s)"
            tail -n 40 "$w/out.txt"
            ;;
        *) echo "== $step: unknown kind $kind" ;;
        esac
    ) >>"$S" 2>&1
    for r in "$w"/record*.json "$w"/mixed.json; do
        [ -f "$r" ] && cp "$r" "$O/record-$name.json"
    done
done
tar czf "$O/all.tgz" -C "$O/work" . 2>/dev/null
rm -rf "$O/work"
cat "$S"
