#!/usr/bin/env python3
"""Dev set of real issues (SWE-bench Lite instances): build and measure.

    devset.py build   [--mirrors DIR] [--out DIR] [--instances FILE] [--pins DIR] [--bin REPROAGENT] [--only ID ...]
    devset.py measure BINARY CASES OUTDIR [--only ID ...]

`build` (see build.sh): per instance a clone at base_commit, one virtualenv per
(repository, Python) pair from pins/, the fail-to-pass check of the instance's own test
with the network cut (`unshare --net`), and the import of the verified instances as
bench cases (OUT/cases, readable by today's binary) plus a copy that names each case's
virtualenv (OUT/cases-env, `tests.python`).

`measure` (see measure.sh): gold and key-free bench runs, and localization ranks
(`reproagent localize` vs. plain BM25 from `reproagent search`), as a Markdown table.

Only the standard library is used; any python3 >= 3.8 runs this file. Nothing here
sends traffic anywhere but loopback, except pip talking to PyPI while building the
virtualenvs; every test run is in a network namespace of its own.
"""

import argparse
import concurrent.futures
import datetime
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PYENV = Path(os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv"))) / "versions"

T0 = time.time()


def log(msg):
    stamp = datetime.datetime.utcnow().strftime("%H:%M:%S")
    print(f"[{stamp} +{time.time() - T0:6.0f}s] {msg}", flush=True)


def die(msg, hint=None):
    print(f"error: {msg}" + (f" (hint: {hint})" if hint else ""), file=sys.stderr)
    sys.exit(2)


def run(cmd, cwd=None, env=None, timeout=None, check=True, capture=True):
    """Run a command; return (returncode, combined output)."""
    try:
        p = subprocess.run(cmd, cwd=cwd, env=env, timeout=timeout, stdout=subprocess.PIPE if capture else None,
                           stderr=subprocess.STDOUT if capture else None, text=True, errors="replace")
    except subprocess.TimeoutExpired as e:
        out = e.stdout or ""
        if isinstance(out, bytes):
            out = out.decode(errors="replace")
        return 124, out + f"\n[timed out after {timeout}s]\n"
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} exited {p.returncode}:\n{(p.stdout or '')[-3000:]}")
    return p.returncode, p.stdout or ""


def git(repo, *args, check=True):
    return run(["git", "-C", str(repo), *args], check=check)[1].strip()


# ---------------------------------------------------------------------------- instances

def load_instances(path):
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        die(f"cannot read instances {path}: {e}", "give the instances.json of the dev set")
    for inst in data:
        for key in ("FAIL_TO_PASS", "PASS_TO_PASS"):
            v = inst.get(key)
            if isinstance(v, str):
                inst[key] = json.loads(v) if v.strip() else []
    return data


def mirror_of(mirrors, repo):
    """The fetched git directory of `owner/name`: MIRRORS/owner+name/repo, else any
    MIRRORS/*+name/repo (django/django is fetched as adamchainz/django)."""
    owner, name = repo.split("/")
    exact = mirrors / f"{owner}+{name}" / "repo"
    if exact.is_dir():
        return exact
    for cand in sorted(mirrors.glob(f"*+{name}/repo")):
        if cand.is_dir():
            return cand
    return None


def version_key(v):
    return tuple(int(x) for x in re.findall(r"\d+", v or "0"))


def env_for(inst):
    """The (repository, Python) environment of an instance: the stem of its pins file.

    Django follows SWE-bench's choice of Python per release line (3.x: 3.6, 4.0: 3.8,
    4.1-4.2: 3.9, 5.x: 3.11: Django before 3.0 does not import on 3.10+, and 4.x needs
    3.8+); sympy runs on 3.9 (releases before 1.6 do not import on 3.10+); the others have
    one pins file each."""
    name = inst["repo"].split("/")[1]
    v = version_key(inst.get("version"))
    if name == "django":
        if v < (4, 0):
            return "django-py36"
        if v < (4, 1):
            return "django-py38"
        if v < (5, 0):
            return "django-py39"
        return "django-py311"
    return {
        "sympy": "sympy-py39",
        "pytest": "pytest-py39",
        "pylint": "pylint-py39",
        "xarray": "xarray-py310",
        "seaborn": "seaborn-py39",
        "flask": "flask-py311",
        "requests": "requests-py39",
    }[name]


