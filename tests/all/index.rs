//! `index`: incremental equals full, thread-count invariance, bad input reported and
//! skipped, interrupted runs and foreign or old indices.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use reproagent::extract::Limits;
use reproagent::index::{self, Options};
use reproagent::store::{self, StoreError};

use crate::common::*;

/// A repository with all three fixture projects side by side.
fn multi_language_repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (lang, p) in [("python", "shop"), ("typescript", "tasks"), ("java", "bank")] {
        let to = dir.path().join(p);
        std::fs::create_dir_all(&to).unwrap();
        copy_into(&fixture(&format!("{lang}/{p}")), &to);
    }
    dir
}

fn edit(root: &Path, rel: &str, f: impl FnOnce(String) -> String) {
    let p = root.join(rel);
    let s = std::fs::read_to_string(&p).unwrap();
    std::fs::write(&p, f(s)).unwrap();
}

#[test]
fn incremental_update_equals_a_fresh_index() {
    let repo = multi_language_repo();
    let root = repo.path();
    let first = index_with(root, 2, false);
    assert_eq!(first.mode, "full");
    let before = dump_all(root);

    // Edit: a new call in an existing function (changes edges of other files too).
    edit(root, "shop/core/pricing.py", |s| {
        s.replace("def round_money(", "def extra_helper():\n    return round_money(1)\n\n\ndef round_money(")
    });
    // Add a file that calls into the repo and defines a name others fall back to.
    std::fs::write(root.join("shop/core/audit.py"), "from .pricing import round_money\n\n\ndef audit(x):\n    return round_money(x)\n\n\nclass Ledger:\n    def describe(self):\n        return audit(1)\n").unwrap();
    // Delete a file others import from.
    std::fs::remove_file(root.join("shop/core/errors.py")).unwrap();
    // Rename a TypeScript module (its importers now miss it) and a Java class file.
    std::fs::rename(root.join("tasks/src/util/dates.ts"), root.join("tasks/src/util/time.ts")).unwrap();
    let java_dir = root.join("bank/src/main/java/com/acme/bank/util");
    std::fs::rename(java_dir.join("AuditLog.java"), java_dir.join("AuditLogRenamed.java")).unwrap();
    // Touch a Java file without changing what it defines: parsed again, no row changes.
    edit(root, "bank/src/main/java/com/acme/bank/model/Money.java", |s| s + "\n// touched\n");

    let second = index_with(root, 2, false);
    assert_eq!(second.mode, "incremental");
    assert_eq!(second.parsed, 5, "only added, changed and renamed files are parsed: {second:?}");
    assert_eq!(second.removed, 3);
    assert!(second.rows_written > 0);
    let incremental = dump_all(root);
    assert_ne!(before, incremental, "the edits must show in the graph");

    // A fresh index of the same tree, elsewhere.
    let fresh = tempfile::tempdir().unwrap();
    copy_into(root, fresh.path());
    index_with(fresh.path(), 2, true);
    let full = dump_all(fresh.path());
    let missing: Vec<_> = full.difference(&incremental).take(20).collect();
    let extra: Vec<_> = incremental.difference(&full).take(20).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "incremental differs from full\nmissing: {missing:#?}\nextra: {extra:#?}"
    );

    // Nothing changed: nothing parsed, nothing written.
    let third = index_with(root, 2, false);
    assert_eq!((third.mode.as_str(), third.parsed, third.rows_written), ("unchanged", 0, 0));
}

#[test]
fn one_thread_and_many_give_identical_relations() {
    let a = multi_language_repo();
    let b = tempfile::tempdir().unwrap();
    copy_into(a.path(), b.path());
    index_with(a.path(), 1, true);
    index_with(b.path(), 8, true);
    let (da, db) = (dump_all(a.path()), dump_all(b.path()));
    assert!(da.len() > 1000, "the repo is big enough to interleave: {} rows", da.len());
    assert_eq!(da, db);
}

