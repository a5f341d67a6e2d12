#!/usr/bin/env bash
# The whole check, as CI runs it (.ci/run): dependencies, guest image, Rust
# format, import layering, lint, docs and tests, release build, the Python lab,
# and the interop tests against the release binary. Fails fast at the first
# failing step, with a banner naming it, and ends with one summary line and the
# time of each step.
#
#   scripts/test.sh              every step
#   scripts/test.sh STEP...      only these steps (names as in the banners),
#                                e.g. `scripts/test.sh interop`
#
# Honours CARGO_TARGET_DIR (the release binary is looked up there).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
VENV="$ROOT/.venv"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

STEPS=(deps guest-image fmt imports clippy doc cargo-test build-release package systemd-unit lab reproduce-quick fuzz-smoke interop soak-smoke stall-hunt-smoke vspace-eval-smoke bench-quick)
declare -A TIMES=()
DONE=()

banner() {
    printf '\n==================== %s ====================\n' "$*"
}

summary() {
    local line="" s
    for s in "${DONE[@]}"; do line+=" $s=${TIMES[$s]}s"; done
    echo "step times:${line:- none}"
}

# pytest exits 5 when it collected nothing: that is a failure here.
pytest_run() {
    local rc=0
    "$VENV/bin/pytest" "$@" || rc=$?
    if ((rc == 5)); then
        echo "pytest collected no tests ($*): treated as a failure" >&2
        return 1
    fi
    return "$rc"
}

step_deps() { bash scripts/install-deps.sh; }
step_guest_image() { bash scripts/guest-image.sh; }
# The fuzz crate is a workspace of its own.
step_fmt() { cargo fmt --all --check && (cd fuzz && cargo fmt --all --check); }
# No import cycle between the files of a crate (known ones listed in the script).
step_imports() { python3 scripts/check-imports.py; }
# Also the packaged daemon-only build (no dev-tools), which the package step makes.
step_clippy() {
    cargo clippy --workspace --all-targets -- -D warnings
    cargo clippy -p vadapt --no-default-features --all-targets -- -D warnings
}
step_doc() { RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps; }
step_cargo_test() { cargo test --workspace; }
step_build_release() { cargo build --release -p vadapt; }
# The Debian package from the release binary (scripts/package.sh, cargo-deb),
# unpacked into a scratch root: every file in place, and the binary in it runs.
step_package() {
    local deb root f
    deb="$(bash scripts/package.sh | tail -n1)"
    [[ -f "$deb" ]] || { echo "scripts/package.sh named no .deb: $deb" >&2; return 1; }
    root="$(mktemp -d /tmp/vadapt-deb-root.XXXXXX)"
    dpkg-deb -x "$deb" "$root"
    for f in usr/bin/vadapt usr/lib/systemd/system/vadapt.service etc/vadapt/vadapt.toml \
        usr/share/man/man1/vadapt.1.gz usr/share/man/man1/vadapt-serve.1.gz \
        usr/share/man/man1/vadapt-config.1.gz usr/share/man/man5/vadapt.toml.5.gz \
        usr/share/bash-completion/completions/vadapt usr/share/zsh/vendor-completions/_vadapt \
        usr/share/fish/vendor_completions.d/vadapt.fish usr/share/vadapt/libvirt-hook-qemu; do
        [[ -e "$root/$f" ]] || { echo "the package has no /$f" >&2; rm -rf "$root"; return 1; }
    done
    "$root/usr/bin/vadapt" --version
    # The completions load in bash, and the pages render.
    bash -c "source '$root/usr/share/bash-completion/completions/vadapt' && complete -p vadapt"
    MANWIDTH=80 man -l "$root/usr/share/man/man1/vadapt-serve.1.gz" 2>/dev/null | grep -q -- --socket-group ||
        { echo "vadapt-serve(1) does not render with --socket-group" >&2; rm -rf "$root"; return 1; }
    # vadapt.toml(5) renders with the keys no other page has.
    for f in mac_ageing_s backlog margin slo_p95_us; do
        MANWIDTH=200 man -l "$root/usr/share/man/man5/vadapt.toml.5.gz" 2>/dev/null | grep -q -- "$f" ||
            { echo "vadapt.toml(5) does not render with $f" >&2; rm -rf "$root"; return 1; }
    done
    # The daemon, not the developers' tools; the packaged config is valid.
    if "$root/usr/bin/vadapt" demo --help >/dev/null 2>&1; then
        echo "the packaged vadapt has \`demo\`" >&2; rm -rf "$root"; return 1
    fi
    "$root/usr/bin/vadapt" config check "$root/etc/vadapt/vadapt.toml"
    rm -rf "$root"
}

# The systemd unit, as the package installs it: `dpkg -i` on this machine,
# `systemd-analyze verify` (which also finds the man pages its
# Documentation= names), `vadapt --version` from /usr/bin, then `dpkg -P`.
# No systemd runs as PID 1 here, so the unit is verified, not started; its
# sd_notify messages are tested with a fake NOTIFY_SOCKET
# (vadapt/tests/service_notify.rs).
step_systemd_unit() {
    local deb rc=0
    deb="$(ls -t "$TARGET_DIR"/debian/vadapt_*.deb 2>/dev/null | head -n1)"
    [[ -f "$deb" ]] || { echo "no package in $TARGET_DIR/debian (run the package step)" >&2; return 1; }
    DEBIAN_FRONTEND=noninteractive dpkg -i "$deb"
    (
        set -e
        systemd-analyze verify /usr/lib/systemd/system/vadapt.service
        /usr/bin/vadapt --version
        /usr/bin/vadapt config check /etc/vadapt/vadapt.toml
        man -w vadapt
        man -w 5 vadapt.toml
        # The hardening's score, for the record (docs/systemd.md has it).
        systemd-analyze security --offline=yes /usr/lib/systemd/system/vadapt.service | tail -n1
    ) || rc=$?
    DEBIAN_FRONTEND=noninteractive dpkg -P vadapt
    return "$rc"
}

