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

STEPS=(deps guest-image fmt imports clippy doc cargo-test build-release lab reproduce-quick fuzz-smoke interop soak-smoke stall-hunt-smoke vspace-eval-smoke bench-quick)
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
step_fmt() { cargo fmt --all --check; }
# No import cycle between the files of a crate (known ones listed in the script).
step_imports() { python3 scripts/check-imports.py; }
step_clippy() { cargo clippy --workspace --all-targets -- -D warnings; }
step_doc() { RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps; }
step_cargo_test() { cargo test --workspace; }
step_build_release() { cargo build --release -p vadapt; }
step_lab() {
    "$VENV/bin/ruff" check --config scripts/ruff.toml scripts
    "$VENV/bin/ruff" format --check --config scripts/ruff.toml scripts
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
