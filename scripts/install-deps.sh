#!/usr/bin/env bash
# Install everything the build and the tests need, on Debian 12 as root.
#
#   scripts/install-deps.sh           install, then prove it (as --check does)
#   scripts/install-deps.sh --check   only prove it: each program the tests and
#                                     benchmarks start, the package owning it
#                                     (dpkg -S), fail if that package is not
#                                     in this script's list
#
# Idempotent and non-interactive: each Debian package is checked with
# `dpkg -s` first, `apt-get update` runs at most once and only when something
# is missing, and the lab's Python venv (.venv) is reinstalled only when
# lab/pyproject.toml changed since the last install. Prints what it did.
#
# The Rust toolchain is pinned by rust-toolchain.toml; rustup installs it (and
# its components) on the first cargo call, which this script triggers so the
# download shows up here rather than in the middle of the build.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

log() { printf '[install-deps] %s\n' "$*"; }

# Why each package is here. Each package is named for a program it provides
# (PROGRAMS below), found with `dpkg -S` on this Debian 12, not assumed:
#   dpdk-dev        /usr/bin/dpdk-testpmd: the virtio-user frontend of the interop
#                   tests and the DPDK vhost PMD reference backend (the `dpdk`
#                   package has only the libraries and a few tools, no testpmd)
#   qemu-system-x86 qemu-system-x86_64: QEMU guests (TCG) with Linux's virtio-net
#   openvswitch-switch-dpdk  /usr/lib/openvswitch-switch-dpdk/ovs-vswitchd-dpdk,
#                   the DPDK build of ovs-vswitchd: the B6 anchor of `vadapt bench`
#   openvswitch-common  ovsdb-server, ovsdb-tool, ovs-ofctl (OVS's database
#                   and OpenFlow flows, for B6)
#   openvswitch-switch  ovs-vsctl (B6 bridge and port configuration)
#   prometheus      promtool: checks the daemon's /metrics text in the tests
#   busybox-static  /bin/busybox: the guest initramfs userland
#   cpio            packs the initramfs
#   xz-utils zstd   decompress kernel modules (.ko.xz / .ko.zst) at build time
#   dpkg            dpkg-deb: unpacks the downloaded guest kernel package
#   apt             apt-get download: fetches the guest kernel package
#   iproute2        ip(8) for TAP ports and network namespaces
#   util-linux      taskset: pins test processes to a CPU
#   git             the revision recorded in every benchmark result
#   python3-venv    the lab venv when the system python is used
#   ca-certificates apt and pip over TLS
#   fonts-dejavu-core        text in the PNG plots (drawn without text if absent)
#   libvirt-daemon-system    the system libvirt the libvirt interop test runs:
#                   the libvirt-qemu user and group, /etc/libvirt/qemu.conf
#   libvirt-daemon  /usr/sbin/libvirtd, /usr/sbin/virtlogd (started by the test
#                   when no service manager runs them)
#   libvirt-clients virsh
#   systemd         systemd-analyze: `verify` of the packaged unit
#   man-db          man: systemd-analyze verify checks the unit's Documentation=
#   ethtool         ethtool: the uplink tests turn off a veth's TX checksum offload
#                   (veth hands XDP frames with the partial checksum its sender left)
#   tcpdump         tcpdump: reads `vadapt capture -w -` from a pipe (test_capture.py)
#   libxdp1         libxdp.so.1 (and its default AF_XDP program): loaded at run
#                   time by an uplink port (`--uplink`); the build never needs it
DEB_PACKAGES=(
    dpdk-dev qemu-system-x86 openvswitch-switch-dpdk openvswitch-switch
    openvswitch-common prometheus busybox-static cpio xz-utils zstd dpkg apt
    iproute2 util-linux git python3-venv ca-certificates fonts-dejavu-core
    libvirt-daemon-system libvirt-daemon libvirt-clients systemd man-db libxdp1
    ethtool tcpdump
)

# Every external program the tests and benchmarks start, and the package in
# DEB_PACKAGES that provides it. A name without a slash is looked up on PATH.
PROGRAMS=(
    dpdk-testpmd=dpdk-dev
    qemu-system-x86_64=qemu-system-x86
    /usr/lib/openvswitch-switch-dpdk/ovs-vswitchd-dpdk=openvswitch-switch-dpdk
    ovsdb-server=openvswitch-common
    ovsdb-tool=openvswitch-common
    ovs-vsctl=openvswitch-switch
    ovs-ofctl=openvswitch-common
    promtool=prometheus
    /bin/busybox=busybox-static
    cpio=cpio
    xz=xz-utils
    zstd=zstd
    dpkg-deb=dpkg
    apt-get=apt
    ip=iproute2
    taskset=util-linux
    git=git
    /usr/sbin/libvirtd=libvirt-daemon
    /usr/sbin/virtlogd=libvirt-daemon
    virsh=libvirt-clients
    systemd-analyze=systemd
    man=man-db
    ethtool=ethtool
    tcpdump=tcpdump
)

# cargo-deb builds the Debian package (scripts/package.sh); pinned, from
# crates.io through `cargo install`.
CARGO_DEB_VERSION=3.8.0

