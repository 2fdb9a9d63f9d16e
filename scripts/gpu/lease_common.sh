# Sourced by the lease_issue*.sh scripts (from scripts/gpu/): to the repository root, the
# binaries of .gpu/bins.tar.gz unpacked into .gpu/bin, one kernel cache for every process of
# the call, and ROOT_OUT ($OUT, else /tmp/metrale-$LEASE) with its work/ folder and the summary
# file S. lease_end packs work/ into all.tgz and prints the summary.
cd "$(dirname "$0")/../.." || exit 2
ROOT_OUT=${OUT:-/tmp/metrale-$LEASE}
mkdir -p "$ROOT_OUT/work" .gpu/bin
tar xzf .gpu/bins.tar.gz -C .gpu/bin || exit 2
export METRALE_KERNEL_CACHE=/tmp/metrale-kernel-cache
mkdir -p "$METRALE_KERNEL_CACHE"
S=$ROOT_OUT/summary.txt

lease_end() {
    tar czf "$ROOT_OUT/all.tgz" -C "$ROOT_OUT/work" . 2>/dev/null
    rm -rf "$ROOT_OUT/work"
    cat "$S"
}
