"""Check reproagent's call edges against jedi (an independent resolver).

Usage: oracle.py ROOT EDGES.json SITES.json ENTITIES.json INHERITS.json [--sample N] [--recall N] [--seed S]

ROOT is an indexed source tree; the JSON files are `reproagent query --json` dumps (see
run.sh). For a sample of each edge class (`how`), the call site's name on the caller's
line is looked up with jedi `goto` (`infer` when goto does not land in the project: on a
variable, or in the django-stubs jedi ships). The edge is right when jedi lands on the
callee (a class call may land on the class or its `__init__`; an instance's call on its
`__call__`; a stub on the project's entity of the same qualified name), wrong when jedi
lands elsewhere (another entity, the standard library), and unknown when jedi finds
nothing or only a stub with no such entity.
Recall: a sample of call sites that jedi resolves into the project, and the share that
have an edge of confidence >= 0.5 to jedi's target. Prints one JSON object.
"""

import hashlib
import json
import os
import re
import sys
from collections import defaultdict

import jedi


def load(path):
    with open(path) as f:
        d = json.load(f)
    return [dict(zip(d["headers"], r)) for r in d["rows"]]


def main():
    args = sys.argv[1:]
    opts = {"--sample": 300, "--recall": 300, "--seed": 12}
    pos = []
    i = 0
    while i < len(args):
        if args[i] in opts:
            opts[args[i]] = int(args[i + 1])
            i += 2
        else:
            pos.append(args[i])
            i += 1
    root, edges_p, sites_p, ents_p, inh_p = pos
    root = os.path.abspath(root)
    edges = load(edges_p)
    sites = load(sites_p)
    ents = load(ents_p)
    seed = str(opts["--seed"])

    def rank(*key):
        # Samples are drawn by a hash of the item and the seed, not from one random stream:
        # two builds are judged on the same edges and call sites wherever they share them.
        return hashlib.blake2b("\0".join([seed, *map(str, key)]).encode(), digest_size=8).digest()

    ent = {e["id"]: e for e in ents}
    # qualified name -> entity ids, for jedi landings in its bundled stubs (django-stubs):
    # a stub of `django.db.models.query.QuerySet.annotate` stands for the project's.
    by_qname = defaultdict(list)
    for e in ents:
        if ":" not in e["id"]:
            continue
        path, chain = e["id"].split(":", 1)
        mod = path[:-3] if path.endswith(".py") else path
        mod = mod[: -len("/__init__")] if mod.endswith("/__init__") else mod
        mod = mod.replace("/", ".")
        chain = chain.split("#")[0]
        for m in {mod, mod[4:] if mod.startswith(("src.", "lib.")) else mod}:
            by_qname[m + "." + chain].append(e["id"])
    bases = defaultdict(list)
    for r in load(inh_p):
        if r["base"]:
            bases[r["child"]].append(r["base"])

    def ancestors(c):
        seen, todo = [], [c]
        while todo:
            x = todo.pop(0)
            if x in seen or len(seen) > 50:
                continue
            seen.append(x)
            todo.extend(bases.get(x, []))
        return seen
    by_pos = defaultdict(list)  # (file, start_line) -> entities
    for e in ents:
        by_pos[(e["file"], e["start_line"])].append(e)
    children = defaultdict(list)
    for e in ents:
        if ":" in e["id"]:
            parent = e["id"].rsplit(".", 1)[0] if "." in e["id"].split(":", 1)[1] else e["file"]
            children[parent].append(e)

    extra = [root] + [os.path.join(root, d) for d in ("src", "lib") if os.path.isdir(os.path.join(root, d))]
    project = jedi.Project(path=root, added_sys_path=extra, smart_sys_path=False)
    scripts = {}
    texts = {}

    def script(rel):
        if rel not in scripts:
            p = os.path.join(root, rel)
            with open(p, encoding="utf-8", errors="replace") as f:
                texts[rel] = f.read().split("\n")
            scripts[rel] = jedi.Script(code="\n".join(texts[rel]), path=p, project=project)
        return scripts[rel]

    def project_entities(names):
        """jedi names -> set of project entity ids (None when outside the project)."""
        out = set()
        outside = False
        for n in names:
            mp = n.module_path
            if mp is None or n.line is None:
                outside = True
                continue
            mp = str(mp)
            if not mp.startswith(root + os.sep):
                if mp.endswith(".pyi"):
                    # a stub: the project's entity of that qualified name, else unknown
                    for i in by_qname.get(n.full_name or "", []):
                        out.add(("inst:" if n.type == "instance" else "") + i)
                else:
                    outside = True
                continue
            rel = os.path.relpath(mp, root)
            found = [e for e in by_pos.get((rel, n.line), []) if e["name"] == n.name]
            if found:
                for e in found:
                    # an instance called stands for its class's __call__
                    out.add(("inst:" if n.type == "instance" else "") + e["id"])
            else:
                outside = True  # a variable, parameter, attribute: not an entity
        return out, outside

    def jedi_targets(rel, line, name):
        """Entities jedi resolves the call `name(` on this line to; (set, resolved?)."""
        s = script(rel)
        text = texts[rel][line - 1] if line - 1 < len(texts[rel]) else ""
        cols = [m.start() for m in re.finditer(r"\b%s\s*\(" % re.escape(name), text)]
        if not cols:
            cols = [m.start() for m in re.finditer(r"\b%s\b" % re.escape(name), text)]
        targets = set()
        any_answer = False
        for c in cols[:3]:
            try:
                # goto names the definition (decorators do not change it); a name bound by
                # assignment or a parameter is followed by infer.
                # goto may land in a stub (jedi ships django-stubs) where infer finds the
                # source: goto when it lands in the project, else infer, else goto.
                got = [g for g in s.goto(line, c, follow_imports=True) if g.type in ("function", "class")]
                inside = [g for g in got if g.module_path and str(g.module_path).startswith(root + os.sep)]
                if not inside:
                    inferred = s.infer(line, c)
                    got = inferred or got
            except Exception:
                continue
            t, outside = project_entities(got)
            if got or t:
                any_answer = True
            targets |= t
            if outside and not t:
                targets.add("<outside>")
        return targets, any_answer

    def expand(targets):
        """A class target also stands for its __init__ (and the other way round)."""
        out = set()
        for t in targets:
            if t.startswith("inst:"):
                for a in ancestors(t[5:]):
                    out.add(a + ".__call__")
                continue
            out.add(t)
            e = ent.get(t)
            if e and e["kind"] == "class":
                for a in ancestors(t):
                    for c in children.get(a, []):
                        if c["name"] in ("__init__", "__new__"):
                            out.add(c["id"])
        return out

    # Precision per edge class.
    by_how = defaultdict(list)
    for e in edges:
        by_how[e["how"]].append(e)
    site_names = defaultdict(set)
    for s_ in sites:
        site_names[(s_["caller"], s_["line"])].add(s_["name"])
    prec = {}
    wrong_examples = defaultdict(list)
    total_edges = len(edges)
    for how, es in sorted(by_how.items()):
        sample = sorted(es, key=lambda e: rank(e["caller"], e["callee"], e["line"]))[: opts["--sample"]]
        right = wrong = unknown = 0
        for e in sample:
            caller = ent.get(e["caller"])
            callee = ent.get(e["callee"])
            if not caller or not callee:
                unknown += 1
                continue
            names = site_names.get((e["caller"], e["line"]), set())
            cname = callee["name"]
            if cname in ("__init__", "__new__", "__call__"):
                cands = sorted(names)
            else:
                cands = [cname] if cname in names else sorted(names)
            targets = set()
            answered = False
            for n in cands:
                t, a = jedi_targets(caller["file"], e["line"], n)
                if a:
                    answered = True
                    targets |= t
            if not answered or not targets:
                unknown += 1
                continue
            ok = e["callee"] in expand(targets - {"<outside>"})
            if ok:
                right += 1
            else:
                wrong += 1
                if len(wrong_examples[how]) < 8:
                    wrong_examples[how].append(
                        {"caller": e["caller"], "line": e["line"], "callee": e["callee"], "jedi": sorted(targets)[:3]}
                    )
        prec[how] = {
            "edges": len(es),
            "share": round(len(es) / max(total_edges, 1), 3),
            "sampled": len(sample),
            "right": right,
            "wrong": wrong,
            "unknown": unknown,
            "precision": round(right / max(right + wrong, 1), 4),
        }

    # Recall on call sites jedi resolves into the project.
    out_edges = defaultdict(set)
    for e in edges:
        if e["confidence"] >= 0.5:
            out_edges[(e["caller"], e["line"])].add(e["callee"])
    order = sorted(range(len(sites)), key=lambda i: rank(sites[i]["caller"], sites[i]["line"], sites[i]["name"]))
    considered = hit = 0
    misses = []
    for i in order:
        if considered >= opts["--recall"]:
            break
        s_ = sites[i]
        caller = ent.get(s_["caller"])
        if not caller:
            continue
        t, a = jedi_targets(caller["file"], s_["line"], s_["name"])
        t.discard("<outside>")
        if not t:
            continue
        considered += 1
        got = out_edges.get((s_["caller"], s_["line"]), set())
        if got & expand(t):
            hit += 1
        elif len(misses) < 60:
            misses.append({"caller": s_["caller"], "line": s_["line"], "name": s_["name"],
                           "receiver": s_["receiver"], "jedi": sorted(t)[:2]})
    allr = sum(p["right"] for p in prec.values())
    allw = sum(p["wrong"] for p in prec.values())
    # all classes together, weighted by each class's share of the edges
    weighted = sum(p["precision"] * p["share"] for p in prec.values())
    print(json.dumps({
        "edges": total_edges,
        "precision": prec,
        "precision_all_sampled": round(allr / max(allr + allw, 1), 4),
        "precision_all_weighted": round(weighted, 4),
        "recall": {"sites": considered, "hit": hit, "recall": round(hit / max(considered, 1), 4)},
        "wrong_examples": wrong_examples,
        "recall_misses": misses,
    }, indent=1))


if __name__ == "__main__":
    main()
