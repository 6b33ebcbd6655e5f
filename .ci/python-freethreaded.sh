#!/usr/bin/env bash
# Make a free-threaded (no-GIL) CPython 3.13.5 available and print the absolute
# path of its python executable as the LAST line of stdout.  Everything else
# goes to stderr.  On failure: exit non-zero; the last line on stderr is a
# one-line reason ("python-freethreaded: error: ...").
#
# Source: Debian trixie's python3.13 source package, fetched with
# `apt-get source` through a deb-src entry added in
# /etc/apt/sources.list.d/pyrometer-trixie-src.list (source indexes only: the
# machine's binary package sources and pins are left alone, so ordinary
# `apt-get install` still takes bookworm packages).  The build uses the
# unpatched upstream tarball inside the source package
# (python3.13_3.13.5.orig.tar.xz): Debian's patches disable ensurepip for a
# non-venv install (so `make install` fails) and switch sysconfig to Debian's
# /usr/local dist-packages scheme, neither of which suits a private prefix.
#
# Cache: ${PYROMETER_PYTHON_CACHE:-$HOME/.cache/pyrometer}/cpython-3.13.5t
# (keep it outside any git clone).  A finished build is reused as is (fast
# path); anything else there is removed and built again from scratch.
# Build: ./configure --disable-gil --prefix=<cache>/install; make -j$(nproc);
# make install (no PGO, no LTO: a few minutes on 2 cores).  Needs root (or
# passwordless sudo) for apt-get on the slow path only.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

# Only the final path goes to the real stdout (fd 3); all else to stderr.
exec 3>&1 1>&2

PY_VERSION=3.13.5
PY_SERIES=3.13
SRC_PACKAGE=python3.13
SRC_SUITE=trixie
SRC_LIST=/etc/apt/sources.list.d/pyrometer-trixie-src.list

log() { printf 'python-freethreaded: %s\n' "$*" >&2; }
die() { printf 'python-freethreaded: error: %s\n' "$*" >&2; exit 1; }

home="${HOME:-}"
if [ -z "$home" ]; then
    home="$(getent passwd "$(id -u)" | cut -d: -f6 || true)"
fi
cache_root="${PYROMETER_PYTHON_CACHE:-}"
if [ -z "$cache_root" ]; then
    [ -n "$home" ] || die "neither PYROMETER_PYTHON_CACHE nor HOME is set"
    cache_root="$home/.cache/pyrometer"
fi
case "$cache_root" in
    /*) ;;
    *) cache_root="$PWD/$cache_root" ;;
esac
prefix_dir="$cache_root/cpython-${PY_VERSION}t"
install_dir="$prefix_dir/install"
python="$install_dir/bin/python${PY_SERIES}t"
stamp="$prefix_dir/.complete"
build_log="$prefix_dir/build.log"

# The interpreter is usable when it runs, is 3.13.5 and has the GIL disabled.
python_ok() {
    [ -x "$python" ] && "$python" -c '
import sys, sysconfig
assert sys.version_info[:3] == (3, 13, 5), sys.version
assert sysconfig.get_config_var("Py_GIL_DISABLED") == 1
assert not sys._is_gil_enabled()
' >/dev/null 2>&1
}

mkdir -p "$cache_root" || die "cannot create cache directory $cache_root"

# One build at a time per cache directory (two CI jobs on one machine).
if command -v flock >/dev/null 2>&1; then
    exec 9>"$cache_root/.cpython-${PY_VERSION}t.lock" \
        || die "cannot open lock file in $cache_root"
    if ! flock -n 9; then
        log "waiting for another build in $cache_root ..."
        flock -w 3600 9 || die "timed out waiting for the lock on $cache_root"
    fi
fi

# ---- fast path -------------------------------------------------------------
if [ -f "$stamp" ] && python_ok; then
    printf '%s\n' "$python" >&3
    exit 0
fi

# ---- slow path: build from scratch -----------------------------------------
if git -C "$cache_root" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    log "warning: cache $cache_root is inside a git work tree; set PYROMETER_PYTHON_CACHE elsewhere"
fi

step=""
on_error() {
    local rc=$?
    trap - ERR
    if [ -f "$build_log" ]; then
        log "last lines of $build_log:"
        tail -n 15 "$build_log" >&2 || true
    fi
    die "free-threaded CPython $PY_VERSION build failed while ${step:-starting} (exit $rc; log: $build_log)"
}
trap on_error ERR

start=$SECONDS
log "no usable free-threaded CPython $PY_VERSION in $prefix_dir; building it (a few minutes)"

case "$prefix_dir" in
    */cpython-"${PY_VERSION}"t) rm -rf -- "$prefix_dir" ;;
    *) die "refusing to remove unexpected path $prefix_dir" ;;
