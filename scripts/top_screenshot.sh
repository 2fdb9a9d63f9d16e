#!/usr/bin/env sh
# The dashboard screenshot in the README: run the tmux test of `metralectl top` (a live
# `met serve` on a fixture model with streaming requests), keep its coloured screen, and
# render it to docs/top.png. Needs tmux, Pillow and fonts-dejavu-core.
set -eu
cd "$(dirname "$0")/.."
capture="$(mktemp)"
METRALE_TOP_CAPTURE="$capture" cargo test -q -p metralectl --test top top_in_tmux
python3 scripts/ansi_to_png.py "$capture" docs/top.png --cols 120
rm -f "$capture"
