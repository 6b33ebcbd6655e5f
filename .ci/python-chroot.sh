#!/usr/bin/env bash
# CPython 3.14 and 3.15 for the test suite, from Debian's sid suite, which
# serves them as binary packages (python3.X-dev with all of internal/, and
# python3.X-venv) built for a newer glibc than this machine's: they run in a
# chroot made with debootstrap (about 45-90 s, 860 MB), cached outside the clone.
#
#   python-chroot.sh prepare          make (or reuse) the chroot; print its root
#                                     as the LAST line of stdout
#   python-chroot.sh mount ROOT DIR   mount /proc and /dev in it, and DIR (the
#                                     clone) at the same path, so that paths
#                                     inside and outside agree
#   python-chroot.sh umount ROOT      undo every mount under ROOT
#
# The host's apt configuration is not touched (debootstrap fetches the suite
# itself).  On failure: exit non-zero, the last line on stderr says why
# ("python-chroot: error: ...").  Needs root (chroot, mount).
#
# Cache: ${PYROMETER_PYTHON_CACHE:-$HOME/.cache/pyrometer}/debian-sid; a tree
# without its .complete stamp, or whose interpreters do not run, is removed
# (after unmounting whatever is mounted in it) and made again.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
exec 3>&1 1>&2

SUITE=sid
PYTHONS=(3.14 3.15)
# What the suite needs inside: the interpreters with headers and venv; a C
# compiler and make (pyrometer, the suite's test extensions, the C unit tests);
# tmux (the live view's tests); valgrind (the C unit tests); procps; git (the
# C unit tests' list of known bugs).  Not
# chromium or go (about 400 MB more): the web report's browser tests and the
# pprof read-back run in the host's suites, on the same report code.
# Those debootstrap must find (it fails on any name the suite does not have).
PACKAGES="python3.14-dev,python3.15-dev,python3.14-venv,python3.15-venv,gcc,libc6-dev,make,tmux,valgrind,procps,git"
# The commands (or, starting with /, files) the suite uses, and the packages
# that give them, installed with apt-get inside once the chroot is made, and
# into a cached chroot made before one was added.  Where a package was renamed
# (sid's 64-bit time_t transition renamed libtcmalloc-minimal4 to
# libtcmalloc-minimal4t64 in 2026, and debootstrap then failed), the names
# are alternatives, A|B: the first the suite has is installed.  jemalloc and
# tcmalloc: the allocators of tests/end_to_end/test_native_libraries.py, which
# skips, saying why, where one is missing.  The testsuites: CPython's own tests
# (tests/regrtest_corpus.py; Debian's python3.1x has only libregrtest).
COMMANDS="gcc:gcc make:make tmux:tmux valgrind:valgrind ps:procps git:git
/usr/lib/x86_64-linux-gnu/libjemalloc.so.2:libjemalloc2
/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4:libtcmalloc-minimal4t64|libtcmalloc-minimal4
/usr/lib/python3.14/test/test_signal.py:libpython3.14-testsuite
/usr/lib/python3.15/test/test_signal.py:libpython3.15-testsuite"

log() { printf 'python-chroot: %s\n' "$*" >&2; }
die() { printf 'python-chroot: error: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "not root: chroot and mount need root"

# The mount points under a folder, deepest first (/proc/self/mounts writes a
# space as \040).
mounts_under() {
    awk -v r="$1/" '{ gsub(/\\040/, " ", $2) } index($2, r) == 1 { print $2 }' /proc/self/mounts | sort -r
}

umount_all() {
    local root="$1" m
    # Lazily, so that a process still inside does not block it.
    while IFS= read -r m; do
        [ -n "$m" ] && { umount -l "$m" 2>/dev/null || true; }
    done < <(mounts_under "$root")
}

cmd="${1:-}"
case "$cmd" in
    mount)
        root="${2:?root}"; dir="${3:?directory}"
        [ -x "$root/usr/bin/python3.14" ] || die "$root is not a prepared chroot"
        mountpoint -q "$root/proc" || mount -t proc proc "$root/proc"
        if ! mountpoint -q "$root/dev"; then
            mount --rbind /dev "$root/dev"
            # Never shared back: an unmount inside must not reach the host's /dev.
            mount --make-rslave "$root/dev" || { umount -l "$root/dev"; die "cannot make $root/dev a slave mount"; }
        fi
        mkdir -p "$root$dir"
        mountpoint -q "$root$dir" || mount --bind "$dir" "$root$dir"
        # pip inside needs names and the host's certificate bundle (a link in
        # the chroot is replaced, not followed onto a host file).
        cp --remove-destination /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
        if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
            mkdir -p "$root/etc/ssl/certs"
            cp --remove-destination /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"
        fi
        exit 0
        ;;
    umount)
        umount_all "${2:?root}"
        exit 0
        ;;
    prepare) ;;
    *) die "usage: python-chroot.sh prepare | mount ROOT DIR | umount ROOT" ;;
