#!/usr/bin/env bash
# Run every cargo-fuzz target of fuzz/ for a while, one after the other, and
# write a summary (target, seconds, executions, exec/s, crashes, corpus).
#
#   scripts/fuzz.sh SECONDS            each target for SECONDS (600: the
#                                      campaign docs/reliability.md asks for)
#   scripts/fuzz.sh --smoke            each target for 20 s (scripts/test.sh)
#   ... --targets vhost_user,config    only these targets
#
# Installs what it needs: the nightly toolchain's presence is checked (rustup
# installs it if it can), a C++ compiler for libFuzzer (g++, Debian), and
# cargo-fuzz (`cargo install --locked`). Runs the harnesses' own unit tests
# (fuzz/src) first. Targets are built with AddressSanitizer (cargo fuzz's
# default) and run with -rss_limit_mb=2048 and -timeout=10 (per input), with
# fuzz/dicts/<target>.dict where there is one (and EXTRA_ARGS below).
# Corpora grow in fuzz/corpus/<target>/ (seeded from fuzz/seeds/),
# findings land in fuzz/artifacts/<target>/, each run's libFuzzer log in
# fuzz/target/logs/<target>.log; the summary goes to stdout and
# fuzz/last-run.md. Exits 1 if any target crashed (or hung, or ran out of
# memory), printing how to reproduce each finding.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FUZZ="$ROOT/fuzz"
ALL_TARGETS=(split_device driver_device packed_device packed_driver_device vhost_user control config vnet_hdr qmp qga source_guard)
RSS_LIMIT_MB=2048
INPUT_TIMEOUT_S=10
# Per-target libFuzzer options. vhost_user's inputs are operation lists
# decoded with `arbitrary` and it runs a few hundred inputs/s (every ring
# message stops and restarts the port's queue worker, stepped in-process):
# libFuzzer's default slow growth of the length limit would keep its inputs
# to one or two operations for most of a run.
# vnet_hdr: a frame of up to 16 KiB, so that segmentation makes many segments.
declare -A EXTRA_ARGS=([vhost_user]="-len_control=0 -max_len=1024" [vnet_hdr]="-max_len=16384")

log() { printf '[fuzz] %s\n' "$*"; }
die() { printf '[fuzz] error: %s\n' "$*" >&2; exit 2; }
usage() { sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 2; }

seconds=""
targets=("${ALL_TARGETS[@]}")
while (($#)); do
    case "$1" in
        --smoke) seconds=20 ;;
        --targets) shift; (($#)) || usage; IFS=, read -r -a targets <<<"$1" ;;
        --targets=*) IFS=, read -r -a targets <<<"${1#--targets=}" ;;
        -h | --help) usage ;;
        *[!0-9]* | "") usage ;;
        *) seconds="$1" ;;
    esac
    shift
done
[[ -n "$seconds" && "$seconds" -gt 0 ]] || usage
for t in "${targets[@]}"; do
    [[ " ${ALL_TARGETS[*]} " == *" $t "* ]] || die "unknown target \`$t\` (targets: ${ALL_TARGETS[*]})"
done

# --- what it needs -----------------------------------------------------------
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
# The fuzz workspace keeps its own fuzz/target: nightly and sanitizer flags
# would only invalidate the main workspace's build in a shared one.
unset CARGO_TARGET_DIR
if ! rustup run nightly rustc --version >/dev/null 2>&1; then
    log "installing the nightly toolchain (cargo fuzz needs it)"
    rustup toolchain install nightly --profile minimal \
        || die "no nightly toolchain, and rustup could not install one"
fi
if ! command -v c++ >/dev/null 2>&1; then
    log "installing g++ (libFuzzer is C++)"
    ((EUID == 0)) || die "no C++ compiler; install g++ (as root: apt-get install g++)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq g++ >/dev/null
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    log "installing cargo-fuzz"
    # Outside the repository: its rust-toolchain.toml pins a stable toolchain.
    (cd / && cargo install cargo-fuzz --locked)
fi
log "$(cargo +nightly fuzz --version), $(rustup run nightly rustc --version)"

cd "$FUZZ"
# The harnesses' own tests: the vhost-user harness reaches the data path and
# closes every descriptor, the seeds parse, the control fixture answers.
log "testing the harnesses (cargo test --lib)"
cargo +nightly test --lib --quiet
log "building ${targets[*]} (release, debug assertions, AddressSanitizer)"
for t in "${targets[@]}"; do
    cargo +nightly fuzz build "$t"
done

