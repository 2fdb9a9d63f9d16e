#!/usr/bin/env bash
# Build the Metrale demo model from nothing: generate our corpus, train the tokenizer, train the
# model within a wall-clock budget, write the checkpoint to OUTDIR.
#
#   scripts/demo_model/run.sh OUTDIR
#
# Run from anywhere; paths are resolved from the repository root. Needs python3 with torch,
# transformers, tokenizers, safetensors and numpy (no network). Writes:
#   OUTDIR/                 the checkpoint (config.json, generation_config.json, model.safetensors,
#                           tokenizer.json, tokenizer_config.json, README.md)
#   OUTDIR.log              the full log (also printed)
#   OUTDIR.report.json      losses, sizes and the sample replies
#
# Environment (all optional):
#   CHAT_TEMPLATE   Qwen3 chat template (default tests/fixtures/chat_template/qwen3.jinja)
#   TOTAL_MINUTES   wall-clock budget for the whole script (default 7)
#   CORPUS_MB       size of the generated corpus in MB (default 64)
#   WORKDIR         where the corpus and tokenizer go (default: a fresh temporary directory)
#   PYTHON          interpreter (default python3)
#   TRAIN_ARGS      extra arguments for train.py, e.g. "--device cpu --max-steps 20"
#   TOKENIZER_ARGS  extra arguments for train_tokenizer.py
set -euo pipefail

if [[ $# -ne 1 ]]; then
    echo "usage: $0 OUTDIR" >&2
    exit 2
fi
START=$(date +%s)
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUTDIR=$(mkdir -p "$(dirname "$1")" && cd "$(dirname "$1")" && pwd)/$(basename "$1")
PYTHON=${PYTHON:-python3}
CHAT_TEMPLATE=${CHAT_TEMPLATE:-$ROOT/tests/fixtures/chat_template/qwen3.jinja}
TOTAL_MINUTES=${TOTAL_MINUTES:-7}
CORPUS_MB=${CORPUS_MB:-64}
LOG="$OUTDIR.log"
export PYTHONUNBUFFERED=1
export TOKENIZERS_PARALLELISM=true

if [[ ! -f "$CHAT_TEMPLATE" ]]; then
    echo "run.sh: error: chat template not found: $CHAT_TEMPLATE" >&2
    echo "run.sh: the demo model needs Qwen3's chat template; set CHAT_TEMPLATE=path/to/qwen3.jinja" >&2
    exit 2
fi
if [[ -z "${WORKDIR:-}" ]]; then
    WORKDIR=$(mktemp -d "${TMPDIR:-/tmp}/metrale-demo.XXXXXX")
    trap 'rm -rf "$WORKDIR"' EXIT
fi
mkdir -p "$WORKDIR"
: >"$LOG"

step() { echo "== [$(( $(date +%s) - START ))s] $*" | tee -a "$LOG"; }

step "demo model build -> $OUTDIR (work dir $WORKDIR, budget ${TOTAL_MINUTES} min)"
"$PYTHON" - <<'EOF' 2>&1 | tee -a "$LOG"
import platform, torch, transformers, tokenizers, safetensors
cuda = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
print(f"python {platform.python_version()}, torch {torch.__version__}, transformers {transformers.__version__}, "
      f"tokenizers {tokenizers.__version__}, safetensors {safetensors.__version__}, cuda device: {cuda}")
EOF

step "1/3 corpus"
"$PYTHON" "$HERE/make_corpus.py" --out "$WORKDIR/corpus" --target-mb "$CORPUS_MB" 2>&1 | tee -a "$LOG"

step "2/3 tokenizer"
# shellcheck disable=SC2086
"$PYTHON" "$HERE/train_tokenizer.py" --corpus "$WORKDIR/corpus/corpus.txt" \
    --samples "$WORKDIR/corpus/samples.jsonl" --chat-template "$CHAT_TEMPLATE" \
    --out "$WORKDIR/tokenizer" ${TOKENIZER_ARGS:-} 2>&1 | tee -a "$LOG"

ELAPSED=$(( $(date +%s) - START ))
TRAIN_MINUTES=$(awk -v t="$TOTAL_MINUTES" -v e="$ELAPSED" 'BEGIN { m = t - e / 60.0; if (m < 1) m = 1; printf "%.2f", m }')
step "3/3 model (train.py budget ${TRAIN_MINUTES} min)"
# shellcheck disable=SC2086
"$PYTHON" "$HERE/train.py" --corpus "$WORKDIR/corpus/corpus.txt" --tokenizer "$WORKDIR/tokenizer" \
    --out "$OUTDIR" --report "$OUTDIR.report.json" --max-minutes "$TRAIN_MINUTES" ${TRAIN_ARGS:-} 2>&1 | tee -a "$LOG"

step "done: $OUTDIR ($(du -sh "$OUTDIR" | cut -f1)), log $LOG"
