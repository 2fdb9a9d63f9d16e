#!/bin/sh
# Metrale installer (POSIX sh). Installs `metralectl` and `met` from a signed release:
#
#   curl --proto '=https' --tlsv1.2 -fsSL https://github.com/metrale/metrale/releases/latest/download/install.sh | sh
#   sh install.sh [--version V] [--yes] [--no-modify-path] [--uninstall]
#
# It fails closed: SHA256SUMS must carry a valid minisign signature by the release key below,
# the archive must match its line in SHA256SUMS, and nothing is unpacked or installed before
# both hold. See docs/install.md for the chain of trust.
#
# The whole script is one brace group whose last line calls main: a download cut short anywhere,
# even inside that last line, is a syntax error, and the shell runs nothing.
{
set -eu

# The release public key (keys/release.pub, minisign format). Tests replace this one line.
METRALE_RELEASE_PUBKEY='RWTJiwzENtlQyxgPMm6tLlI02g2OK4+Jr4KcRJV6BtCpvy99SLyBhoWX'
DEFAULT_BASE_URL='https://github.com/metrale/metrale/releases'
PATH_MARK='# added by the Metrale installer'

say() {
    printf 'metrale-install: %s\n' "$*" >&2
}

die() {
    printf 'metrale-install: error: %s\n' "$*" >&2
    exit 1
}

usage() {
    cat <<'EOF'
Metrale installer: downloads metralectl and met, checks the release signature and the archive's
SHA-256, and installs into ~/.local/bin (or $METRALE_INSTALL_DIR).

usage: install.sh [--version VERSION] [--yes] [--no-modify-path] [--uninstall]

  --version V       install release V instead of the latest
  -y, --yes         do not ask for confirmation (never asked without a terminal)
  --no-modify-path  do not add the install directory to PATH in your shell profile
  --uninstall       remove exactly what a previous install added
  -h, --help        this text

environment:
  METRALE_INSTALL_DIR   where to install [default: ~/.local/bin]
  METRALE_DOWNLOAD_URL  release base URL (a mirror) [default: https://github.com/metrale/metrale/releases]
EOF
}

parse_args() {
    VERSION=''
    YES=0
    MODIFY_PATH=1
    UNINSTALL=0
    while [ $# -gt 0 ]; do
        case $1 in
            --version)
                [ $# -ge 2 ] || die "--version needs a value, e.g. --version 0.2.0"
                VERSION=$2
                shift 2
                ;;
            --version=*)
                VERSION=${1#--version=}
                shift
                ;;
            -y | --yes)
                YES=1
                shift
                ;;
            --no-modify-path)
                MODIFY_PATH=0
                shift
                ;;
            --uninstall)
                UNINSTALL=1
                shift
                ;;
            -h | --help)
                usage
                exit 0
                ;;
            *) die "unknown option '$1' (see --help)" ;;
        esac
    done
    VERSION=${VERSION#v}
    case $VERSION in
        *[!0-9A-Za-z.+-]*) die "'$VERSION' is not a version (e.g. --version 0.2.0)" ;;
    esac
}

# Whether to ask questions: only with a terminal to ask on, and without --yes.
interactive() {
    [ "$YES" = 0 ] && { [ -t 1 ] || [ -t 2 ]; } && (: </dev/tty) 2>/dev/null
}

# Asks a yes/no question on the terminal; the default is yes.
confirm() {
    interactive || return 0
    printf 'metrale-install: %s [Y/n] ' "$1" >&2
    read -r answer </dev/tty || answer=n
    case $answer in
        '' | y | Y | yes) return 0 ;;
        *) die "cancelled; nothing was changed" ;;
    esac
}

need() {
    command -v "$1" >/dev/null 2>&1 || die "$1 is required but not found on PATH: install it and rerun"
}

is_musl() {
    if ldd --version 2>&1 | grep -qi musl; then
        return 0
    fi
    for f in /lib/ld-musl-*; do
        [ -e "$f" ] && return 0
    done
    return 1
}

# Sets TARGET to the release target of this machine, or stops with an explicit error.
detect_target() {
    os=$(uname -s)
    arch=$(uname -m)
    case $arch in
        x86_64 | amd64) arch=x86_64 ;;
        aarch64 | arm64) arch=aarch64 ;;
        *) die "unsupported CPU architecture '$arch': releases are built for x86_64 and aarch64; build from source instead (docs/install.md)" ;;
    esac
    case $os in
        Linux)
            if is_musl; then
                TARGET=$arch-unknown-linux-musl
            else
                TARGET=$arch-unknown-linux-gnu
            fi
            ;;
        Darwin) TARGET=$arch-apple-darwin ;;
        MINGW* | MSYS* | CYGWIN* | Windows_NT) die "this is Windows: run install.ps1 in PowerShell instead (docs/install.md)" ;;
        *) die "unsupported operating system '$os': releases are built for Linux, macOS and Windows; build from source instead (docs/install.md)" ;;
    esac
}

