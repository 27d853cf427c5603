#!/usr/bin/env bash
# Where the index time goes, by perf: profiles `reproagent index --full` and a one-file
# incremental `reproagent index` on a copy of a corpus from benches/data/ and prints the
# inclusive share of the main steps (parse, extract queries, resolve, diff, Cozo/SQLite
# writes, the keyword index).
#
#   benches/profile.sh django [path-to-touch]
#
# Needs perf (linux-perf). Builds the release CLI. The copy goes to a temp dir.
# PERF_FREQ / PERF_FREQ_INCR: sampling rates (default 499 / 999 Hz; lower them for the
# TypeScript corpus, whose dwarf call-graph data is otherwise several GB).
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

# Inclusive ("children") share of the symbols that name a step, each once.
steps() {
    perf report -i "$1" --children --sort symbol -g none --percent-limit 1.5 --stdio 2>/dev/null \
        | grep -E '%' | grep -v '^#' \
        | grep -vE ' (reproagent::main|reproagent::cli::main|reproagent::cli::index::run)( |$)' \
        | grep -E 'reproagent::|cozo::.*(backup_db|import_relations|batch_put|commit)|tantivy::.*(IndexWriter|commit|add_document)|ts_parser_parse_with_options|ts_query_cursor_next|sqlite3_step|malloc_consolidate|_int_free' \
        | awk '{ sym = ""; for (i = 4; i <= NF; i++) { if ($i == "-") break; sym = sym (sym == "" ? "" : " ") $i }
                 if (!(sym in seen)) { seen[sym] = 1; printf "%8s  %s\n", $1, sym } }' \
        | head -40
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
