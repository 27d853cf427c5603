#!/usr/bin/env python3
"""Compare two reproagent builds' graphs row by row, and dump one's rows.

  store_compare.py dump BIN REPO OUT        index a copy of REPO with BIN, write its rows
  store_compare.py compare OLD NEW REPO [WORK]
                                            index copies of REPO with both builds, compare
                                            every public relation row by row, print the
                                            counts and the first differences; exit 1 when
                                            they differ

Rows are read through `BIN query --json`, so any two index formats compare.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

# name: columns (keys then values), as `reproagent schema` gives them (entity's `is_test`,
# added in format 9, left out so that any two formats compare; `test_of` is a rule from
# format 9 on, a stored relation before).
RELATIONS = {
    "file": ["path", "lang", "hash", "lines", "is_test", "syntax_errors"],
    "entity": ["id", "kind", "name", "qname", "file", "start_line", "end_line", "signature", "doc"],
    "contains": ["parent", "child"],
    "calls": ["caller", "callee", "line", "how", "confidence"],
    "call_site": ["caller", "line", "name", "receiver"],
    "unresolved": ["name", "caller", "line", "receiver"],
    "imports": ["file", "line", "module", "name", "alias", "target"],
    "inherits": ["child", "base_name", "base"],
    "test_of": ["test", "target"],
}


def copy(repo, work, name):
    dest = os.path.join(work, name)
    shutil.copytree(repo, dest, symlinks=True, ignore=shutil.ignore_patterns(".reproagent"))
    return dest


class Failed(Exception):
    """A build's command failed: one line to print, no traceback."""


def run(cmd):
    try:
        r = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as e:
        raise Failed(f"cannot run {cmd[0]}: {e.strerror}")
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise Failed(f"`{' '.join(cmd[:3])} ...` exited {r.returncode}: {last}")
    return r.stdout


def query(binary, root, script):
    return run([binary, "query", script, "--json", "--timeout", "600", "-C", root])


def rows(binary, root):
    run([binary, "index", "--full", root])
    out = set()
    for rel, cols in RELATIONS.items():
        c = ", ".join(cols)
        stored = f"?[{c}] := *{rel}{{{c}}}"
        if rel == "test_of":
            # Format 9 derives `test_of` when asked (a rule, `test_of[test, target]`);
            # older formats stored it. Ask as the build reads it.
            try:
                got = query(binary, root, f"?[{c}] := test_of[{c}]")
            except Failed:
                got = query(binary, root, stored)
        else:
            got = query(binary, root, stored)
        try:
            found = json.loads(got)["rows"]
        except (ValueError, KeyError):
            raise Failed(f"{binary} query on {rel}: no rows in its output (is it a reproagent build?)")
        for row in found:
            out.add(json.dumps({"rel": rel, "row": row}, separators=(",", ":")))
    return out


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "dump":
        _, _, binary, repo, dest = sys.argv
        with tempfile.TemporaryDirectory() as work:
            got = rows(os.path.abspath(binary), copy(repo, work, "repo"))
        with open(dest, "w") as f:
            for line in sorted(got):
                f.write(line + "\n")
        print(f"{len(got)} rows -> {dest}")
        return 0
    if len(sys.argv) in (5, 6) and sys.argv[1] == "compare":
        old, new, repo = (os.path.abspath(p) for p in sys.argv[2:5])
        work = sys.argv[5] if len(sys.argv) == 6 else tempfile.mkdtemp()
        a = rows(old, copy(repo, work, "old"))
        b = rows(new, copy(repo, work, "new"))
        for rel in RELATIONS:
            na = sum(1 for r in a if json.loads(r)["rel"] == rel)
            nb = sum(1 for r in b if json.loads(r)["rel"] == rel)
            print(f"{rel:12} old {na:8} new {nb:8} {'same' if na == nb else 'DIFFERENT COUNT'}")
        lost, gained = sorted(a - b), sorted(b - a)
        print(f"rows: old {len(a)}, new {len(b)}; only in old {len(lost)}, only in new {len(gained)}")
        for r in lost[:10]:
            print("  - " + r)
        for r in gained[:10]:
            print("  + " + r)
        return 0 if not lost and not gained else 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Failed as e:
        print(f"store_compare: {e} (hint: check the binary and that the repository copy can be indexed)", file=sys.stderr)
        sys.exit(2)