esac
mkdir -p "$prefix_dir/src"
: >"$build_log"

SUDO=()
if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        SUDO=(sudo -n)
    else
        die "not root and no passwordless sudo: cannot apt-get the build dependencies and the $SRC_SUITE source"
    fi
fi
command -v apt-get >/dev/null 2>&1 || die "apt-get not found (this script wants a Debian machine)"

# The mirror the machine already uses for Debian's main archive (not security).
debian_mirror() {
    local f
    {
        for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
            [ -f "$f" ] || continue
            # deb [opts] URI suite components...
            sed -E -n 's/^[[:space:]]*deb[[:space:]]+(\[[^]]*\][[:space:]]+)?([^[:space:]]+)[[:space:]]+([^[:space:]]+).*/\2 \3/p' "$f"
        done
        for f in /etc/apt/sources.list.d/*.sources; do
            [ -f "$f" ] || continue
            # deb822 stanzas: print "URI suite" pairs of enabled stanzas.
            awk '
                function flush(   i, j, nu, ns, us, ss) {
                    if (enabled && uris != "" && suites != "") {
                        nu = split(uris, us, " "); ns = split(suites, ss, " ")
                        for (i = 1; i <= nu; i++) for (j = 1; j <= ns; j++) print us[i], ss[j]
                    }
                    uris = ""; suites = ""; enabled = 1
                }
                BEGIN { enabled = 1 }
                /^[[:space:]]*$/ { flush(); next }
                /^#/ { next }
                tolower($1) == "uris:" { $1 = ""; uris = $0 }
                tolower($1) == "suites:" { $1 = ""; suites = $0 }
                tolower($1) == "enabled:" { enabled = (tolower($2) != "no") }
                END { flush() }
            ' "$f"
        done
    } | awk '$1 ~ /^(https?|file|mirror[+a-z]*):/ && $2 !~ /security/ && $2 ~ /^(bookworm|bullseye|trixie|stable|oldstable|testing|unstable|sid)(-updates|-backports)?$/ { print $1; exit }'
}

step="finding the Debian mirror"
mirror="$(debian_mirror || true)"
mirror="${mirror%/}"
if [ -z "$mirror" ]; then
    mirror="http://deb.debian.org/debian"
    log "no Debian mirror found in /etc/apt/sources.list*; using $mirror"
fi
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
opts=""
[ -f "$keyring" ] && opts="[signed-by=$keyring] "
src_line="deb-src ${opts}${mirror} ${SRC_SUITE} main"

step="writing $SRC_LIST"
if [ "$(cat "$SRC_LIST" 2>/dev/null || true)" != "$src_line" ]; then
    log "adding '$src_line' to $SRC_LIST"
    printf '%s\n' "$src_line" | "${SUDO[@]}" tee "$SRC_LIST" >/dev/null
fi

apt_opts=(-qq -o DPkg::Lock::Timeout=600 -o APT::Get::Assume-Yes=true)

step="running apt-get update"
log "apt-get update"
"${SUDO[@]}" apt-get "${apt_opts[@]}" update >>"$build_log" 2>&1

# What a working `python3.13t -m pip` and `venv` need (ssl, zlib, ctypes), plus
# cheap extras (bz2, lzma, sqlite3, uuid, readline/curses).
packages=(dpkg-dev build-essential pkg-config xz-utils libffi-dev zlib1g-dev
          libssl-dev libbz2-dev liblzma-dev libsqlite3-dev uuid-dev
          libreadline-dev libncurses-dev)
missing=()
for p in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$p")
    fi
done
if [ "${#missing[@]}" -gt 0 ]; then
    step="installing build dependencies (${missing[*]})"
    log "apt-get install ${missing[*]}"
    "${SUDO[@]}" apt-get "${apt_opts[@]}" install --no-install-recommends "${missing[@]}" >>"$build_log" 2>&1
fi

# The newest trixie revision of the 3.13.5 upstream release (3.13.5-N[+deb13uM]).
step="looking up $SRC_PACKAGE $PY_VERSION in $SRC_SUITE's sources"
version=""
for v in $(apt-cache showsrc "$SRC_PACKAGE" 2>/dev/null | sed -n 's/^Version: //p'); do
    case "$v" in
        "$PY_VERSION"-*)
            if [ -z "$version" ] || dpkg --compare-versions "$v" gt "$version"; then
                version="$v"
            fi
            ;;
    esac
done
[ -n "$version" ] || die "no $SRC_PACKAGE $PY_VERSION-* source package found in $SRC_SUITE (deb-src $mirror)"

step="downloading $SRC_PACKAGE=$version with apt-get source"
log "apt-get source $SRC_PACKAGE=$version"
(cd "$prefix_dir/src" && apt-get -qq source --download-only "$SRC_PACKAGE=$version") >>"$build_log" 2>&1
orig="$prefix_dir/src/${SRC_PACKAGE}_${PY_VERSION}.orig.tar.xz"
[ -f "$orig" ] || die "apt-get source did not bring $(basename "$orig")"

step="unpacking $(basename "$orig")"
tar -C "$prefix_dir/src" -xf "$orig"
srcdir="$prefix_dir/src/Python-$PY_VERSION"
grep -q "PY_VERSION[[:space:]]*\"$PY_VERSION\"" "$srcdir/Include/patchlevel.h" \
    || die "$(basename "$orig") does not hold CPython $PY_VERSION"

# Keep the caller's Python/pip settings out of the build and of ensurepip.
for v in $(compgen -e); do
    case "$v" in PYTHON*|PIP_*|VIRTUAL_ENV|CONDA_PREFIX) unset "$v" ;; esac
done
export PIP_CONFIG_FILE=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1

jobs="$(nproc 2>/dev/null || echo 2)"
cd "$srcdir"
step="running ./configure"
log "configure --disable-gil --prefix=$install_dir"
./configure --disable-gil --prefix="$install_dir" >>"$build_log" 2>&1
step="running make -j$jobs"
log "make -j$jobs"
make -j"$jobs" >>"$build_log" 2>&1
step="running make install"
log "make install"
make install >>"$build_log" 2>&1
cd "$prefix_dir"

step="checking the installed interpreter"
python_ok || die "$python does not run as a free-threaded $PY_VERSION"
"$python" -c 'import ssl, zlib, ctypes, venv, ensurepip' >>"$build_log" 2>&1 \
    || die "$python lacks ssl/zlib/ctypes/venv (see $build_log)"
"$python" -m pip --version >>"$build_log" 2>&1 \
    || die "$python -m pip does not work (see $build_log)"
tmp_venv="$(mktemp -d)"
"$python" -m venv --without-pip "$tmp_venv/v" >>"$build_log" 2>&1 \
    && "$tmp_venv/v/bin/python" -c 'import sys; assert sys.prefix != sys.base_prefix' >>"$build_log" 2>&1 \
    || { rm -rf -- "$tmp_venv"; die "$python -m venv does not work (see $build_log)"; }
rm -rf -- "$tmp_venv"

rm -rf -- "$prefix_dir/src"   # ~0.5 GB of build tree; the log stays
trap - ERR
date -u +%Y-%m-%dT%H:%M:%SZ >"$stamp"
log "built $("$python" -VV | head -n 1) in $((SECONDS - start))s"
printf '%s\n' "$python" >&3
