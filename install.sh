#!/bin/sh
# Metrale installer (POSIX sh). Everything lives in functions and `main "$@"` is the last
# line, so a download cut short runs nothing.
#
# No release has been published yet, so there is nothing this script could download and
# verify; it says so and how to build from source instead. The verifying installer (checksums
# and signatures, fail closed) arrives with the first release.
set -eu

say() {
    printf 'metrale-install: %s\n' "$1" >&2
}

main() {
    say "no Metrale release has been published yet, so there is nothing to download and verify."
    say "build from source instead (needs Rust 1.95+ from https://rustup.rs):"
    say "  git clone https://github.com/metrale/metrale && cd metrale"
    say "  cargo install --locked --path metralectl && cargo install --locked --path engine"
    exit 1
}

main "$@"
