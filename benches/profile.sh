#!/usr/bin/env bash
# Where the index time goes, by perf: profiles `reproagent index --full` and a one-file
# incremental `reproagent index` on a copy of a corpus from benches/data/ and prints the
# share of the main steps (parse, extraction, resolve, graph write, keyword index, ...),
# each sample counted once, and the share of each thread.
#
#   benches/profile.sh django [path-to-touch]
#
# Needs perf (linux-perf). Builds the release CLI. The copy goes to a temp dir.
# PERF_FREQ / PERF_FREQ_INCR: sampling rates (default 499 / 999 Hz; lower them for the
# TypeScript corpus, whose dwarf call-graph data is otherwise several GB). PROFILE_TOP=STEP
# also lists that step's leaf functions.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
corpus="${1:-django}"
case "$corpus" in
    django) touch_default="django/db/models/query.py"; comment="#" ;;
    typescript) touch_default="src/compiler/utilities.ts"; comment="//" ;;
    guava) touch_default="guava/src/com/google/common/collect/ImmutableList.java"; comment="//" ;;
    *) touch_default=""; comment="//" ;;
esac
touch_path="${2:-$touch_default}"
src="$here/data/$corpus"
[ -d "$src" ] || { echo "no $src: run benches/fetch.sh" >&2; exit 1; }
command -v perf >/dev/null || { echo "perf not found" >&2; exit 1; }

(cd "$here/.." && cargo build --release --bin reproagent >&2)
bin="$here/../target/release/reproagent"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cp -r "$src" "$tmp/$corpus"
root="$tmp/$corpus"

# Each sample in one step (benches/profile_steps.py), so the shares add up to 100%.
steps() {
    perf script -i "$1" -F comm,tid,ip,sym 2>/dev/null | python3 "$here/profile_steps.py" ${PROFILE_TOP:+--top "$PROFILE_TOP"}
}

echo "== $corpus: full index (perf, dwarf call graphs)"
perf record -q -o "$tmp/full.data" -F "${PERF_FREQ:-499}" --call-graph dwarf,16384 "$bin" index --full "$root" >&2
steps "$tmp/full.data"

if [ -n "$touch_path" ]; then
    printf '\n%s reproagent profile: touched\n' "$comment" >> "$root/$touch_path"
    echo
    echo "== $corpus: incremental after appending a line to $touch_path"
    perf record -q -o "$tmp/incr.data" -F "${PERF_FREQ_INCR:-999}" --call-graph dwarf,16384 "$bin" index "$root" >&2
    steps "$tmp/incr.data"
fi
