#!/usr/bin/env bash
# Issue 33's lease (MTP that pays), from the repository root, with .gpu/bins.tar.gz holding met
# (--features cuda) and metralectl (docs/cuda.md says how to build and pack them).
#   lease_issue33.sh spec    Qwen3.6-35B-A3B FP8 shape (dummy weights, ISL 128, OSL 256): plain,
#                            then --speculative --num-drafts 3 at forced acceptance 0.7 and at 0,
#                            one server each, side by side in one run. RUNS picks them (default
#                            "plain spec07 spec0"; fixed07 and fixed0 are the same with
#                            --speculative-draft-cost 0: always 3 drafts, no adaptive drafting).
#                            CONC (default 1,4,8,16) and REPS (default 2) override the ladder.
#   lease_issue33.sh profile The same shape under Nsight Compute (one metric, each kernel's own
#                            time, serialised), one server a run (RUNS, default "plain spec":
#                            spec is --speculative --num-drafts 3 with the draft cost 0 and
#                            forced acceptance 0.7; spec0 is adaptive drafting at forced
#                            acceptance 0, which settles on no drafts): two greedy 128-token-prompt requests of
#                            MAX_TOKENS (default 48) at C=1; ncu-<run>.csv.gz holds every kernel
#                            in launch order (the dummy fills excluded), for
#                            scripts/gpu/step_kernels.py.
# One kernel cache for every process. Under $OUT: summary.txt, record-<run>.json (unsigned:
# sign them on the build machine, docs/benchmarks.md) and all.tgz (every log).
LEASE=issue33
# shellcheck source=scripts/gpu/lease_common.sh
. "$(dirname "$0")/lease_common.sh"
case ${1:-spec} in
spec)
    for run in ${RUNS:-plain spec07 spec0}; do
        flags= force= conc=${CONC:-1,4,8,16}
        case $run in
        spec07) flags="--speculative --num-drafts 3" force=0.7 ;;
        spec0) flags="--speculative --num-drafts 3" force=0 ;;
        fixed07) flags="--speculative --num-drafts 3 --speculative-draft-cost 0" force=0.7 ;;
        fixed0) flags="--speculative --num-drafts 3 --speculative-draft-cost 0" force=0 ;;
        esac
        o=$ROOT_OUT/work/$run
        mkdir -p "$o"
        env ${force:+METRALE_SPEC_FORCE_ACCEPT=$force} \
            MET_FLAGS="$flags" OUT=$o \
            MODEL_CONFIG=scripts/gpu/qwen3.6-35b-a3b-fp8-config.json \
            MODEL_NAME=qwen3.6-35b-a3b-fp8-shape OSL=256 REPS=${REPS:-2} CONC=$conc \
            METRALE_GPU_BIN=.gpu/bin BENCH_TIMEOUT=${BENCH_TIMEOUT:-200} \
            bash scripts/gpu/bench_record.sh >"$o/bench.txt" 2>&1
        { echo "== $run ($flags, forced acceptance ${force:-none})"; grep -v 'step profile' "$o/bench.txt" | tail -n 10
          grep 'step profile' "$o/bench.txt" | tail -n 3; grep -iE 'graph|error' "$o/serve.txt" | head -5
          grep -E '^metrale:spec_decode' "$o/bench.txt" | head -6; } >>"$S"
        [ -f "$o/record.json" ] && cp "$o/record.json" "$ROOT_OUT/record-$run.json"
    done
    ;;
profile)
    export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
    export PATH=$CUDA_HOME/bin:$PATH LD_LIBRARY_PATH=$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    prompt=$(python3 -c 'print(" ".join(["tok"] * 127))')
    for run in ${RUNS:-plain spec}; do
        flags= force=
        [ "$run" = spec ] && flags="--speculative --num-drafts 3 --speculative-draft-cost 0" force=0.7
        [ "$run" = spec0 ] && flags="--speculative --num-drafts 3" force=0
        dir=$(mktemp -d)
        cp scripts/gpu/qwen3.6-35b-a3b-fp8-config.json "$dir/config.json"
        cp models/demo/tokenizer.json models/demo/tokenizer_config.json "$dir/"
        env ${force:+METRALE_SPEC_FORCE_ACCEPT=$force} timeout 400 ncu --clock-control none \
            --cache-control none --metrics gpu__time_duration.sum --csv \
            -k 'regex:^(?!fill_)' --launch-count ${LAUNCHES:-14000} \
            .gpu/bin/met serve "$dir" --device cuda --load-format dummy --port 8105 \
            --model-name p --no-tui --max-seq-len 2048 --max-batch-size 8 $flags \
            >"$ROOT_OUT/work/ncu-$run.csv" 2>"$ROOT_OUT/work/serve-$run.txt" &
        pid=$!
        ready=
        for _ in $(seq 1 900); do
            curl -sf http://127.0.0.1:8105/ready >/dev/null 2>&1 && ready=1 && break
            sleep 0.2
        done
        echo "== $run ready=${ready:-no}" >>"$S"
        for _ in 1 2; do
            curl -s http://127.0.0.1:8105/v1/completions -H 'content-type: application/json' \
                -d "{\"model\":\"p\",\"prompt\":\"$prompt\",\"max_tokens\":${MAX_TOKENS:-48},\"temperature\":0,\"ignore_eos\":true}" \
                | head -c 300 >>"$S"
            echo >>"$S"
        done
        pkill -INT -f 'met serve' ; wait $pid
        echo "rc $? rows $(grep -c gpu__time_duration "$ROOT_OUT/work/ncu-$run.csv")" >>"$S"
        tail -n 3 "$ROOT_OUT/work/serve-$run.txt" >>"$S"
        gzip -c "$ROOT_OUT/work/ncu-$run.csv" >"$ROOT_OUT/ncu-$run.csv.gz"
    done
    ;;
esac
lease_end
