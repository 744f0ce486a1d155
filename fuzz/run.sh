#!/usr/bin/env bash
# Runs every fuzz target for a bounded time over its seed corpus, and fails
# if any target crashes (a failed property is a crash).
#
#   fuzz/run.sh [SECONDS]    (per target; default 30)
#
# The kept corpus (fuzz/corpus/TARGET) is only read: what libFuzzer finds
# goes to a temporary directory, removed at the end, so the repository
# does not grow. A crashing input is left in fuzz/artifacts/TARGET/.
# Needs rustup (a nightly toolchain is installed if missing) and installs
# cargo-fuzz if it is missing.

set -u -o pipefail

secs=${1:-30}
case $secs in
'' | *[!0-9]*)
    echo "usage: $0 [SECONDS]" >&2
    exit 2
    ;;
esac

cd "$(dirname "$0")"
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"

if ! rustup run nightly rustc --version >/dev/null 2>&1; then
    rustup toolchain install nightly --profile minimal || exit 1
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked || exit 1
fi

targets=$(cargo +nightly fuzz list) || exit 1
echo "building the fuzz targets"
cargo +nightly fuzz build || exit 1

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

failed=()
summary=()
for target in $targets; do
    mkdir -p "$work/$target"
    log="$work/$target.log"
    echo "== $target: ${secs} s"
    flags=(-max_total_time="$secs" -timeout=10)
    if [ "$target" = worker_model ]; then
        # The epoch and rcu tables free replaced entries later, so most runs
        # end with more mallocs than frees, and libFuzzer then looks for
        # leaks after each (a LeakSanitizer scan): 3.5 times fewer runs, for
        # garbage that is still referenced, never reported.
        flags+=(-detect_leaks=0)
    fi
    # The first corpus directory is where libFuzzer writes; the kept one
    # after it is only read. -timeout: an input running 10 s is a hang.
    cargo +nightly fuzz run "$target" "$work/$target" "corpus/$target" -- \
        "${flags[@]}" >"$log" 2>&1
    rc=$?
    # libFuzzer's status lines start with #RUNS; the last one says where it
    # stopped (DONE when the time was up).
    stats=$(grep -E '^#[0-9]+[[:space:]]' "$log" | tail -n 1)
    if [ "$rc" -eq 0 ]; then
        summary+=("$target: ok: $stats")
    else
        failed+=("$target")
        summary+=("$target: FAILED (exit $rc): ${stats:-before its first status line}")
        # The failed property (or the sanitizer's report), and the input.
        grep -E -A 4 "panicked at|ERROR: AddressSanitizer" "$log" |
            grep -v -E "^stack backtrace|^ +[0-9]+: |^ +at " | head -n 12
        grep -E "Test unit written to" "$log" | head -n 1
        [ -s "$log" ] && ! grep -q -E "^#[0-9]+|panicked at|ERROR:" "$log" && tail -n 20 "$log"
    fi
done

echo
echo "== summary (${secs} s per target)"
printf '%s\n' "${summary[@]}"
if [ "${#failed[@]}" -gt 0 ]; then
    echo "failed: ${failed[*]}"
    exit 1
fi