# Sets BASE_URL and PROTO (curl's allowed protocols): https, or http to a loopback address only.
check_base_url() {
    BASE_URL=${METRALE_DOWNLOAD_URL:-$DEFAULT_BASE_URL}
    BASE_URL=${BASE_URL%/}
    case $BASE_URL in
        https://*) PROTO='=https' ;;
        http://127.0.0.1 | http://127.0.0.1[:/]* | http://localhost | http://localhost[:/]* | 'http://[::1]' | 'http://[::1]'[:/]*)
            PROTO='=http'
            ;;
        *) die "refusing to download from '$BASE_URL': only https:// URLs are allowed (plain http:// only to 127.0.0.1, localhost or [::1])" ;;
    esac
}

# Sets HASHER to a SHA-256 tool; without one, nothing could be checked, so stop.
find_hasher() {
    for tool in sha256sum shasum openssl; do
        if command -v "$tool" >/dev/null 2>&1; then
            HASHER=$tool
            return 0
        fi
    done
    die "no SHA-256 tool found (sha256sum, shasum or openssl), so the download could not be checked: install one (e.g. coreutils) and rerun; nothing was downloaded"
}

sha256_of() {
    case $HASHER in
        sha256sum) sha256sum "$1" ;;
        shasum) shasum -a 256 "$1" ;;
        openssl) openssl dgst -sha256 -r "$1" ;;
    esac | cut -d ' ' -f 1 | tr 'A-F' 'a-f'
}

# download URL FILE: HTTPS only (see check_base_url), failing on any HTTP error.
download() {
    if command -v curl >/dev/null 2>&1; then
        curl --proto "$PROTO" --proto-redir "$PROTO" --tlsv1.2 --fail --silent --show-error \
            --location --retry 2 --output "$2" "$1" || die "cannot download $1"
    elif command -v wget >/dev/null 2>&1; then
        if [ "$PROTO" = '=https' ]; then
            wget --quiet --https-only --secure-protocol=TLSv1_2 --output-document="$2" "$1" ||
                die "cannot download $1"
        else
            wget --quiet --output-document="$2" "$1" || die "cannot download $1"
        fi
    else
        die "neither curl nor wget is installed: install one and rerun"
    fi
}

# The hash SHA256SUMS lists for NAME (empty when it lists none).
sums_hash() {
    awk -v n="$1" '$2 == n || $2 == "*" n { print tolower($1); exit }' "$TMP/SHA256SUMS"
}

# check_hash FILE EXPECTED: stops unless FILE's SHA-256 is EXPECTED.
check_hash() {
    got=$(sha256_of "$1")
    case $got in
        '' | *[!0-9a-f]*) die "could not compute the SHA-256 of ${1##*/} with $HASHER; nothing was installed" ;;
    esac
    [ "$got" = "$2" ] || die "${1##*/} has SHA-256 $got but the signed SHA256SUMS says $2: the download is corrupt or was tampered with; nothing was installed"
}

b64decode() {
    if command -v base64 >/dev/null 2>&1; then
        base64 -d
    else
        openssl base64 -d -A
    fi
}

hex_of() {
    od -An -v -tx1 | tr -d ' \n'
}

