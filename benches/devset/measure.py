"""`measure.sh BINARY CASES OUTDIR`: the dev set measured with one reproagent binary.

1. The local sandbox must cut the network: a command in it that connects to a loopback
   listener opened here must fail (and the same command outside must connect).
2. `bench run --adapter gold` and `--adapter keyfree`, both `--sandbox local`.
3. Localization: each case's buggy tree (its base commit, `git archive`d to
   OUTDIR/trees/<id>) is indexed, and the files the gold patch changes are looked up in
   `reproagent localize --json` and in a plain BM25 baseline (`reproagent search` with
   the issue text as the query, hits ranked by their file's first appearance).
4. OUTDIR/table.md: one row per case and the totals; OUTDIR/measure.json: the same data.
"""

import argparse
import json
import os
import re
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from devset import die, log, patch_files, run

LIMIT = 1000  # how deep ranks are looked for; deeper is "-"


def check_network(binary, outdir):
    """A loopback listener is reachable from here and not from the local sandbox."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    port = srv.getsockname()[1]
    probe = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5); print('CONNECTED')"
    try:
        rc_out, out_out = run(["python3", "-c", probe], check=False, timeout=30)
        if rc_out != 0 or "CONNECTED" not in out_out:
            die(f"the probe cannot reach its own listener on 127.0.0.1:{port} outside the sandbox: {out_out.strip()}",
                "the network check needs loopback")
        with tempfile.TemporaryDirectory(dir=outdir) as repo:
            Path(repo, "README").write_text("network probe\n")
            rc, out = run([str(binary), "sandbox", "exec", "--sandbox", "local", "--repo", repo, "--timeout", "60", "--",
                           "python3", "-c", probe], check=False, timeout=120)
    finally:
        srv.close()
    text = f"listener 127.0.0.1:{port}; outside the sandbox: connected; inside (exit {rc}):\n{out.strip()}\n"
    (outdir / "network-check.txt").write_text(text)
    if "CONNECTED" in out:
        die("the local sandbox reached a loopback listener outside it: the network is not cut",
            "run as root so the local sandbox can unshare the network; no suite was run")
    log(f"network check: the local sandbox cannot reach 127.0.0.1:{port} (exit {rc}): {out.strip().splitlines()[-1] if out.strip() else ''}")
    return text


def bench(binary, cases, outdir, adapter, jobs, only, reuse=False, extra=()):
    out = outdir / adapter
    if reuse and (out / "run.json").exists():
        log(f"bench {adapter}: reusing {out}/run.json")
        return {c["case_id"]: c for c in json.loads((out / "run.json").read_text()).get("cases", [])}
    if out.exists():
        shutil.rmtree(out)
    cmd = [str(binary), "bench", "run", "--suite", str(cases), "--adapter", adapter, "--sandbox", "local", "-j", str(jobs), "--out", str(out), *extra]
    for c in only or []:
        cmd += ["--case", c]
    log(f"bench {adapter}: {' '.join(cmd)}")
    t = time.time()
    rc, text = run(cmd, check=False, timeout=4 * 3600)
    (outdir / f"{adapter}.log").write_text(" ".join(cmd) + "\n\n" + text)
    rec = out / "run.json"
    if not rec.exists():
        log(f"bench {adapter}: no run.json (exit {rc}); see {outdir}/{adapter}.log")
        return {}
    data = json.loads(rec.read_text())
    log(f"bench {adapter}: done in {time.time() - t:.0f}s (exit {rc})")
    return {c["case_id"]: c for c in data.get("cases", [])}


def export_tree(case, tree):
    """The buggy tree: the case's base commit, as files (no .git)."""
    repo = Path(case["repo"])
    if not repo.is_absolute():
        repo = Path(case["dir"]) / repo
    if tree.exists():
        shutil.rmtree(tree)
    tree.mkdir(parents=True)
    arch = subprocess.Popen(["git", "-C", str(repo), "archive", case["base_commit"]], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(tree)], stdin=arch.stdout, check=True)
    if arch.wait() != 0:
        raise RuntimeError(f"git archive {case['base_commit']} failed in {repo}")


def file_rank(files, gold):
    """1-based rank of the best-placed gold file in a ranked list of files, or None."""
    for i, f in enumerate(files):
        if f in gold:
            return i + 1
    return None