#[test]
fn bad_input_is_reported_and_skipped() {
    let repo = tempfile::tempdir().unwrap();
    let root = repo.path();
    // Copy the committed evil files, symlinks included.
    let src = fixture("evil");
    for e in std::fs::read_dir(&src).unwrap() {
        let e = e.unwrap();
        let to = root.join(e.file_name());
        let meta = std::fs::symlink_metadata(e.path()).unwrap();
        if meta.file_type().is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(e.path()).unwrap(), &to).unwrap();
        } else if meta.is_dir() {
            std::fs::create_dir(&to).unwrap();
            for inner in std::fs::read_dir(e.path()).unwrap() {
                let inner = inner.unwrap();
                std::os::unix::fs::symlink(std::fs::read_link(inner.path()).unwrap(), to.join(inner.file_name()))
                    .unwrap();
            }
        } else {
            std::fs::copy(e.path(), &to).unwrap();
        }
    }
    // Made here: a huge generated file, a slow one, a FIFO, an unreadable file.
    let huge: String = (0..120_000).map(|i| format!("value_{i} = {i}\n")).collect();
    assert!(huge.len() > 2 * 1024 * 1024);
    std::fs::write(root.join("generated_huge.py"), &huge).unwrap();
    let slow: String = (0..40_000).map(|i| format!("def f{i}(a, b):\n    return g(a, b) + {i}\n")).collect();
    std::fs::write(root.join("slow.py"), &slow).unwrap();
    let fifo = root.join("pipe.py");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let is_root = unsafe { libc::geteuid() } == 0;
    if !is_root {
        let p = root.join("secret.py");
        std::fs::write(&p, "x = 1\n").unwrap();
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o000)).unwrap();
    }

    let mut opts = Options::new(root);
    opts.threads = Some(2);
    // The slow file is well under the size limit but takes longer than 1 ms to parse.
    opts.limits = Limits { max_bytes: 2 * 1024 * 1024, max_parse_time: Duration::from_millis(1), ..Limits::default() };
    let s = index::run(&opts).unwrap();
    let reason = |path: &str| -> String {
        s.skipped
            .iter()
            .find(|k| k.path == path)
            .map(|k| k.reason.clone())
            .unwrap_or_else(|| panic!("{path} not reported: {:#?}", s.skipped))
    };
    assert!(reason("generated_huge.py").starts_with("too large"));
    assert!(reason("slow.py").starts_with("parse time budget exceeded"));
    assert!(reason("latin1.py").starts_with("not UTF-8"));
    assert!(reason("archive.py").starts_with("binary"));
    assert!(reason("dangling.py").contains("broken symlink"));
    assert!(reason("loop/back").starts_with("symlink loop"));
    assert_eq!(reason("pipe.py"), "not a regular file (FIFO)");
    if !is_root {
        assert!(reason("secret.py").starts_with("unreadable"));
    }
    // The good file and the partial tree of the broken one are indexed.
    assert_eq!(s.files, 2, "{s:?}");
    assert_eq!(s.files_with_syntax_errors, 1);
    let rows = dump_expected_format(root);
    // Files skipped for their content are not retried as changes: the next run is a no-op.
    let again = index::run(&opts).unwrap();
    assert_eq!((again.mode.as_str(), again.parsed), ("unchanged", 0), "{again:?}");
    for want in [
        "entity good.py:healthy function",
        "entity syntax_error.py:before function",
        "entity syntax_error.py:After.method method",
        "calls good.py:healthy good.py:helper 5 local",
    ] {
        assert!(rows.contains(want), "{want} missing from {rows:#?}");
    }
}

#[test]
fn a_missing_root_is_a_clear_error() {
    let e = index::run(&Options::new("/nonexistent/repo")).unwrap_err();
    assert_eq!(e.to_string(), "/nonexistent/repo: no such directory");
    assert!(e.hint().is_some());
}

fn set_meta(root: &Path, key: &str, value: &str) {
    store::open(&store::db_path(root)).unwrap().put_meta(key, value).unwrap();
}

