#!/usr/bin/env bash
# Build (or reuse) the test guest: a Debian 12 kernel plus a busybox-static
# initramfs with the virtio-net modules and the role scripts of
# tests/interop/guest/. Everything is cached under
#   ${VADAPT_CACHE:-$HOME/.cache/vadapt}/guest/
# and the script prints where the files are, as shell assignments:
#   VADAPT_GUEST_KERNEL=/.../vmlinuz-<version>
#   VADAPT_GUEST_INITRD=/.../initramfs-<hash>.cpio.gz
# (also written to guest/current.env; guest/vmlinuz and
# guest/initramfs.cpio.gz are symlinks to the same files).
#
# The kernel comes from `apt-get download linux-image-<version>-amd64`, the
# package linux-image-amd64 depends on, so nothing is installed on the host.
# The initramfs is keyed by the hash of this script, the guest files, the
# kernel version and the busybox binary: changing any of them rebuilds it.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
GUEST_SRC="$ROOT/tests/interop/guest"
CACHE="${VADAPT_CACHE:-$HOME/.cache/vadapt}/guest"
BUSYBOX=/bin/busybox
# Loaded in this order by /init (each needs the ones before it).
MODULES=(virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci
    failover net_failover virtio_net)

log() { printf '[guest-image] %s\n' "$*" >&2; }
mkdir -p "$CACHE"

# --- kernel -----------------------------------------------------------------
resolve_kernel_pkg() {
    apt-cache depends linux-image-amd64 2>/dev/null |
        awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9].*-amd64$/ { print $2; exit }'
}

pkg="$(resolve_kernel_pkg || true)"
if [[ -z "$pkg" ]]; then
    log "apt-cache does not know linux-image-amd64 yet: apt-get update"
    apt-get update -qq || log "apt-get update failed"
    pkg="$(resolve_kernel_pkg || true)"
fi
if [[ -z "$pkg" ]]; then
    # Offline with a cache: use the newest kernel already there.
    pkg="$(ls -1d "$CACHE"/kernel-linux-image-* 2>/dev/null | sort -V | tail -n1 || true)"
    pkg="${pkg##*/kernel-}"
    [[ -n "$pkg" ]] || { log "error: cannot resolve the linux-image-amd64 dependency"; exit 1; }
    log "warning: using cached $pkg"
fi
kver="${pkg#linux-image-}"
KDIR="$CACHE/kernel-$pkg"

if [[ -f "$KDIR/vmlinuz-$kver" && -f "$KDIR/.complete" ]]; then
    log "kernel: cached $KDIR"
else
    log "kernel: apt-get download $pkg"
    tmp="$(mktemp -d "$CACHE/dl.XXXXXX")"
    trap 'rm -rf "$tmp"' EXIT
    # _apt cannot write into a root-owned mktemp dir: download as root.
    (cd "$tmp" && apt-get download -q -o APT::Sandbox::User=root "$pkg" >&2)
    deb="$(ls "$tmp"/*.deb)"
    # Only the kernel image and the few modules we load are kept (the whole
    # package unpacks to ~400 MB).
    mkdir -p "$tmp/x"
    dpkg-deb --fsys-tarfile "$deb" |
        tar -x -C "$tmp/x" --wildcards "./boot/vmlinuz-$kver" \
            "./lib/modules/$kver/kernel/drivers/virtio/*" \
            "./lib/modules/$kver/kernel/drivers/net/*" \
            "./lib/modules/$kver/kernel/net/core/*"
    rm -rf "$KDIR"
    mkdir -p "$KDIR/modules"
    cp "$tmp/x/boot/vmlinuz-$kver" "$KDIR/"
    for m in "${MODULES[@]}"; do
        f="$(find "$tmp/x/lib/modules" -name "$m.ko" -o -name "$m.ko.xz" -o -name "$m.ko.zst" | head -n1)"
        [[ -n "$f" ]] || { log "error: module $m not in $pkg"; exit 1; }
        case "$f" in
        *.xz) xz -dc "$f" >"$KDIR/modules/$m.ko" ;;
        *.zst) zstd -qdc "$f" >"$KDIR/modules/$m.ko" ;;
        *) cp "$f" "$KDIR/modules/$m.ko" ;;
        esac
    done
    touch "$KDIR/.complete"
    rm -rf "$tmp"
    trap - EXIT
    log "kernel: $KDIR/vmlinuz-$kver"
fi

# --- initramfs --------------------------------------------------------------
key="$(
    {
        sha256sum "${BASH_SOURCE[0]}"
        find "$GUEST_SRC" -type f -print0 | sort -z | xargs -0 sha256sum | sed "s#$GUEST_SRC##"
        echo "$pkg"
        sha256sum "$BUSYBOX"
    } | sed 's# .*/# #' | sha256sum | cut -c1-16
)"
INITRD="$CACHE/initramfs-$key.cpio.gz"
if [[ -f "$INITRD" ]]; then
    log "initramfs: cached $INITRD"
else
    log "initramfs: building $INITRD"
    stage="$(mktemp -d "$CACHE/stage.XXXXXX")"
    trap 'rm -rf "$stage"' EXIT
    mkdir -p "$stage"/{bin,dev,proc,sys,tmp,lib/modules,roles}
    cp "$BUSYBOX" "$stage/bin/busybox"
    ln -s busybox "$stage/bin/sh"
    cp "$KDIR"/modules/*.ko "$stage/lib/modules/"
    printf '%s\n' "${MODULES[@]}" >"$stage/lib/modules/order"
    cp "$GUEST_SRC/init" "$stage/init"
    cp "$GUEST_SRC"/roles/* "$stage/roles/"
    chmod 0755 "$stage/init" "$stage"/roles/*.sh
    # The kernel opens /dev/console before /init runs, so it must exist in
    # the archive (devtmpfs is mounted only by /init).
    mknod -m 600 "$stage/dev/console" c 5 1
    (cd "$stage" && find . -print0 | sort -z | cpio --null -o -H newc --quiet) |
        gzip -9n >"$INITRD.tmp"
    mv "$INITRD.tmp" "$INITRD"
    rm -rf "$stage"
    trap - EXIT
    # Keep the cache small: old initramfs builds are useless.
    find "$CACHE" -maxdepth 1 -name 'initramfs-*.cpio.gz' ! -name "${INITRD##*/}" -delete
fi

ln -sfn "$KDIR/vmlinuz-$kver" "$CACHE/vmlinuz"
ln -sfn "$INITRD" "$CACHE/initramfs.cpio.gz"
{
    echo "VADAPT_GUEST_KERNEL=$KDIR/vmlinuz-$kver"
    echo "VADAPT_GUEST_INITRD=$INITRD"
} | tee "$CACHE/current.env"
