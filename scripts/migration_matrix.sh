#!/usr/bin/env bash
# The live-migration test (tests/interop/test_migration.py) for every policy
# and socket mode, the slow-reader cell and the cell where vadapt announces
# the VM (SEND_RARP) (all expected failures for now, see GUEST_CORRUPTED),
# then one table of the figures each passing cell left: QEMU's downtime and
# total time, the peer's ping gap and pings lost. The default
# test run (scripts/test.sh interop) runs only its representative cell,
# interrupt policy with vadapt listening.
#
#   scripts/migration_matrix.sh [OUT_DIR] [PYTEST_ARGS...]
#
# OUT_DIR (default: a fresh /tmp/vadapt-migration.XXXXXX) keeps one JSON file
# per cell and the table, `migration.md`. Honours CARGO_TARGET_DIR and
# VADAPT_BIN as scripts/test.sh does; needs QEMU and the guest image
# (scripts/install-deps.sh, scripts/guest-image.sh). About 2-3 minutes a cell
# on a 2-core machine under TCG.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-$(mktemp -d /tmp/vadapt-migration.XXXXXX)}"
shift || true
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
BIN="${VADAPT_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/vadapt}"
[[ -x "$BIN" ]] || { echo "no release binary at $BIN (cargo build --release -p vadapt)" >&2; exit 1; }
PYTEST="${PYTEST:-$ROOT/.venv/bin/pytest}"

rc=0
VADAPT_BIN="$BIN" VADAPT_INTEROP_STRICT=1 VADAPT_MIGRATION_OUT="$OUT" \
    "$PYTEST" -v -s --migration-matrix "$ROOT/tests/interop/test_migration.py" "$@" || rc=$?

python3 - "$OUT" <<'EOF'
import json
import sys
from pathlib import Path

out = Path(sys.argv[1])
order = {
    (p, m): i
    for i, (p, m) in enumerate(
        (p, m) for p in ("interrupt", "busy-poll", "netap", "eekbp") for m in ("server", "client")
    )
}
rows = [json.loads(p.read_text()) for p in out.glob("migration-*.json")]
rows.sort(
    key=lambda r: (
        r["reader"],
        r.get("announce", "guest"),
        order.get((r["policy"], r["mode"]), len(order)),
    )
)
lines = [
    "| policy | mode | reader | announced by | QEMU downtime (ms) | migration total (ms) "
    "| ping gap (ms) | pings lost | md5 both ways |",
    "|---|---|---|---|---|---|---|---|---|",
]
for r in rows:
    lines.append(
        f"| {r['policy']} | {r['mode']} | {r['reader']} | {r.get('announce', 'guest')} "
        f"| {r['qemu_downtime_ms']} "
        f"| {r['qemu_total_time_ms']} "
        f"| {r['ping_gap_ms']} | {r['pings_lost']} | {'ok' if r['md5_ok'] else 'FAILED'} |"
    )
text = "\n".join(lines) + "\n"
(out / "migration.md").write_text(text)
print(text)
print(f"{len(rows)} cell(s) passed; files in {out}")
EOF
exit "$rc"