def localize(binary, case, outdir, timing_runs=3):
    cid = case["id"]
    tree = outdir / "trees" / cid
    gold = set(patch_files((Path(case["dir"]) / case["gold_patch"]).read_text()))
    issue = (Path(case["dir"]) / case["issue_file"]).read_text()
    res = {"gold_files": sorted(gold)}
    t = time.time()
    # The index of a tree is reused when the same binary made it (OUTDIR/trees/<id>.indexed).
    stamp = outdir / "trees" / f"{cid}.indexed"
    if not (stamp.exists() and stamp.read_text() == str(binary) and (tree / ".reproagent").is_dir()):
        stamp.unlink(missing_ok=True)
        export_tree(case, tree)
        rc, out = run([str(binary), "index", str(tree)], check=False, timeout=3600)
        if rc != 0:
            res["error"] = f"index failed: {out.strip().splitlines()[-1] if out.strip() else rc}"
            return res
        stamp.write_text(str(binary))
    res["index_secs"] = round(time.time() - t, 1)
    # The localization's time: the whole `localize` process (start, opening the index,
    # reading the issue, ranking), as a user waits for it: wall and CPU (user + system, from
    # the child's rusage; less sensitive to a loaded machine), the median of `timing_runs`.
    cmd = [str(binary), "localize", "--issue", str(Path(case["dir"]) / case["issue_file"]), "-C", str(tree), "--json",
           "--limit", str(LIMIT)]
    walls, cpus = [], []
    for k in range(max(1, timing_runs)):
        r0, t = resource.getrusage(resource.RUSAGE_CHILDREN), time.time()
        rc_k, out_k = run(cmd, check=False, timeout=600)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        walls.append(time.time() - t)
        cpus.append((r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime))
        if k == 0:
            rc, out = rc_k, out_k
    res["localize_secs"] = round(statistics.median(walls), 2)
    res["localize_cpu_secs"] = round(statistics.median(cpus), 2)
    res["localize_runs"] = len(walls)
    try:
        loc = json.loads(out[out.index("{"):]) if rc == 0 else None
    except ValueError:
        loc = None
    if loc is None:
        res["localize_error"] = out.strip().splitlines()[-1] if out.strip() else f"exit {rc}"
    else:
        files = [f["file"] for f in loc.get("files", [])]
        res["localize_rank"] = file_rank(files, gold)
        res["localize_top"] = files[:5]
    # `search --json` prints {"query", "hits"} (older binaries: the list of hits), at most
    # 50 hits a call: page with --offset until the gold file shows, the hits run out or
    # LIMIT hits were read. stdout only: the paging note goes to stderr.
    hits, err, page = [], None, 50
    while len(hits) < LIMIT:
        p = subprocess.run([str(binary), "search", issue, "-C", str(tree), "--json", "--limit", str(page), "--offset", str(len(hits))],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace", timeout=600)
        try:
            data = json.loads(p.stdout) if p.returncode == 0 else None
        except ValueError:
            data = None
        if data is None:
            err = (p.stderr or p.stdout).strip().splitlines()[-1:] or [f"exit {p.returncode}"]
            err = err[0]
            break
        got = data.get("hits") if isinstance(data, dict) else data
        hits.extend(got)
        if len(got) < page or any(h["path"] in gold for h in got) or not isinstance(data, dict):
            break
    if err is not None and not hits:
        res["bm25_error"] = err
    else:
        files = []
        for h in hits:
            if h["path"] not in files:
                files.append(h["path"])
        res["bm25_rank"] = file_rank(files, gold)
        res["bm25_top"] = files[:5]
    return res


def cell(s):
    return str(s).replace("|", "\\|").replace("\n", " ")


def last_line(s):
    """The line of an error that says what it is (a traceback's last line)."""
    lines = [l.strip() for l in str(s or "").splitlines() if l.strip()]
    for l in reversed(lines):
        if re.match(r"^(E\s+)?[\w.]*(Error|Exception)\b", l):
            return re.sub(r"^E\s+", "", l)
    return lines[-1] if lines else ""


def short(s, n=90):
    s = " ".join(last_line(s).split()) if "\n" in str(s or "") else " ".join(str(s or "").split())
    return s if len(s) <= n else s[: n - 1] + "…"


def gold_cell(r):
    if not r:
        return "not run"
    if r["status"] == "invalid":
        return f"invalid: {short(r.get('reason'))}"
    if r["status"] == "adapter_error":
        return f"adapter error: {short(r.get('reason'))}"
    if r["fail_to_pass"]:
        return "fail-to-pass"
    b, a = r.get("before") or {}, r.get("after") or {}
    return f"not fail-to-pass (before {b.get('status')}, after {a.get('status')}: {short(a.get('error') or a.get('failure') or b.get('error') or b.get('failure'), 60)})"


def matches_cell(r):
    """Does the failure before the fix show the issue's error (bench's `matches_issue`)?
    `-` when the issue reports no error type (nothing to match) or no test was run."""
    if not r or r.get("status") != "scored" or r.get("matches_issue") is None:
        return "-"
    return "yes" if r["matches_issue"] else "no"


def keyfree_cells(r):
    if not r:
        return ["not run", "", "", "-"]
    built = bool(r.get("test_files") or r.get("test_patch"))
    claimed = r.get("claimed") or ""
    if r["status"] == "invalid":
        return [f"case invalid: {short(r.get('reason'), 60)}", claimed, "-", "-"]
    if r["status"] == "adapter_error":
        return [f"no: {short(r.get('reason'), 60)}", claimed, "no", "-"]
    why = "" if built else f" ({short(r.get('reason'), 60)})"
    return ["yes" if built else f"no{why}", claimed, "yes" if r["fail_to_pass"] else "no", matches_cell(r) if built else "-"]


def rank_cell(res, key):
    if "error" in res:
        return f"error: {short(res['error'], 40)}"
    if f"{key}_error" in res:
        return f"error: {short(res[key + '_error'], 40)}"
    r = res.get(f"{key}_rank")
    return str(r) if r else "-"


def secs_cell(res, key="localize_secs"):
    s = (res or {}).get(key)
    return f"{s:.2f}" if s is not None else "-"


def matched(runs, cases):
    """(failures that match the issue, tests judged against an issue that reports an error)."""
    rs = [runs.get(c["id"]) for c in cases]
    judged = [r for r in rs if r and r.get("status") == "scored" and r.get("matches_issue") is not None
              and (r.get("test_files") or r.get("test_patch"))]
    return sum(1 for r in judged if r["matches_issue"]), len(judged)


def table(cases, gold, keyfree, loc, meta):
    rows = [
        "| case | gold test | key-free built | key-free claimed | key-free fail-to-pass | key-free matches issue | localize rank | BM25 rank | localize wall s | localize CPU s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in cases:
        cid = c["id"]
        kf = keyfree_cells(keyfree.get(cid))
        rows.append("| " + " | ".join(cell(x) for x in [cid, gold_cell(gold.get(cid)), *kf, rank_cell(loc.get(cid, {}), "localize"),
                                                         rank_cell(loc.get(cid, {}), "bm25"), secs_cell(loc.get(cid)),
                                                         secs_cell(loc.get(cid), "localize_cpu_secs")]) + " |")
    n = len(cases)
    g_ok = sum(1 for c in cases if (gold.get(c["id"]) or {}).get("fail_to_pass"))
    g_inv = sum(1 for c in cases if (gold.get(c["id"]) or {}).get("status") == "invalid")
    kfr = [keyfree.get(c["id"]) for c in cases]
    built = sum(1 for r in kfr if r and (r.get("test_files") or r.get("test_patch")))
    claimed = [r for r in kfr if r and r.get("claimed") == "reproduced"]
    confirmed = sum(1 for r in kfr if r and r.get("fail_to_pass"))
    claimed_not = [r["case_id"] for r in claimed if not r.get("fail_to_pass")]

    def topk(key, k):
        return sum(1 for c in cases if (loc.get(c["id"]) or {}).get(f"{key}_rank") and loc[c["id"]][f"{key}_rank"] <= k)

    lines = ["\n".join(rows), ""]
    lines.append(f"Totals over {n} cases:")
    lines.append(f"- gold test fail-to-pass: {g_ok}/{n} (invalid: {g_inv})")
    lines.append(f"- key-free: built a test {built}/{n}, claimed reproduced {len(claimed)}/{n}, confirmed fail-to-pass {confirmed}/{n}")
    lines.append(f"- key-free claimed reproduced but NOT fail-to-pass: {len(claimed_not)}" + (f" ({', '.join(claimed_not)})" if claimed_not else ""))
    km, kj = matched(keyfree, cases)
    gm, gj = matched(gold, cases)
    lines.append(f"- failure before the fix matches the issue (of the tests run whose issue reports an error type): key-free {km}/{kj}, gold test {gm}/{gj}")
    for k in (1, 5, 10):
        lines.append(f"- gold file in top {k}: localize {topk('localize', k)}/{n}, BM25 {topk('bm25', k)}/{n}")
    runs = max([(loc.get(c["id"]) or {}).get("localize_runs", 1) for c in cases] or [1])
    for repo in sorted({c["id"].split("__")[0] for c in cases}):
        parts = []
        for key, what in (("localize_secs", "wall"), ("localize_cpu_secs", "CPU")):
            ts = [((loc.get(c["id"]) or {}).get(key), c["id"]) for c in cases if c["id"].split("__")[0] == repo]
            ts = [(t, cid) for t, cid in ts if t is not None]
            if ts:
                slow = max(ts)
                parts.append(f"{what} slowest {slow[0]:.2f} s ({slow[1]}), {sum(1 for t, _ in ts if t < 1.0)}/{len(ts)} under 1 s")
        if parts:
            lines.append(f"- localize time on {repo} (median of {runs} runs): " + "; ".join(parts))
    lines.append("")
    lines.append(meta)
    return "\n".join(lines) + "\n"


def main(argv):
    ap = argparse.ArgumentParser(prog="measure.sh", description="Measure the dev set with one reproagent binary.")
    ap.add_argument("binary", type=Path)
    ap.add_argument("cases", type=Path)
    ap.add_argument("outdir", type=Path)
    ap.add_argument("-j", "--jobs", type=int, default=2, help="bench cases at once (at most 2 on a shared machine)")
    ap.add_argument("--only", nargs="*", default=None, help="only these case ids")
    ap.add_argument("--skip-bench", action="store_true", help="localization only")
    ap.add_argument("--skip-localize", action="store_true", help="bench runs only")
    ap.add_argument("--reuse", action="store_true", help="reuse OUTDIR/<adapter>/run.json of an earlier run")
    ap.add_argument("--timing-runs", type=int, default=3, help="localize runs per case whose median time is reported")
    a = ap.parse_args(argv)
    binary = a.binary.resolve()
    if not os.access(binary, os.X_OK):
        die(f"{a.binary} is not an executable", "give the path of a reproagent binary")
    rc, ver = run([str(binary), "--version"], check=False)
    if rc != 0:
        die(f"{binary} --version failed: {ver.strip()}", "give a working reproagent binary")
    if not a.cases.is_dir():
        die(f"{a.cases} is not a directory", "give the cases directory build.sh wrote (OUT/cases)")
    a.outdir.mkdir(parents=True, exist_ok=True)
    outdir = a.outdir.resolve()
    cases = []
    for cj in sorted(a.cases.resolve().glob("*/case.json")):
        c = json.loads(cj.read_text())
        c["dir"] = str(cj.parent)
        if a.only and c["id"] not in a.only:
            continue
        cases.append(c)
    if not cases:
        die(f"no case in {a.cases}", "run build.sh first")
    jobs = min(max(1, a.jobs), 2)
    log(f"{ver.strip()}: {len(cases)} cases from {a.cases}, results in {outdir}")
    gold, keyfree, loc = {}, {}, {}
    if not a.skip_bench:
        check_network(binary, outdir)
        gold = bench(binary, a.cases, outdir, "gold", jobs, a.only, a.reuse)
        # --no-verify: the gold run already says whether each case's own test is
        # fail-to-pass; without it a case whose gold test cannot run is not given to the
        # reproducer at all, and nothing would be learnt about what it builds and claims.
        keyfree = bench(binary, a.cases, outdir, "keyfree", jobs, a.only, a.reuse, ["--no-verify"])
    if not a.skip_localize:
        for c in cases:
            t = time.time()
            try:
                loc[c["id"]] = localize(binary, c, outdir, a.timing_runs)
            except (RuntimeError, OSError, subprocess.CalledProcessError) as e:
                loc[c["id"]] = {"error": str(e)}
            r = loc[c["id"]]
            log(f"localize {c['id']}: localize {r.get('localize_rank')}, BM25 {r.get('bm25_rank')} ({time.time() - t:.0f}s){' ' + r['error'] if 'error' in r else ''}")
    meta = f"Binary: {binary} ({ver.strip()}); cases: {a.cases.resolve()}; measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}."
    (outdir / "measure.json").write_text(json.dumps({"binary": str(binary), "version": ver.strip(), "gold": gold, "keyfree": keyfree,
                                                     "localize": loc}, indent=1) + "\n")
    (outdir / "table.md").write_text(table(cases, gold, keyfree, loc, meta))
    log(f"wrote {outdir}/table.md and measure.json")
    print((outdir / "table.md").read_text())