# Verifies the minisign signature with OpenSSL 3 (Ed25519 over BLAKE2b-512 of the file, then
# over the signature and the trusted comment), the way minisign does.
verify_with_openssl() {
    d=$TMP/openssl
    mkdir "$d"
    sig=$TMP/SHA256SUMS.minisig
    printf '%s' "$METRALE_RELEASE_PUBKEY" | b64decode >"$d/pk" 2>/dev/null || die "the release key in this script is damaged"
    sed -n 2p "$sig" | b64decode >"$d/sig" 2>/dev/null || die "SHA256SUMS.minisig is not a minisign signature"
    sed -n 4p "$sig" | b64decode >"$d/global" 2>/dev/null || die "SHA256SUMS.minisig is not a minisign signature"
    comment=$(sed -n 3p "$sig")
    case $comment in
        'trusted comment: '*) printf '%s' "${comment#trusted comment: }" >"$d/comment" ;;
        *) die "SHA256SUMS.minisig has no trusted comment: it is not a minisign signature" ;;
    esac
    [ "$(wc -c <"$d/pk" | tr -d ' ')" = 42 ] || die "the release key in this script is damaged"
    if [ "$(wc -c <"$d/sig" | tr -d ' ')" != 74 ] || [ "$(wc -c <"$d/global" | tr -d ' ')" != 64 ]; then
        die "SHA256SUMS.minisig is malformed"
    fi
    [ "$(dd if="$d/sig" bs=1 count=2 2>/dev/null)" = ED ] ||
        die "SHA256SUMS.minisig is not a pre-hashed (ED) minisign signature; legacy signatures are refused"
    key_id=$(dd if="$d/pk" bs=1 skip=2 count=8 2>/dev/null | hex_of)
    sig_id=$(dd if="$d/sig" bs=1 skip=2 count=8 2>/dev/null | hex_of)
    [ "$key_id" = "$sig_id" ] || die "SHA256SUMS was signed by key $sig_id, not by the release key $key_id; nothing was installed"
    # An Ed25519 SubjectPublicKeyInfo: its fixed DER prefix, then the 32 key bytes.
    printf '\060\052\060\005\006\003\053\145\160\003\041\000' >"$d/pk.der"
    dd if="$d/pk" bs=1 skip=10 count=32 2>/dev/null >>"$d/pk.der"
    dd if="$d/sig" bs=1 skip=10 count=64 2>/dev/null >"$d/ed"
    openssl dgst -blake2b512 -binary "$TMP/SHA256SUMS" >"$d/hash"
    openssl pkeyutl -verify -pubin -keyform DER -inkey "$d/pk.der" -rawin -in "$d/hash" \
        -sigfile "$d/ed" >/dev/null 2>&1 ||
        die "SHA256SUMS does not match its signature by the release key: it was changed after signing, or the signature is not for it; nothing was installed"
    cat "$d/ed" "$d/comment" >"$d/signed-comment"
    openssl pkeyutl -verify -pubin -keyform DER -inkey "$d/pk.der" -rawin -in "$d/signed-comment" \
        -sigfile "$d/global" >/dev/null 2>&1 ||
        die "the trusted comment of SHA256SUMS.minisig was changed after signing; nothing was installed"
}

# Verifies with the release's own metralectl: used only when neither minisign nor OpenSSL 3 is
# here, and only after the binary's hash matched its line in SHA256SUMS. docs/install.md says
# what this does and does not protect against.
verify_with_metralectl() {
    name=metralectl-$TARGET
    expected=$(sums_hash "$name")
    [ -n "$expected" ] || die "no minisign or OpenSSL 3 here, and this release has no $name to check its signature with: install minisign (https://jedisct1.github.io/minisign/) or OpenSSL 3 and rerun"
    download "$URL/$name" "$TMP/$name"
    check_hash "$TMP/$name" "$expected"
    chmod 755 "$TMP/$name"
    "$TMP/$name" --quiet verify "$TMP/SHA256SUMS" --sig "$TMP/SHA256SUMS.minisig" \
        --pubkey "$TMP/release.pub" >/dev/null ||
        die "SHA256SUMS does not carry a valid signature by the release key (see the message above); nothing was installed"
}

# Verifies SHA256SUMS against the release key, with the best tool available, and sets
# RELEASE_VERSION from the signed trusted comment.
verify_sums() {
    printf 'untrusted comment: Metrale release key\n%s\n' "$METRALE_RELEASE_PUBKEY" >"$TMP/release.pub"
    if command -v minisign >/dev/null 2>&1; then
        say "checking the signature with minisign"
        if ! said=$(minisign -V -p "$TMP/release.pub" -m "$TMP/SHA256SUMS" -x "$TMP/SHA256SUMS.minisig" 2>&1); then
            case $said in
                *'key id'*) die "SHA256SUMS was signed by another key, not by the release key (minisign: $(printf '%s' "$said" | tr '\n' ' ')); nothing was installed" ;;
                *) die "SHA256SUMS does not match its signature by the release key (minisign: $(printf '%s' "$said" | tr '\n' ' ')): it was changed after signing; nothing was installed" ;;
            esac
        fi
    elif command -v openssl >/dev/null 2>&1 && openssl version 2>/dev/null | grep -q '^OpenSSL [3-9]'; then
        say "checking the signature with OpenSSL"
        verify_with_openssl
    else
        say "checking the signature with the release's metralectl (no minisign or OpenSSL 3 here)"
        verify_with_metralectl
    fi
    comment=$(sed -n 's/^trusted comment: //p' "$TMP/SHA256SUMS.minisig")
    case $comment in
        'metrale release '?*) RELEASE_VERSION=${comment#metrale release } ;;
        *) die "the signed SHA256SUMS does not name a release (trusted comment '$comment'); nothing was installed" ;;
    esac
    if [ -n "$VERSION" ] && [ "$RELEASE_VERSION" != "$VERSION" ]; then
        die "asked for $VERSION but $URL holds a release signed as $RELEASE_VERSION; nothing was installed"
    fi
}

