#!/usr/bin/env bash
# Every bundled scenario (but netap-ml-grid, a sweep) run by two vadapt
# binaries, and their result.json compared byte for byte: a refactoring that
# claims to change no behaviour of the simulator must leave them identical.
# vspace-memcached runs 42 s of its 90 (2 s into its peak), which takes
# minutes instead of over 17 on a 2-core VM.
#
#   scripts/sim_compare.sh BEFORE_BIN AFTER_BIN OUT_DIR
set -euo pipefail
(($# == 3)) || { sed -n '2,9p' "$0" >&2; exit 2; }
mkdir -p "$3/before" "$3/after"
# Absolute, before the cd below.
before="$(realpath "$1")" after="$(realpath "$2")" out="$(realpath "$3")"
cd "$(dirname "${BASH_SOURCE[0]}")/.."
differ=0
for f in sim/scenarios/*.toml; do
    n="$(basename "$f" .toml)"
    [[ "$n" == netap-ml-grid ]] && continue
    extra=()
    [[ "$n" == vspace-memcached ]] && extra=(--duration-s 42)
    for side in before after; do
        bin="$before"; [[ "$side" == after ]] && bin="$after"
        "$bin" sim "$f" --out "$out/$side/$n" --log-level warn "${extra[@]}" >"$out/$side/$n.log" 2>&1
    done
    if cmp -s "$out/before/$n/result.json" "$out/after/$n/result.json"; then
        echo "$n: identical"
    else
        echo "$n: DIFFERS"; differ=1
    fi
done
exit "$differ"