#[test]
fn an_index_of_another_format_is_refused_by_readers_and_rebuilt_by_index() {
    let dir = copy_tree(&fixture("python/shop"));
    let root = dir.path();
    index_with(root, 2, false);
    let before = dump_all(root);
    set_meta(root, "format_version", "0");
    match store::open(&store::db_path(root)) {
        Err(StoreError::Version { found, .. }) => assert_eq!(found, "0"),
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("an old index was opened"),
    }
    let out = Command::new(env!("CARGO_BIN_EXE_reproagent"))
        .args(["query", "?[p] := *file{path: p}", "-C"])
        .arg(root)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("format version 0") && err.contains("hint: run `reproagent index`"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");

    let s = index_with(root, 2, false);
    assert_eq!(s.mode, "full");
    assert!(s.rebuilt_because.unwrap().contains("format version 0"));
    assert_eq!(dump_all(root), before);
}

#[test]
fn a_foreign_file_in_place_of_the_index_is_rebuilt() {
    let dir = copy_tree(&fixture("python/shop"));
    let root = dir.path();
    std::fs::create_dir_all(root.join(".reproagent")).unwrap();
    std::fs::write(store::db_path(root), "this is not a database").unwrap();
    assert!(matches!(store::open(&store::db_path(root)), Err(StoreError::Foreign(_))));
    let s = index_with(root, 2, false);
    assert_eq!(s.mode, "full");
    assert!(s.rebuilt_because.is_some());
    assert!(store::open(&store::db_path(root)).is_ok());
}

#[test]
fn an_interrupted_index_leaves_the_previous_one_usable() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::write(root.join("seed.py"), "def seed():\n    return 1\n").unwrap();
    index_with(root, 2, false);
    let before = dump_all(root);
    // Enough code that a debug build takes a while to index it.
    for d in 0..40 {
        let pkg = root.join(format!("pkg{d}"));
        std::fs::create_dir_all(&pkg).unwrap();
        std::fs::write(pkg.join("__init__.py"), "").unwrap();
        for f in 0..40 {
            let body: String =
                (0..60).map(|i| format!("def f{i}(x):\n    return seed() + f{}(x)\n\n", (i + 1) % 60)).collect();
            std::fs::write(pkg.join(format!("m{f}.py")), format!("from seed import seed\n\n{body}")).unwrap();
        }
    }
    for attempt in [150u64, 600, 1500] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_reproagent"))
            .args(["index", "--full", "-q"])
            .arg(root)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(attempt));
        let _ = child.kill();
        let status = child.wait().unwrap();
        // Whether the kill landed before or after the new index was in place, what is
        // there opens and is complete: the old index or the new one, never a mix.
        let now = dump_all(root);
        if status.success() {
            assert!(now.len() > before.len());
            break;
        }
        assert_eq!(now, before, "killed after {attempt} ms: the previous index changed");
    }
    // And the next run completes.
    let s = index_with(root, 2, false);
    assert_eq!(s.files, 1 + 40 * 41);
}

/// Index `root` incrementally and check every relation against a fresh full index of
/// the same tree.
fn check_incremental(root: &Path, step: &str) {
    let s = index_with(root, 2, false);
    assert_ne!(s.mode, "full", "{step}: the run must be incremental");
    let incremental = dump_all(root);
    let fresh = tempfile::tempdir().unwrap();
    copy_into(root, fresh.path());
    let f = index_with(fresh.path(), 2, true);
    let full = dump_all(fresh.path());
    let missing: Vec<_> = full.difference(&incremental).take(10).collect();
    let extra: Vec<_> = incremental.difference(&full).take(10).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{step}: incremental differs from full\nmissing: {missing:#?}\nextra: {extra:#?}"
    );
    assert_eq!(
        (s.entities, s.edges, &s.edges_by_how),
        (f.entities, f.edges, &f.edges_by_how),
        "{step}: the summary's counts"
    );
}

