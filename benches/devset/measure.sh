#!/bin/bash
# Measure the dev set with one reproagent binary: gold and key-free bench runs (local
# sandbox, after checking it cuts the network) and localization ranks (localize vs.
# plain BM25), written to OUTDIR/table.md and OUTDIR/measure.json.
#
#   benches/devset/measure.sh BINARY CASES OUTDIR [-j N] [--only ID ...] [--skip-bench] [--skip-localize]
#
# CASES is the cases/ (or cases-env/, for a binary that reads tests.python) build.sh wrote.
# Run as root: the local sandbox cuts the network only then.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [[ $# -lt 3 ]]; then
  echo "usage: $0 BINARY CASES OUTDIR [-j N] [--only ID ...] (hint: CASES is build.sh's OUT/cases)" >&2
  exit 2
fi
exec python3 "$here/devset.py" measure "$@"
