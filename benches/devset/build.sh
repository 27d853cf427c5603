#!/bin/bash
# Build the dev set of real issues: clones at base_commit, one virtualenv per (repository,
# Python), the fail-to-pass check of each instance with the network cut, and the cases.
# Idempotent: run it again and it reuses what is there and up to date.
#
#   benches/devset/build.sh [MIRRORS [OUT]] [--bin REPROAGENT] [--only ID ...] [-j N]
#   benches/devset/build.sh [MIRRORS [OUT]] --localize-only   # clones and OUT/cases-localize
#                                                             # for `bench localize`; no root
#
# MIRRORS (default $DEVSET_MIRRORS or /work/.mirror): fetched git directories, owner+name/repo.
# OUT     (default $DEVSET_OUT or /work/devset): repos/, envsrc/, venvs/, logs/, verify.json,
#         verify.md, cases/ (today's case.json) and cases-env/ (with tests.python).
# Needs root (the checks run under `unshare --net`), git, pyenv's interpreters, PyPI.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
args=()
if [[ $# -gt 0 && $1 != -* ]]; then args+=(--mirrors "$1"); shift; fi
if [[ $# -gt 0 && $1 != -* ]]; then args+=(--out "$1"); shift; fi
py=$(command -v python3)
exec "$py" "$here/devset.py" build "${args[@]}" "$@"