esac

home="${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6 || true)}"
cache_root="${PYROMETER_PYTHON_CACHE:-${home:?}/.cache/pyrometer}"
case "$cache_root" in /*) ;; *) cache_root="$PWD/$cache_root" ;; esac
root="$cache_root/debian-$SUITE"
stamp="$root/.complete"
mkdir -p "$cache_root"

exec 9>"$cache_root/.debian-$SUITE.lock"
flock -w 3600 9 || die "timed out waiting for the lock on $cache_root"

usable() {
    [ -f "$stamp" ] || return 1
    local v
    for v in "${PYTHONS[@]}"; do
        chroot "$root" "python$v" -c 'import ensurepip, sysconfig, os; assert os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))' \
            >/dev/null 2>&1 || return 1
    done
}

# Installs, in the chroot at $root, what COMMANDS names and it lacks; a
# warning, not a failure, where apt-get cannot.
install_missing() {
    local pair what names name missing=() apt_opts
    # The mirror may serve a frozen snapshot whose Release file is past its
    # Valid-Until date (debootstrap does not check it; apt-get does).
    apt_opts=(-qq -o Acquire::Check-Valid-Until=false)
    for pair in $COMMANDS; do
        what="${pair%%:*}"
        case "$what" in
            /*) [ -e "$root$what" ] && continue ;;
            *) chroot "$root" sh -c "command -v $what" >/dev/null 2>&1 && continue ;;
        esac
        missing+=("${pair#*:}")
    done
    [ "${#missing[@]}" -gt 0 ] || return 0
    cp --remove-destination /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
    chroot "$root" apt-get "${apt_opts[@]}" update >>"$cache_root/debootstrap.log" 2>&1 \
        || { log "warning: apt-get update failed in the chroot; not installed: ${missing[*]}"; return 0; }
    for names in "${missing[@]}"; do
        for name in ${names//|/ }; do
            chroot "$root" apt-cache show "$name" >/dev/null 2>&1 || continue
            log "apt-get install $name in the chroot"
            chroot "$root" apt-get "${apt_opts[@]}" install -y "$name" >>"$cache_root/debootstrap.log" 2>&1 \
                || log "warning: could not install $name in the chroot"
            continue 2
        done
        log "warning: $SUITE has none of $names; the tests that need it skip"
    done
}

if usable; then
    install_missing
    printf '%s\n' "$root" >&3
    exit 0
fi

log "no usable Debian $SUITE chroot in $root; making it (about a minute)"
start=$SECONDS
for dir in "$root" "$root.tmp"; do
    if [ -e "$dir" ]; then
        umount_all "$dir"
        # Never while anything is mounted inside: a bound /dev would lose the
        # host's nodes, a bound clone its files (--one-file-system does not
        # stop at a bind mount of the same disk).
        if [ -n "$(mounts_under "$dir")" ]; then
            die "cannot unmount everything under $dir (still mounted: $(mounts_under "$dir" | tr '\n' ' ')); not removing it"
        fi
        rm -rf --one-file-system -- "$dir"
    fi
done
if ! command -v debootstrap >/dev/null 2>&1; then
    log "apt-get install debootstrap"
    { apt-get -qq update && apt-get -qq install -y debootstrap; } >/dev/null 2>&1 \
        || die "cannot install debootstrap"
fi
mirror="${PYROMETER_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
log "debootstrap --variant=minbase $SUITE ($mirror)"
if ! debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$root.tmp" "$mirror" \
        >"$cache_root/debootstrap.log" 2>&1; then
    tail -n 15 "$cache_root/debootstrap.log" >&2 || true
    umount_all "$root.tmp"
    die "debootstrap of $SUITE failed (log: $cache_root/debootstrap.log)"
fi
mv "$root.tmp" "$root"
touch "$stamp"
usable || die "the chroot was made but python${PYTHONS[*]} do not run in it"
install_missing
log "made in $((SECONDS - start)) s: $(chroot "$root" python3.14 -V), $(chroot "$root" python3.15 -V)"
printf '%s\n' "$root" >&3