receipt_path() {
    printf '%s/metrale/install-receipt' "${XDG_DATA_HOME:-$HOME/.local/share}"
}

# The shell profiles that get the PATH line: ~/.profile always, ~/.bashrc and ~/.zshrc if present.
profiles() {
    printf '%s\n' "$HOME/.profile"
    for f in "$HOME/.bashrc" "$HOME/.zshrc"; do
        [ -f "$f" ] && printf '%s\n' "$f"
    done
    return 0
}

# Adds the PATH line to each profile that lacks it (unless the directory is on PATH already, or
# --no-modify-path); records every profile holding the line, and those it created.
add_path_line() {
    PROFILES_FILE=$TMP/profiles
    : >"$PROFILES_FILE"
    : >"$TMP/created"
    old_receipt=$(receipt_path)
    if [ -f "$old_receipt" ]; then
        sed -n 's/^created=//p' "$old_receipt" >"$TMP/created"
    fi
    want=$MODIFY_PATH
    case ":${PATH}:" in
        *":$INSTALL_DIR:"*) want=0 ;;
    esac
    profiles | while IFS= read -r profile; do
        if [ -f "$profile" ] && grep -qxF "$PATH_LINE" "$profile"; then
            printf '%s\n' "$profile" >>"$PROFILES_FILE"
            continue
        fi
        [ "$want" = 1 ] || continue
        if [ ! -e "$profile" ]; then
            printf '%s\n' "$profile" >>"$TMP/created"
        elif [ -s "$profile" ] && [ "$(tail -c 1 "$profile" | od -An -tx1 | tr -d ' ')" != 0a ]; then
            printf '\n' >>"$profile"
        fi
        printf '%s\n' "$PATH_LINE" >>"$profile"
        printf '%s\n' "$profile" >>"$PROFILES_FILE"
        say "added $INSTALL_DIR to PATH in $profile (open a new shell to use it)"
    done
}

