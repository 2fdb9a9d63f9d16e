# Metrale installer (PowerShell). Everything lives in functions and Main is called on the
# last line, so a download cut short runs nothing.
#
# No release has been published yet, so there is nothing this script could download and
# verify; it says so and how to build from source instead.
$ErrorActionPreference = 'Stop'

function Write-Step([string]$Message) {
    [Console]::Error.WriteLine("metrale-install: $Message")
}

function Main {
    Write-Step 'no Metrale release has been published yet, so there is nothing to download and verify.'
    Write-Step 'build from source instead (needs Rust 1.95+ from https://rustup.rs):'
    Write-Step '  git clone https://github.com/metrale/metrale; cd metrale'
    Write-Step '  cargo install --locked --path metralectl; cargo install --locked --path engine'
    exit 1
}

Main