step_lab() {
    "$VENV/bin/ruff" check --config scripts/ruff.toml scripts packaging/libvirt-hook-qemu
    "$VENV/bin/ruff" format --check --config scripts/ruff.toml scripts packaging/libvirt-hook-qemu
    (cd lab && "$VENV/bin/ruff" check . && "$VENV/bin/ruff" format --check . && pytest_run -q)
}
# The papers' figures in the simulator, in short (python -m vadapt_lab reproduce
# --quick, under 3 minutes): every scenario of PAPERS.md must run and be
# verdicted; its figures are not the record and PAPERS.md is not rewritten.
step_reproduce_quick() {
    local out
    out="$(mktemp -d /tmp/vadapt-reproduce-quick.XXXXXX)"
    PYTHONPATH="$ROOT/lab/src" "$VENV/bin/python" -m vadapt_lab reproduce --quick --out "$out"
    grep -q '^## EE-KBP' "$out/PAPERS.md"
    rm -rf "$out"
}
# Every fuzz target for 30 s (nightly, libFuzzer, ASan): a crash fails the step.
step_fuzz_smoke() { bash scripts/fuzz.sh --smoke; }
# Matrices run one representative cell here: test_migration.py its
# interrupt/server cell (every policy and socket mode: scripts/migration_matrix.sh).
step_interop() {
    local bin="$TARGET_DIR/release/vadapt"
    [[ -x "$bin" ]] || { echo "no release binary at $bin (run the build-release step)" >&2; return 1; }
    "$VENV/bin/ruff" check tests/interop
    "$VENV/bin/ruff" format --check tests/interop
    # Strict: a missing prerequisite fails instead of skipping.
    VADAPT_BIN="$bin" VADAPT_INTEROP_STRICT=1 pytest_run -v --durations=8 tests/interop
}

# The soak (scripts/soak.py, 64 ports for 10 minutes) in short: 8 ports,
# 20 s of guests connecting, sending and leaving; no packet lost, memory and
# fds flat.
step_soak_smoke() {
    local bin="$TARGET_DIR/release/vadapt"
    [[ -x "$bin" ]] || { echo "no release binary at $bin (run the build-release step)" >&2; return 1; }
    VADAPT_BIN="$bin" python3 scripts/soak.py --ports 8 --seconds 20
}

# The lost wake-up hunt (scripts/stall_hunt.py, 1000 runs) in short.
step_stall_hunt_smoke() {
    local bin="$TARGET_DIR/release/vadapt"
    [[ -x "$bin" ]] || { echo "no release binary at $bin (run the build-release step)" >&2; return 1; }
    VADAPT_BIN="$bin" python3 scripts/stall_hunt.py --runs 30 --max-threads 2
}

# vSPACE on the real daemon (scripts/vspace_eval.py) in short: the core
# manager finds the synthetic guest's vCPU threads over QMP and gets its P95
# reports; numbers are not judged.
step_vspace_eval_smoke() {
    local bin="$TARGET_DIR/release/vadapt" out
    [[ -x "$bin" ]] || { echo "no release binary at $bin (run the build-release step)" >&2; return 1; }
    out="$(mktemp -d /tmp/vadapt-vspace-smoke.XXXXXX)"
    "$VENV/bin/python" scripts/vspace_eval.py --bin "$bin" --out "$out" \
        --rates 2k --step-s 1.5 --variants static,vspace-e --rounds 1
    rm -rf "$out"
}

# The benchmark harness as a smoke test: every benchmark must run; numbers
# are not judged here (no timing assertions on a shared machine).
step_bench_quick() {
    local bin="$TARGET_DIR/release/vadapt" out
    [[ -x "$bin" ]] || { echo "no release binary at $bin (run the build-release step)" >&2; return 1; }
    out="$(mktemp -d /tmp/vadapt-bench-quick.XXXXXX)"
    "$bin" bench --quick --no-write --out "$out"
    rm -rf "$out"
}

run_step() {
    local name="$1" fn="step_${1//-/_}" t0 rc=0
    banner "step: $name"
    t0=$(date +%s)
    # A subshell with errexit on: `"$fn" || rc=$?` would turn errexit off
    # inside the step, so a failing command in its middle would go unnoticed.
    set +e
    (
        set -e
        "$fn"
    )
    rc=$?
    set -e
    TIMES[$name]=$(($(date +%s) - t0))
    DONE+=("$name")
    if ((rc != 0)); then
        banner "FAILED: step $name (exit $rc, ${TIMES[$name]} s)"
        summary
        echo "test.sh: FAILED at step $name"
        exit 1
    fi
    echo "---- step $name passed in ${TIMES[$name]} s"
}

selected=("$@")
((${#selected[@]})) || selected=("${STEPS[@]}")
for s in "${selected[@]}"; do
    declare -F "step_${s//-/_}" >/dev/null || { echo "unknown step: $s (steps: ${STEPS[*]})" >&2; exit 2; }
done

t_all=$(date +%s)
for s in "${selected[@]}"; do run_step "$s"; done
banner "all steps passed"
summary
echo "test.sh: ${#DONE[@]} steps passed in $(($(date +%s) - t_all)) s"