# Prints DIR and each missing parent, deepest first: what `mkdir -p DIR` would create.
missing_dirs() {
    d=$1
    while [ -n "$d" ] && [ ! -d "$d" ]; do
        printf '%s\n' "$d"
        d=${d%/*}
    done
}

write_receipt() {
    receipt=$(receipt_path)
    missing_dirs "${receipt%/*}" >>"$TMP/dirs"
    mkdir -p "${receipt%/*}"
    {
        printf '# What the Metrale installer added; install.sh --uninstall and metralectl self uninstall remove exactly this.\n'
        printf 'version=%s\n' "$RELEASE_VERSION"
        printf 'file=%s\n' "$INSTALL_DIR/metralectl" "$INSTALL_DIR/met"
        sed 's/^/profile=/' "$PROFILES_FILE"
        sort -u "$TMP/created" | sed '/^$/d; s/^/created=/'
        printf 'line=%s\n' "$PATH_LINE"
        sort -u "$TMP/dirs" | sed '/^$/d; s/^/dir=/'
    } >"$receipt.tmp.$$"
    mv -f "$receipt.tmp.$$" "$receipt"
}

# Moves the unpacked binaries into place, each with one rename (atomic on one file system).
install_binaries() {
    src=$TMP/unpack/metrale-$TARGET
    for bin in metralectl met; do
        [ -f "$src/$bin" ] || die "the archive has no metrale-$TARGET/$bin: not a Metrale release; nothing was installed"
    done
    : >"$TMP/dirs"
    old_receipt=$(receipt_path)
    if [ -f "$old_receipt" ]; then
        sed -n 's/^dir=//p' "$old_receipt" >>"$TMP/dirs"
    fi
    missing_dirs "$INSTALL_DIR" >>"$TMP/dirs"
    mkdir -p "$INSTALL_DIR" || die "cannot create $INSTALL_DIR (set METRALE_INSTALL_DIR to a directory you can write)"
    for bin in metralectl met; do
        staged=$INSTALL_DIR/.$bin.metrale-tmp.$$
        STAGED="$STAGED $staged"
        cp "$src/$bin" "$staged" || die "cannot write into $INSTALL_DIR"
        chmod 755 "$staged"
        mv -f "$staged" "$INSTALL_DIR/$bin" || die "cannot move $bin into $INSTALL_DIR"
    done
}

cleanup() {
    [ -n "${TMP:-}" ] && rm -rf "$TMP"
    for f in ${STAGED:-}; do
        rm -f "$f"
    done
}

do_install() {
    detect_target
    check_base_url
    find_hasher
    need tar
    need awk
    if [ -n "$VERSION" ]; then
        URL=$BASE_URL/download/v$VERSION
    else
        URL=$BASE_URL/latest/download
    fi
    PATH_LINE="export PATH=\"$INSTALL_DIR:\$PATH\" $PATH_MARK"
    confirm "install Metrale ${VERSION:-(latest)} for $TARGET into $INSTALL_DIR?"

    TMP=$(mktemp -d "${TMPDIR:-/tmp}/metrale-install.XXXXXX") || die "cannot create a temporary directory"
    say "downloading the release list from $URL"
    download "$URL/SHA256SUMS" "$TMP/SHA256SUMS"
    download "$URL/SHA256SUMS.minisig" "$TMP/SHA256SUMS.minisig"
    verify_sums

    archive=metrale-$TARGET.tar.gz
    expected=$(sums_hash "$archive")
    [ -n "$expected" ] || die "release $RELEASE_VERSION has no build for $TARGET (it carries: $(awk '{ print $2 }' "$TMP/SHA256SUMS" | tr '\n' ' ')); build from source instead (docs/install.md)"
    say "downloading $archive ($RELEASE_VERSION)"
    download "$URL/$archive" "$TMP/$archive"
    check_hash "$TMP/$archive" "$expected"

    mkdir "$TMP/unpack"
    tar -xzf "$TMP/$archive" -C "$TMP/unpack" || die "cannot unpack $archive; nothing was installed"
    install_binaries
    add_path_line
    write_receipt
    say "installed metralectl and met $RELEASE_VERSION ($TARGET) into $INSTALL_DIR"
    case ":${PATH}:" in
        *":$INSTALL_DIR:"*) ;;
        *) [ "$MODIFY_PATH" = 1 ] || say "$INSTALL_DIR is not on your PATH: add it yourself" ;;
    esac
}

# Removes exactly what the receipt says install added.
uninstall() {
    receipt=$(receipt_path)
    [ -f "$receipt" ] || die "no install receipt at $receipt, so nothing to uninstall (installed another way? run: metralectl self uninstall)"
    confirm "remove Metrale (the files and PATH lines listed in $receipt)?"
    sed -n 's/^file=//p' "$receipt" | while IFS= read -r f; do
        case ${f##*/} in
            metralectl | met)
                if [ -e "$f" ]; then
                    rm -f "$f"
                    say "removed $f"
                fi
                ;;
        esac
    done
    line=$(sed -n 's/^line=//p' "$receipt")
    if [ -n "$line" ]; then
        sed -n 's/^profile=//p' "$receipt" | while IFS= read -r p; do
            if [ ! -f "$p" ] || ! grep -qxF "$line" "$p"; then
                continue
            fi
            cp -p "$p" "$p.metrale-tmp.$$"
            grep -vxF "$line" "$p" >"$p.metrale-tmp.$$" || true
            if grep -qxF "created=$p" "$receipt" && ! grep -q '[^[:space:]]' "$p.metrale-tmp.$$"; then
                rm -f "$p" "$p.metrale-tmp.$$"
            else
                mv -f "$p.metrale-tmp.$$" "$p"
            fi
            say "removed the PATH line from $p"
        done
    fi
    dirs=$(sed -n 's/^dir=//p' "$receipt")
    rm -f "$receipt"
    # The directories install created, deepest first, each only if now empty.
    printf '%s\n' "$dirs" | awk 'NF { print length($0) " " $0 }' | sort -rn | cut -d ' ' -f 2- |
        while IFS= read -r d; do
            rmdir "$d" 2>/dev/null || true
        done
    say "uninstalled"
}

main() {
    parse_args "$@"
    [ -n "${HOME:-}" ] || die "HOME is not set: set it (the installer keeps its receipt under it)"
    INSTALL_DIR=${METRALE_INSTALL_DIR:-$HOME/.local/bin}
    INSTALL_DIR=${INSTALL_DIR%/}
    case $INSTALL_DIR in
        /*) ;;
        *) INSTALL_DIR=$(pwd)/$INSTALL_DIR ;;
    esac
    TMP=''
    STAGED=''
    trap cleanup EXIT
    trap 'exit 1' INT TERM HUP
    if [ "$UNINSTALL" = 1 ]; then
        uninstall
    else
        do_install
    fi
}

main "$@"; }