# --- campaigns, one at a time ---------------------------------------------
mkdir -p target/logs
declare -A EXECS=() RATE=() CRASHES=() CORPUS=() SECS=() FOUND=()
failed=()
for t in "${targets[@]}"; do
    corpus="corpus/$t"
    artifacts="artifacts/$t"
    mkdir -p "$corpus" "$artifacts"
    if [[ -d "seeds/$t" ]]; then
        cp -n "seeds/$t"/* "$corpus"/ 2>/dev/null || true
    fi
    extra=()
    [[ -f "dicts/$t.dict" ]] && extra+=("-dict=dicts/$t.dict")
    read -r -a more <<<"${EXTRA_ARGS[$t]:-}"
    extra+=("${more[@]}")
    before="$(ls -A "$artifacts")"
    logf="target/logs/$t.log"
    log "running $t for $seconds s (log: fuzz/$logf)"
    t0=$(date +%s)
    rc=0
    cargo +nightly fuzz run "$t" "$corpus" -- \
        -max_total_time="$seconds" -rss_limit_mb="$RSS_LIMIT_MB" \
        -timeout="$INPUT_TIMEOUT_S" -print_final_stats=1 "${extra[@]}" \
        >"$logf" 2>&1 || rc=$?
    SECS[$t]=$(($(date +%s) - t0))
    # libFuzzer's final stats; after a crash the last status line instead.
    # (`|| true`: under pipefail a grep that finds nothing, as after a
    # crash, would otherwise end the script before it reports the crash.)
    execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$logf" | tail -1)"
    if [[ -z "$execs" ]]; then
        execs="$(grep -oE '^#[0-9]+' "$logf" | tail -1 | tr -d '#' || true)"
    fi
    EXECS[$t]="${execs:-0}"
    rate="$(grep -E '^#[0-9]+[[:space:]]+DONE' "$logf" | grep -oE 'exec/s: [0-9]+' | tail -1 | cut -d' ' -f2 || true)"
    if [[ -z "$rate" ]]; then
        rate=$((EXECS[$t] / (SECS[$t] > 0 ? SECS[$t] : 1)))
    fi
    RATE[$t]="$rate"
    new="$(comm -13 <(printf '%s\n' "$before" | sort) <(ls -A "$artifacts" | sort) | grep -v '^$' || true)"
    n=0
    [[ -n "$new" ]] && n=$(printf '%s\n' "$new" | wc -l)
    if ((rc != 0 && n == 0)); then
        n=1 # failed without an artifact (e.g. the build of the run): count it
    fi
    CRASHES[$t]=$n
    FOUND[$t]="$new"
    CORPUS[$t]=$(find "$corpus" -type f | wc -l)
    if ((rc != 0)); then
        failed+=("$t")
        log "$t: FOUND A PROBLEM (exit $rc); see fuzz/$logf"
        grep -m1 -E '^==[0-9]+==ERROR|panicked at|^SUMMARY' "$logf" | sed 's/^/[fuzz]   /' || true
        # CI keeps only this output, not fuzz/: the log's end and each
        # finding's bytes (base64), enough to reproduce it elsewhere.
        log "$t: the log's last 40 lines:"
        tail -n 40 "$logf" | sed 's/^/[fuzz]   | /'
        while read -r a; do
            [[ -n "$a" ]] || continue
            log "$t: finding $a, base64 (decode with base64 -d):"
            head -c 65536 "$artifacts/$a" | base64 -w 100 | sed 's/^/[fuzz]   /'
        done <<<"$new"
    fi
    log "$t: ${EXECS[$t]} executions in ${SECS[$t]} s (${RATE[$t]}/s), ${CRASHES[$t]} crashes, corpus ${CORPUS[$t]}"
done

# --- summary ---------------------------------------------------------------
table() {
    echo "| target | seconds | executions | exec/s | crashes | corpus |"
    echo "|---|---:|---:|---:|---:|---:|"
    for t in "${targets[@]}"; do
        echo "| $t | ${SECS[$t]} | ${EXECS[$t]} | ${RATE[$t]} | ${CRASHES[$t]} | ${CORPUS[$t]} |"
    done
}
{
    echo "# Last fuzzing run"
    echo
    echo "$(date -u '+%Y-%m-%d %H:%M UTC'), \`scripts/fuzz.sh\` with $seconds s per target," \
        "$(nproc) cores, $(. /etc/os-release && echo "$PRETTY_NAME"), commit" \
        "$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)."
    echo "ASan, -rss_limit_mb=$RSS_LIMIT_MB, -timeout=$INPUT_TIMEOUT_S."
    echo
    table
} >last-run.md
echo
table
echo
if ((${#failed[@]})); then
    echo "fuzz.sh: FAILED: ${failed[*]} found problems. Reproduce with:"
    for t in "${failed[@]}"; do
        if [[ -n "${FOUND[$t]}" ]]; then
            while read -r a; do
                echo "  (cd fuzz && cargo +nightly fuzz run $t artifacts/$t/$a)"
            done <<<"${FOUND[$t]}"
        else
            echo "  $t: no artifact; see fuzz/target/logs/$t.log"
        fi
    done
    echo "Minimise one with: (cd fuzz && cargo +nightly fuzz tmin <target> <artifact>)"
    exit 1
fi
echo "fuzz.sh: ${#targets[@]} targets, no crash (summary in fuzz/last-run.md)"
