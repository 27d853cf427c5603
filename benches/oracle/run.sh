#!/usr/bin/env bash
# Call-edge precision and recall against jedi (not in CI): benches/oracle/run.sh BINARY OUTDIR
#
# Sets up $ORACLE_DIR (default /work/oracle): a venv with jedi, and the sdists of requests
# 2.31, flask 2.3.x and Django 4.2.x from PyPI. Each sdist is unpacked fresh under OUTDIR,
# indexed with BINARY, its edges, call sites, entities and bases dumped with
# `reproagent query --json`, and checked by oracle.py; OUTDIR/<project>.json per project.
# Run it under `nice`; jedi takes a few minutes per project. ORACLE_PROJECTS="django"
# checks one project; ORACLE_REUSE=1 keeps an OUTDIR's index and dumps from an earlier run;
# ORACLE_ARGS="--sample 300 --recall 300 --seed 12" are the defaults.
set -euo pipefail
bin=$(readlink -f "${1:?usage: run.sh BINARY OUTDIR}")
out=$(mkdir -p "${2:?usage: run.sh BINARY OUTDIR}" && readlink -f "$2")
here=$(dirname "$(readlink -f "$0")")
odir=${ORACLE_DIR:-/work/oracle}
mkdir -p "$odir/sdists"
[ -x "$odir/venv/bin/python" ] || python3 -m venv "$odir/venv"
"$odir/venv/bin/python" -c 'import jedi' 2>/dev/null || "$odir/venv/bin/pip" install -q jedi
for spec in requests==2.31.0 'flask>=2.3,<2.4' 'Django>=4.2,<4.3'; do
  name=${spec%%[=><]*}
  ls "$odir/sdists" | grep -qi "^$name-" ||
    "$odir/venv/bin/pip" download -q --no-deps --no-binary :all: "$spec" -d "$odir/sdists"
done
for tgz in "$odir"/sdists/*.tar.gz; do
  base=$(basename "$tgz" .tar.gz)
  proj=$(echo "$base" | sed 's/-.*//' | tr A-Z a-z)
  case " ${ORACLE_PROJECTS:-django flask requests} " in *" $proj "*) ;; *) continue ;; esac
  root="$out/src/$base"
  if [ -z "${ORACLE_REUSE:-}" ] || [ ! -s "$out/$proj.inherits.json" ]; then
    rm -rf "$root" && mkdir -p "$out/src" && tar -xzf "$tgz" -C "$out/src"
    "$bin" index -q "$root"
    q() { "$bin" query --json --timeout 600 -C "$root" "$1" >"$out/$proj.$2.json"; }
    q '?[caller, callee, line, how, confidence] := *calls{caller, callee, line, how, confidence}' edges
    q '?[caller, line, name, receiver] := *call_site{caller, line, name, receiver}' sites
    q '?[id, kind, name, file, start_line] := *entity{id, kind, name, file, start_line}' entities
    q '?[child, base] := *inherits{child, base}' inherits
  fi
  "$odir/venv/bin/python" "$here/oracle.py" "$root" "$out/$proj.edges.json" "$out/$proj.sites.json" \
    "$out/$proj.entities.json" "$out/$proj.inherits.json" ${ORACLE_ARGS:-} >"$out/$proj.json"
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], json.dumps({k: (v['precision'], v['edges']) for k, v in d['precision'].items()}), 'all', d['precision_all_sampled'], 'recall', d['recall'])" "$out/$proj.json" "$proj"
done