def pins_python(pins_txt):
    """The interpreter a pins file names on its first line (`# python: Python 3.9.18`)."""
    first = pins_txt.read_text().splitlines()[0]
    m = re.match(r"#\s*python:\s*Python\s+([\d.]+)", first)
    if not m:
        die(f"{pins_txt}: the first line does not name the Python", "it should read `# python: Python X.Y.Z`")
    full = m.group(1)
    exe = PYENV / full / "bin" / "python"
    if not exe.exists():
        minor = ".".join(full.split(".")[:2])
        cands = sorted(PYENV.glob(f"{minor}.*/bin/python"))
        if not cands:
            die(f"no Python {minor} under {PYENV}", f"install it with `pyenv install {full}`")
        exe = cands[-1]
    return exe


def import_root(clone):
    """Where the project's package is imported from: src/ for src layouts, else the root."""
    src = clone / "src"
    if src.is_dir() and any((d / "__init__.py").exists() for d in src.iterdir() if d.is_dir()):
        return src
    return clone


# ---------------------------------------------------------------------------- build steps

def ensure_clone(mirror, dest, commit):
    """A clone of `mirror` at `commit` (detached), clean; made once, reset after."""
    if not (dest / ".git").exists():
        if dest.exists():
            shutil.rmtree(dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        run(["git", "clone", "-q", "--shared", "--no-checkout", str(mirror), str(dest)])
    head = git(dest, "rev-parse", "HEAD", check=False)
    if head != commit:
        git(dest, "checkout", "-q", "--force", "--detach", commit)
    git(dest, "reset", "-q", "--hard", commit)
    git(dest, "clean", "-q", "-fd")


# Runtime dependencies of an env's older instances that its pins (a freeze made at a newer
# commit) lack: pytest 4.6 imports six, atomicwrites and importlib_metadata, 5.x does not;
# pylint's older tests import `py._path`, which pytest 7's `py` shim does not have (the
# real `py` package, a directory, wins over the shim). Not for sympy: sympy 1.0's test
# helpers work only without the real `py`, 1.4's only with it (one of them is dropped).
EXTRAS = {
    "pytest-py39": ["six==1.17.0", "atomicwrites==1.4.1", "importlib_metadata==8.7.1", "zipp==3.23.1"],
    "pylint-py39": ["py==1.11.0"],
}
# Bumped when the way an env is installed changes, so build.sh rebuilds them.
RECIPE = "2"


def build_env(stem, insts, a):
    """One virtualenv per (repository, Python): OUT/venvs/<stem>, from pins/<stem>.txt
    (-c pins/<stem>.constraints when there is one). A `-e <clone>` line installs
    OUT/envsrc/<stem>, a clone of its own at the newest base commit of the env's
    instances, without its dependencies (the pins are a full freeze; an older instance's
    declared ranges may not admit them). The instance clones are imported first, from
    PYTHONPATH, when tests run."""
    txt = a.pins / f"{stem}.txt"
    if not txt.exists():
        die(f"no pins file {txt}", "pins/ holds <repo>-py<XY>.txt files")
    cons = a.pins / f"{stem}.constraints"
    python = pins_python(txt)
    venv = a.out / "venvs" / stem
    lines = []
    editable = None
    for line in txt.read_text().splitlines():
        if line.startswith("-e <clone>"):
            newest = max(insts, key=lambda i: i["created_at"])
            editable = a.out / "envsrc" / stem
            ensure_clone(mirror_of(a.mirrors, newest["repo"]), editable, newest["base_commit"])
        else:
            lines.append(line)
    lines += EXTRAS.get(stem, [])
    req = a.out / "venvs" / f"{stem}.requirements.txt"
    req.parent.mkdir(parents=True, exist_ok=True)
    req.write_text("\n".join(lines) + "\n")
    ident = f"{RECIPE}\n{python}\n{req.read_text()}\n{cons.read_text() if cons.exists() else ''}"
    if editable:
        ident += f"\n{editable}@{git(editable, 'rev-parse', 'HEAD')}"
    digest = hashlib.sha256(ident.encode()).hexdigest()
    stamp = venv / ".devset-built"
    if stamp.exists() and stamp.read_text().strip() == digest and (venv / "bin" / "python").exists():
        log(f"env {stem}: up to date ({python})")
        return venv
    log(f"env {stem}: creating with {python}")
    if venv.exists():
        shutil.rmtree(venv)
    run([str(python), "-m", "venv", str(venv)])
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-input"]
    (a.out / "logs").mkdir(parents=True, exist_ok=True)
    logf = a.out / "logs" / f"env-{stem}.log"
    steps = [pip + ["-r", str(req)] + (["-c", str(cons)] if cons.exists() else [])]
    if editable:
        # With its dependencies (the pins as constraints); if the project's own ranges
        # do not admit the pins, without them.
        steps.append(pip + ["-e", str(editable), "-c", str(req)] + (["-c", str(cons)] if cons.exists() else []))
    text = ""
    for i, cmd in enumerate(steps):
        rc, out = run(cmd, check=False, timeout=1800)
        text += " ".join(cmd) + "\n" + out + "\n"
        if rc != 0 and i == 1:
            cmd = pip + ["--no-deps", "-e", str(editable)]
            log(f"env {stem}: the editable install's dependencies conflict with the pins; installing it without them")
            rc, out = run(cmd, check=False, timeout=1800)
            text += " ".join(cmd) + "\n" + out + "\n"
        logf.write_text(text)
        if rc != 0:
            raise RuntimeError(f"env {stem}: pip install failed (see {logf}):\n{out[-2000:]}")
    # pytest for the non-Django runners, when the pins do not bring it.
    if not stem.startswith("django"):
        rc, _ = run([str(venv / "bin" / "python"), "-c", "import pytest"], check=False)
        if rc != 0:
            run(pip + ["pytest<8"], timeout=900)
    _, out = run([str(venv / "bin" / "python"), "-m", "pip", "check"], check=False)
    logf.write_text(text + "pip check:\n" + out)
    stamp.write_text(digest + "\n")
    log(f"env {stem}: built")
    return venv


# ---------------------------------------------------------------------------- verification

def apply_patch(clone, text, name):
    p = subprocess.run(["git", "-C", str(clone), "apply", "-p1", "--whitespace=nowarn", "-"], input=text, text=True,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if p.returncode != 0:
        raise RuntimeError(f"{name} does not apply: {p.stdout.strip()}")


def patch_files(diff):
    return sorted(set(re.findall(r"^\+\+\+ b/(\S+)", diff, re.M)))


def django_label(t):
    """`test_name (module.Class)` -> `module.Class.test_name`."""
    m = re.match(r"^(\S+) \(([\w.]+)\)$", t.strip())
    if not m:
        return None
    name, cls = m.groups()
    return cls if cls.endswith("." + name) else f"{cls}.{name}"


def pytest_ids(inst, clone):
    """Pytest node ids of FAIL_TO_PASS: given as ids (`path::name`), or as bare test
    names (sympy), found in the files the test patch touches."""
    ids = []
    files = [f for f in patch_files(inst["test_patch"]) if f.endswith(".py")]
    for t in inst["FAIL_TO_PASS"]:
        if "::" in t:
            ids.append(t)
            continue
        name = t.split("[")[0]
        hits = [f for f in files if re.search(rf"^\s*def {re.escape(name)}\(", (clone / f).read_text(errors="replace"), re.M)]
        if not hits:
            raise RuntimeError(f"test {t} is in none of the test patch's files ({', '.join(files)})")
        ids += [f"{f}::{t}" for f in hits]
    return ids


def netcut(cmd):
    """The command in a network namespace of its own, with only loopback up."""
    if os.geteuid() != 0 and not a.localize_only:
        die("cutting the network needs root (unshare --net)", "run build.sh as root")
    return ["unshare", "--net", "sh", "-c", 'ip link set lo up && exec "$@"', "netcut", *cmd]


def test_env(venv, clone):
    env = dict(os.environ)
    for k in ("PYTHONHOME", "PYTHONSTARTUP", "PYENV_VERSION"):
        env.pop(k, None)
    env["VIRTUAL_ENV"] = str(venv)
    env["PATH"] = f"{venv}/bin:{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(import_root(clone))
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def run_tests(inst, clone, venv, timeout):
    """Run the FAIL_TO_PASS tests; return (status per test: passed/failed/missing, command, output)."""
    py = str(venv / "bin" / "python")
    env = test_env(venv, clone)
    if inst["repo"] == "django/django":
        labels = {}
        for t in inst["FAIL_TO_PASS"]:
            lab = django_label(t)
            if not lab:
                raise RuntimeError(f"FAIL_TO_PASS entry {t!r} is not `test_name (module.Class)`")
            labels[t] = lab
        cmd = [py, "runtests.py", "--settings=test_sqlite", "--parallel", "1", "--verbosity", "2", *labels.values()]
        rc, out = run(netcut(cmd), cwd=clone / "tests", env=env, timeout=timeout, check=False)
        status = {}
        for t, lab in labels.items():
            name, cls = lab.rsplit(".", 1)[1], lab.rsplit(".", 1)[0]
            hdr = rf"^{re.escape(name)} \({re.escape(cls)}(?:\.{re.escape(name)})?\)"
            m = re.search(hdr + r"(?:\n[^\n]*?)?(?: \.\.\.|\n\S.*? \.\.\.) (ok|FAIL|ERROR|skipped|expected failure|unexpected success)", out, re.M)
            failed_in_summary = re.search(rf"^(FAIL|ERROR): {re.escape(name)} \({re.escape(cls)}", out, re.M)
            if failed_in_summary:
                status[t] = "failed"
            elif m:
                status[t] = "passed" if m.group(1) == "ok" else "failed"
            else:
                status[t] = "missing"
        return status, cmd, out
    ids = pytest_ids(inst, clone)
    cmd = [py, "-m", "pytest", "-rA", "-p", "no:cacheprovider", *ids]
    rc, out = run(netcut(cmd), cwd=clone, env=env, timeout=timeout, check=False)
    status = {}
    for t in inst["FAIL_TO_PASS"]:
        mine = [i for i in ids if i == t or i.endswith("::" + t)]
        res = []
        for i in mine:
            m = re.search(rf"^(PASSED|FAILED|ERROR|XFAIL|XPASS|SKIPPED) {re.escape(i)}(?: |$)", out, re.M)
            res.append(m.group(1) if m else None)
        if res and all(r == "PASSED" for r in res):
            status[t] = "passed"
        elif any(r is not None for r in res) or rc != 0:
            status[t] = "failed"
        else:
            status[t] = "missing"
    return status, cmd, out


def generated_files(envsrc, clone):
    """Copy the files an editable install generated (setuptools_scm's `_version.py`,
    ignored by git) from the env's own clone into an instance clone that lacks them:
    the instance's package is imported from its clone, and pytest 5.x imports
    `_pytest._version`. Returns the paths copied (removed again after the check)."""
    if not envsrc or not (envsrc / ".git").exists():
        return []
    out = git(envsrc, "ls-files", "--others", "--ignored", "--exclude-standard", check=False)
    copied = []
    for rel in out.splitlines():
        if rel.endswith("_version.py") and "/site-packages/" not in rel and (clone / Path(rel).parent).is_dir() and not (clone / rel).exists():
            shutil.copy2(envsrc / rel, clone / rel)
            copied.append(rel)
    return copied


def verify(inst, a, venv):
    """At base + test_patch the FAIL_TO_PASS tests fail; with the fix too they pass.
    Runs in the instance's clone, which is reset to base_commit afterwards."""
    iid = inst["instance_id"]
    clone = a.out / "repos" / iid
    logs = a.out / "logs"
    result = {"instance_id": iid, "env": None, "verified": False, "reason": None}
    generated = []
    try:
        generated = generated_files(a.out / "envsrc" / env_for(inst), clone)
        apply_patch(clone, inst["test_patch"], "test_patch")
        t = time.time()
        before, cmd, out = run_tests(inst, clone, venv, a.timeout)
        (logs / f"{iid}.before.log").write_text(shlex.join(cmd) + "\n\n" + out)
        apply_patch(clone, inst["patch"], "patch")
        after, _, out2 = run_tests(inst, clone, venv, a.timeout)
        (logs / f"{iid}.after.log").write_text(shlex.join(cmd) + "\n\n" + out2)
        result.update(before=before, after=after, secs=round(time.time() - t, 1), command=shlex.join(cmd))
        bad_before = [k for k, v in before.items() if v == "passed"]
        bad_after = [k for k, v in after.items() if v != "passed"]
        if bad_before:
            result["reason"] = f"passes before the fix: {', '.join(bad_before)}"
        elif bad_after:
            result["reason"] = "does not pass with the fix: " + ", ".join(f"{k} ({after[k]})" for k in bad_after)
            first = re.search(r"^(?:E\s+)?((?:\w+\.)*\w*(?:Error|Exception)\b.*)$", out2, re.M)
            if first:
                result["reason"] += f": {first.group(1).strip()[:160]}"
        else:
            result["verified"] = True
    except (RuntimeError, OSError) as e:
        result["reason"] = str(e).splitlines()[0][:300]
    finally:
        git(clone, "reset", "-q", "--hard", inst["base_commit"], check=False)
        git(clone, "clean", "-q", "-fd", check=False)
        for rel in generated:
            (clone / rel).unlink(missing_ok=True)
    return result


# ---------------------------------------------------------------------------- import

def import_cases(insts, results, a):
    """Import each verified instance against its own clone into OUT/cases (for today's
    binary), then copy to OUT/cases-env with `tests.python` and `tests.timeout_secs`."""
    cases = a.out / "cases"
    cases_env = a.out / "cases-env"
    cases.mkdir(parents=True, exist_ok=True)
    imported = []
    for inst in insts:
        iid = inst["instance_id"]
        r = results.get(iid, {})
        if not r.get("verified"):
            shutil.rmtree(cases / iid, ignore_errors=True)
            shutil.rmtree(cases_env / iid, ignore_errors=True)
            continue
        err = import_one(inst, a, cases)
        if err:
            r["imported"] = False
            r["import_error"] = err
            log(f"import {iid}: FAILED: {err}")
            continue
        r["imported"] = True
        imported.append(iid)
        case = json.loads((cases / iid / "case.json").read_text())
        case.setdefault("tests", {})
        case["tests"]["timeout_secs"] = a.case_timeout
        (cases / iid / "case.json").write_text(json.dumps(case, indent=2) + "\n")
        env_dir = cases_env / iid
        shutil.rmtree(env_dir, ignore_errors=True)
        shutil.copytree(cases / iid, env_dir)
        case["tests"]["python"] = str(a.out / "venvs" / r["env"] / "bin" / "python")
        (env_dir / "case.json").write_text(json.dumps(case, indent=2) + "\n")
        log(f"import {iid}: ok")
    # Cases of instances no longer in the set or no longer verified are gone already.
    return imported


def import_one(inst, a, cases):
    """`reproagent bench import` of one instance against its clone, into cases/ID.
    Returns the error, or None."""
    iid = inst["instance_id"]
    single = a.out / "instances"
    single.mkdir(parents=True, exist_ok=True)
    f = single / f"{iid}.json"
    f.write_text(json.dumps([inst], indent=1))
    tmp = a.out / "import-tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    rc, out = run([str(a.bin), "bench", "import", str(f), "--checkout", str(a.out / "repos" / iid), "--out", str(tmp)], check=False)
    if rc != 0 or not (tmp / iid / "case.json").exists():
        shutil.rmtree(tmp, ignore_errors=True)
        return out.strip().splitlines()[-1] if out.strip() else f"exit {rc}"
    shutil.rmtree(cases / iid, ignore_errors=True)
    shutil.move(str(tmp / iid), str(cases / iid))
    shutil.rmtree(tmp, ignore_errors=True)
    return None


def import_for_localize(insts, a):
    """Every instance's case, checked or not, into OUT/cases-localize: what
    `reproagent bench localize` needs (the issue, the gold patch, the tree)."""
    cases = a.out / "cases-localize"
    cases.mkdir(parents=True, exist_ok=True)
    n = 0
    for inst in insts:
        err = import_one(inst, a, cases)
        log(f"import {inst['instance_id']}: " + (f"FAILED: {err}" if err else "ok"))
        n += err is None
    return n


def build(argv):
    ap = argparse.ArgumentParser(prog="build.sh", description="Build the dev set: clones, virtualenvs, checks, cases.")
    ap.add_argument("--mirrors", type=Path, default=Path(os.environ.get("DEVSET_MIRRORS", "/work/.mirror")))
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("DEVSET_OUT", "/work/devset")))
    ap.add_argument("--instances", type=Path, default=Path(os.environ.get("DEVSET_INSTANCES", "/work/shared/devset/instances.json")))
    ap.add_argument("--pins", type=Path, default=Path(os.environ.get("DEVSET_PINS", "/work/shared/devset/pins")))
    ap.add_argument("--bin", type=Path, default=Path(os.environ.get("REPROAGENT", "/work/main/target/release/reproagent")))
    ap.add_argument("--jobs", "-j", type=int, default=2, help="instances checked at once")
    ap.add_argument("--timeout", type=int, default=900, help="seconds one check run may take")
    ap.add_argument("--case-timeout", type=int, default=600, help="tests.timeout_secs written into each case")
    ap.add_argument("--only", nargs="*", default=None, help="only these instance ids")
    ap.add_argument("--skip-import", action="store_true", help="stop after the checks")
    ap.add_argument(
        "--localize-only",
        action="store_true",
        help="clones and cases for `reproagent bench localize` only, in OUT/cases-localize: no virtualenvs, no checks, no root",
    )
    a = ap.parse_args(argv)
    a.out = a.out.resolve()
    a.mirrors = a.mirrors.resolve()
    if not a.mirrors.is_dir():
        die(f"{a.mirrors} is not a directory", "give --mirrors DIR holding owner+name/repo git directories (fetched)")
    if os.geteuid() != 0:
        die("the checks run with the network cut (unshare --net), which needs root", "run build.sh as root")
    if not a.skip_import and not os.access(a.bin, os.X_OK):
        die(f"{a.bin} is not an executable reproagent", "build it (cargo build --release) or give --bin / REPROAGENT")
    insts = all_insts = load_instances(a.instances)
    if a.only:
        insts = [i for i in insts if i["instance_id"] in a.only]
    (a.out / "logs").mkdir(parents=True, exist_ok=True)
    log(f"{len(insts)} instances from {a.instances}; output in {a.out}")

    # 1. clones
    for inst in insts:
        mirror = mirror_of(a.mirrors, inst["repo"])
        if mirror is None:
            die(f"no fetched git directory for {inst['repo']} under {a.mirrors}", f"fetch github:{inst['repo']}")
        ensure_clone(mirror, a.out / "repos" / inst["instance_id"], inst["base_commit"])
    log(f"step 1/4 clones: {len(insts)} at their base commits under {a.out}/repos")
    if a.localize_only:
        n = import_for_localize(insts, a)
        log(f"cases for localization: {n} of {len(insts)} in {a.out}/cases-localize "
            f"(then: {a.bin} bench localize {a.out}/cases-localize)")
        return

    # 2. environments
    by_env = {}
    for inst in insts:
        by_env.setdefault(env_for(inst), []).append(inst)
    venvs = {}
    for stem, group in sorted(by_env.items()):
        venvs[stem] = build_env(stem, group, a)
    log(f"step 2/4 environments: {', '.join(sorted(venvs))}")

    # 3. checks, network cut
    results = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        futs = {pool.submit(verify, inst, a, venvs[env_for(inst)]): inst for inst in insts}
        for fut in concurrent.futures.as_completed(futs):
            inst = futs[fut]
            r = fut.result()
            r["env"] = env_for(inst)
            results[inst["instance_id"]] = r
            log(f"check {inst['instance_id']} ({r['env']}): {'verified' if r['verified'] else 'DROPPED: ' + str(r['reason'])}")
    ok = sum(r["verified"] for r in results.values())
    log(f"step 3/4 checks: {ok} of {len(insts)} verified")

    # 4. import
    if not a.skip_import:
        imported = import_cases(insts, results, a)
        log(f"step 4/4 import: {len(imported)} cases in {a.out}/cases (and cases-env with tests.python)")
    path = a.out / "verify.json"
    old = json.loads(path.read_text()) if path.exists() else {}
    old.update(results)
    path.write_text(json.dumps(old, indent=1, sort_keys=True) + "\n")
    write_verify_table(old, all_insts, a.out / "verify.md")
    log(f"done: {path}, {a.out}/verify.md")


def write_verify_table(results, insts, path):
    rows = ["| instance | env | check | seconds |", "|---|---|---|---|"]
    for inst in insts:
        r = results.get(inst["instance_id"])
        if not r:
            continue
        check = "verified" if r["verified"] else f"dropped: {r['reason']}"
        rows.append(f"| {inst['instance_id']} | {r['env']} | {check} | {r.get('secs', '')} |")
    path.write_text("\n".join(rows) + "\n")


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in ("build", "measure"):
        die("usage: devset.py build|measure ...", "see the docstring at the top of devset.py")
    if sys.argv[1] == "build":
        build(sys.argv[2:])
    else:
        import measure  # noqa: E402  (benches/devset/measure.py)
        measure.main(sys.argv[2:])


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    main()
