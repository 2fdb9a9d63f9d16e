#!/usr/bin/env bash
# Builds what a device call runs and packs it into .gpu/bins.tar.gz, from the repository root
# (the device has no Rust; docs/cuda.md, "On the GPU machine"):
#   met         --features cuda, release
#   cuda_check  --features lab (a separate build: one with both would put the lab into met)
#   metralectl  release, built from a detached worktree of HEAD whose demo weights are emptied
#               and with opt-level z, fat LTO, panic=abort: the tracked tree is about 48 MiB of
#               the 64 MiB a device call carries, and the stock metralectl (which embeds the
#               15 MB demo model) no longer fits beside it. The device runs never serve the
#               embedded demo, so the smaller binary does the same there.
# All three stripped; about 14 MB packed. PACK_SKIP=metralectl leaves that one out (a call
# that runs no bench). Targets: target/ for met and cuda_check, $SMALL_TARGET
# (/work/target-small by default) for the small metralectl.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
skip=${PACK_SKIP:-}
mkdir -p .gpu/bin .git/info
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >>.git/info/exclude
cargo build --release --locked -p metrale-engine --features cuda --bin met
cargo build --release --locked -p metrale-engine --features lab --example cuda_check
cp target/release/met target/release/examples/cuda_check .gpu/bin/
if [[ ,$skip, != *,metralectl,* ]]; then
    wt=$(mktemp -d /tmp/metrale-pack.XXXXXX)
    trap 'git -C "$root" worktree remove --force "$wt" >/dev/null 2>&1 || true' EXIT
    git worktree add -f --detach "$wt" HEAD >/dev/null
    : >"$wt/models/demo/model.safetensors"
    (cd "$wt" && CARGO_TARGET_DIR=${SMALL_TARGET:-/work/target-small} \
        CARGO_PROFILE_RELEASE_OPT_LEVEL=z CARGO_PROFILE_RELEASE_LTO=fat \
        CARGO_PROFILE_RELEASE_CODEGEN_UNITS=1 CARGO_PROFILE_RELEASE_PANIC=abort \
        CARGO_PROFILE_RELEASE_STRIP=symbols cargo build --release --locked -p metralectl)
    cp "${SMALL_TARGET:-/work/target-small}/release/metralectl" .gpu/bin/
fi
strip .gpu/bin/* 2>/dev/null || true
tar czf .gpu/bins.tar.gz -C .gpu/bin .
rm -r .gpu/bin
ls -l .gpu/bins.tar.gz