/// One change at a time, each aimed at a way resolution reaches into other files (a
/// body edit that only moves lines, a base gaining a method, a class changing its base
/// under a grandchild, a re-export under an alias, a module-level variable's type, a new
/// candidate for the bare-name fallback, a test's callee going away, a return annotation
/// and a `self.x` binding that type tracking follows from another file, an override that
/// stops overriding), then every fixture
/// file in turn has its first definition renamed and its lines shifted: after each, the
/// incremental index equals a fresh one.
#[test]
fn incremental_equals_full_after_each_single_edit() {
    let repo = tempfile::tempdir().unwrap();
    let root = repo.path();
    let w = |rel: &str, text: &str| {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    w("app/__init__.py", "");
    w(
        "app/base.py",
        "class Base:\n    def ping(self):\n        return 1\n\n\nclass Other:\n    def pong(self):\n        return 2\n",
    );
    w("app/mid.py", "from .base import Base, Other\n\n\nclass Mid(Base):\n    pass\n");
    w(
        "app/leaf.py",
        "from .mid import Mid\n\n\nclass Leaf(Mid):\n    def run(self):\n        return self.ping() + self.pong()\n",
    );
    w("app/core.py", "def helper():\n    return 3\n\n\ndef compute():\n    return helper()\n");
    w("app/reexport.py", "from .core import helper as assist\n");
    w("app/user.py", "from .reexport import assist\nfrom .shared import thing\n\n\ndef use():\n    thing.ping()\n    return assist()\n");
    w("app/shared.py", "from .base import Base\n\nthing = Base()\n");
    w("app/loose.py", "def stray():\n    return lonely()\n");
    w(
        "app/grand.py",
        "from .leaf import Leaf\n\n\nclass Grand(Leaf):\n    def go(self):\n        return self.pong()\n",
    );
    w("app/alias2.py", "from .core import compute as calc\n");
    w("app/user2.py", "from .alias2 import calc\n\n\ndef use2():\n    return calc()\n");
    w("app/maker.py", "from .base import Base, Other\n\n\nclass Maker(Base):\n    def make(self):\n        return 1\n");
    w("app/holder.py", "from .maker import Maker\n\nthe_maker = Maker()\n");
    w("app/user3.py", "from .holder import the_maker\n\n\ndef use3():\n    return the_maker.pong()\n");
    w("app/fold_a.py", "class Root:\n    def fold(self):\n        return 1\n");
    w("app/fold_b.py", "from .fold_a import Root\n\n\nclass Leafy(Root):\n    def fold(self):\n        return 2\n");
    w("app/fold_use.py", "def use_fold(x):\n    return x.fold()\n");
    w("app/engines.py", "from .base import Base, Other\n\n\ndef make_engine() -> Base:\n    return Base()\n");
    w("app/service.py", "from .engines import make_engine\n\n\nclass Service:\n    def __init__(self):\n        self.engine = make_engine()\n");
    w("app/client.py", "from .service import Service\n\n\nclass Client(Service):\n    def go(self):\n        return self.engine.ping()\n");
    w(
        "app/factory.py",
        "from functools import wraps\n\n\ndef lazy(func):\n    @wraps(func)\n    def wrapper(*a):\n        return func(*a)\n\n    return wrapper\n",
    );
    w("app/words.py", "from .factory import lazy\nfrom .core import helper\n\nlazy_helper = lazy(helper)\n");
    w("app/user4.py", "from .words import lazy_helper as _\n\nLABEL = _()\n");
    w(
        "app/meta.py",
        "class Manager:\n    def all(self):\n        return 1\n\n\nclass OtherManager:\n    def all(self):\n        return 2\n\n\n\
         class ModelBase(type):\n    def add_to_class(cls, name, value):\n        setattr(cls, name, value)\n\n\
         \x20   def _prepare(cls):\n        manager = Manager()\n        cls.add_to_class(\"objects\", manager)\n\n\n\
         class Model(metaclass=ModelBase):\n    pass\n",
    );
    w("app/emp.py", "from .meta import Model\n\n\nclass Employee(Model):\n    pass\n");
    w("app/emp_use.py", "from .emp import Employee\n\n\ndef staff():\n    return Employee.objects.all()\n");
    w("tests/test_core.py", "from app.core import compute\nfrom app.leaf import Leaf\n\n\ndef test_compute():\n    assert compute() == 3\n\n\ndef test_leaf():\n    Leaf().run()\n");
    for (lang, p) in [("python", "shop"), ("typescript", "tasks"), ("java", "bank")] {
        let to = root.join(p);
        std::fs::create_dir_all(&to).unwrap();
        copy_into(&fixture(&format!("{lang}/{p}")), &to);
    }
    index_with(root, 2, false);

    edit(root, "app/core.py", |s| format!("# moved down\n\n{s}"));
    check_incremental(root, "a body-only edit that shifts lines");
    edit(root, "app/base.py", |s| s.replace("class Other:", "class Other:\n    def ping(self):\n        return 9\n"));
    check_incremental(root, "a class gains a method a grandchild's self-call could reach");
    edit(root, "app/mid.py", |s| s.replace("class Mid(Base):", "class Mid(Other):"));
    check_incremental(root, "a class changes its base under a grandchild");
    edit(root, "app/core.py", |s| {
        s.replace("def helper():", "def helper_renamed():").replace("return helper()", "return helper_renamed()")
    });
    check_incremental(root, "a re-exported function is renamed under its alias");
    edit(root, "app/base.py", |s| {
        s.replace("    def ping(self):\n        return 1\n", "    def pinged(self):\n        return 1\n")
    });
    check_incremental(root, "a module-level variable's class loses the method called on it");
    w("app/lonely.py", "def lonely():\n    return 0\n");
    check_incremental(root, "a new candidate for the bare-name fallback");
    std::fs::remove_file(root.join("app/lonely.py")).unwrap();
    check_incremental(root, "the candidate goes away");
    edit(root, "app/core.py", |s| {
        s.replace("def compute():\n    return helper_renamed()", "def compute():\n    return 3")
    });
    check_incremental(root, "a test's callee stops calling on");
    edit(root, "app/core.py", |s| s.replace("def compute():", "def compute_all():"));
    check_incremental(root, "a function renamed under an alias another file imports");
    edit(root, "app/maker.py", |s| s.replace("class Maker(Base):", "class Maker(Other):"));
    check_incremental(root, "a class a module-level variable holds changes its base");
    edit(root, "app/maker.py", |s| {
        s.replace("class Maker(Other):", "class Maker(Base):\n    def pong(self):\n        return 5\n")
    });
    check_incremental(root, "that class gains the method called on the variable");
    edit(root, "app/fold_b.py", |s| s.replace("class Leafy(Root):", "class Leafy:"));
    check_incremental(root, "an override stops overriding: the fallback's candidates no longer fold");
    edit(root, "app/engines.py", |s| s.replace("-> Base:", "-> Other:"));
    check_incremental(root, "a return annotation another file's attribute type follows changes");
    edit(root, "app/service.py", |s| {
        s.replace("self.engine = make_engine()", "self.engine = Maker()")
            .replace("from .engines import make_engine", "from .maker import Maker")
    });
    check_incremental(root, "a base class's `self.x = Cls()` binding changes under a subclass's call");
    edit(root, "app/factory.py", |s| s.replace("    @wraps(func)\n", ""));
    check_incremental(root, "a factory's wrapper loses @wraps: a call of what it made goes to the wrapper");
    edit(root, "app/factory.py", |s| s.replace("    return wrapper\n", "    return func\n"));
    check_incremental(root, "the factory returns something else");
    edit(root, "app/factory.py", |s| {
        s.replace("    return func\n", "    return wrapper\n")
            .replace("    def wrapper", "    @wraps(func)\n    def wrapper")
    });
    edit(root, "app/words.py", |s| {
        s.replace("lazy(helper)", "lazy(compute_all)").replace("import helper", "import compute_all")
    });
    check_incremental(root, "what the factory is given changes");

    edit(root, "app/meta.py", |s| s.replace("manager = Manager()", "manager = OtherManager()"));
    check_incremental(root, "a metaclass's method sets the attribute to another class, through a local");
    edit(root, "app/meta.py", |s| s.replace("class Model(metaclass=ModelBase):", "class Model:"));
    check_incremental(root, "a base class loses its metaclass under a subclass's attribute call");

    // Every fixture file: rename its first definition, then shift its lines.
    let mut files: Vec<String> = Vec::new();
    for p in ["shop", "tasks", "bank"] {
        let (found, _) = index::walk(&root.join(p), false);
        files.extend(found.into_iter().map(|f| format!("{p}/{}", f.rel)));
    }
    files.sort();
    let def = regex::Regex::new(r"(def|class|function|interface) ([A-Za-z_][A-Za-z0-9_]*)").unwrap();
    for rel in &files {
        let text = std::fs::read_to_string(root.join(rel)).unwrap();
        let Some(m) = def.captures(&text) else { continue };
        let name = m.get(2).unwrap().as_str().to_string();
        edit(root, rel, |s| s.replacen(&format!("{} {name}", &m[1]), &format!("{} {name}Renamed", &m[1]), 1));
        check_incremental(root, &format!("{rel}: {name} renamed"));
        edit(root, rel, |s| format!("\n\n{s}"));
        check_incremental(root, &format!("{rel}: lines shifted"));
    }
}