# Where a program is: its resolved path, or nothing.
program_path() {
    local prog="$1" p
    if [[ "$prog" == */* ]]; then
        [[ -x "$prog" ]] && readlink -f "$prog"
    else
        p="$(command -v "$prog" 2>/dev/null)" && readlink -f "$p"
    fi
}

# The Debian package that owns a file (dpkg -S), or nothing.
owner_of() {
    # /bin is a symlink to /usr/bin on Debian 12: dpkg knows the path the
    # package shipped, so try both spellings.
    local f="$1" o cand
    for cand in "$f" "${f#/usr}"; do
        o="$(dpkg -S "$cand" 2>/dev/null | head -n1 | cut -d: -f1)"
        [[ -n "$o" ]] && { echo "$o"; return; }
    done
}

in_list() {
    local x="$1" p
    for p in "${DEB_PACKAGES[@]}"; do [[ "$p" == "$x" ]] && return 0; done
    return 1
}

# --check: for each program, print the package that owns it (dpkg -S) and
# fail when a program is missing, or when the package that owns it is not one
# this script installs, or not the one PROGRAMS names. A package installed
# here by hand cannot hide a missing install step this way: the owner must be
# in DEB_PACKAGES, whatever the machine has.
check_programs() {
    local bad=0 entry prog want path owner
    for entry in "${PROGRAMS[@]}"; do
        prog="${entry%=*}" want="${entry##*=}"
        if ! in_list "$want"; then
            log "check: $prog: package $want is named in PROGRAMS but not in DEB_PACKAGES"
            bad=1
            continue
        fi
        path="$(program_path "$prog" || true)"
        if [[ -z "$path" ]]; then
            log "check: missing program $prog: package $want should have provided it"
            bad=1
            continue
        fi
        owner="$(owner_of "$path")"
        if [[ -z "$owner" ]]; then
            log "check: $prog ($path) belongs to no Debian package: installed by hand, not by this script"
            bad=1
        elif ! in_list "$owner"; then
            log "check: $prog ($path) comes from package $owner, which this script does not install"
            bad=1
        elif [[ "$owner" != "$want" ]]; then
            log "check: $prog ($path) comes from package $owner, but PROGRAMS says $want: correct the table"
            bad=1
        else
            printf '[install-deps] check: %-20s %-55s %s\n' "$prog" "$path" "$owner"
        fi
    done
    return "$bad"
}

if [[ "${1:-}" == "--check" ]]; then
    check_programs || { log "check FAILED"; exit 1; }
    log "check: all ${#PROGRAMS[@]} programs present, each from a listed package"
    exit 0
elif [[ $# -gt 0 ]]; then
    log "usage: $0 [--check]" >&2
    exit 2
fi

if [[ $(id -u) -ne 0 ]]; then
    log "error: must run as root (apt-get install)" >&2
    exit 1
fi

missing=()
for p in "${DEB_PACKAGES[@]}"; do
    if ! dpkg -s "$p" 2>/dev/null | grep -q '^Status: install ok installed'; then
        missing+=("$p")
    fi
done
if ((${#missing[@]})); then
    log "apt-get update (missing: ${missing[*]})"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    log "apt-get install ${missing[*]}"
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
    log "debian packages: all ${#DEB_PACKAGES[@]} present"
fi

# Prove the install: every program the suite starts is there, from a listed package.
check_programs || { log "error: the install did not provide every program (see above)" >&2; exit 1; }

# Rust: make rustup resolve rust-toolchain.toml now.
if command -v cargo >/dev/null 2>&1; then
    log "rust: $(cargo --version) ($(rustup show active-toolchain 2>/dev/null | head -n1 | cut -d' ' -f1))"
else
    log "error: cargo not found; install rustup (https://rustup.rs) first" >&2
    exit 1
fi

# cargo-deb, for the package step.
if [[ "$(cargo deb --version 2>/dev/null)" == *"$CARGO_DEB_VERSION"* ]]; then
    log "cargo-deb: $CARGO_DEB_VERSION present"
else
    log "cargo install cargo-deb $CARGO_DEB_VERSION (about 2 minutes on 2 cores)"
    cargo install --quiet --locked cargo-deb --version "$CARGO_DEB_VERSION"
fi

# Python lab venv. Prefer the python3 on PATH; it must have the venv module.
PY="${PYTHON:-python3}"
VENV="$ROOT/.venv"
STAMP="$VENV/.vadapt-lab-stamp"
want="$(cat lab/pyproject.toml | sha256sum | cut -d' ' -f1) $($PY -c 'import sys; print(sys.version.split()[0])')"
if [[ -x "$VENV/bin/python" && -f "$STAMP" && "$(cat "$STAMP")" == "$want" ]]; then
    log "lab venv: up to date ($VENV)"
else
    if [[ ! -x "$VENV/bin/python" ]]; then
        log "creating venv $VENV with $($PY --version)"
        "$PY" -m venv "$VENV"
    fi
    log "pip install -e lab[dev] (pandas, matplotlib, scikit-learn, pytest, ruff, scapy)"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e "lab[dev]"
    echo "$want" >"$STAMP"
    log "lab venv: installed"
fi

log "done"
