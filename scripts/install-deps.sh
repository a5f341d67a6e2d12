#!/usr/bin/env bash
# Install everything the build and the tests need, on Debian 12 as root.
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

# Why each package is here:
#   dpdk            dpdk-testpmd: virtio-user frontend for the interop tests and
#                   the DPDK vhost PMD reference backend (dpdk-dev is not
#                   needed: nothing here compiles against DPDK)
#   qemu-system-x86 QEMU guests (TCG) with the Linux virtio-net driver
#   busybox-static  the guest initramfs userland
#   cpio            packs the initramfs
#   xz-utils zstd   decompress kernel modules (.ko.xz / .ko.zst) at build time
#   iproute2        ip(8) for TAP ports and network namespaces
#   python3-venv    the lab venv when the system python is used
#   ca-certificates apt and pip over TLS
#   openvswitch-switch-dpdk  OVS-DPDK, the B6 anchor of `vadapt bench`
#   fonts-dejavu-core        text in the PNG plots (drawn without text if absent)
DEB_PACKAGES=(
    dpdk qemu-system-x86 busybox-static cpio xz-utils zstd
    iproute2 python3-venv ca-certificates
    openvswitch-switch-dpdk fonts-dejavu-core
)

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

# Rust: make rustup resolve rust-toolchain.toml now.
if command -v cargo >/dev/null 2>&1; then
    log "rust: $(cargo --version) ($(rustup show active-toolchain 2>/dev/null | head -n1 | cut -d' ' -f1))"
else
    log "error: cargo not found; install rustup (https://rustup.rs) first" >&2
    exit 1
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
    log "pip install -e lab[dev] (pandas, matplotlib, scikit-learn, pytest, ruff)"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e "lab[dev]"
    echo "$want" >"$STAMP"
    log "lab venv: installed"
fi

log "done"
