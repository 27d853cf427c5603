//! Adapters: one reproducer each, behind one trait. An adapter reads a case's issue and
//! a private checkout of the buggy tree and returns a [`Candidate`]; the harness scores
//! it the same way whichever adapter made it.
//!
//! - [`Pipeline`]: the four-stage model pipeline (`reproduce --model NAME`).
//! - [`KeyFree`]: the key-free mode (`reproduce --model none`).
//! - [`ZeroShot`]: one model call with BM25 context, after SWT-bench's ZeroShotPlus.
//! - [`Gold`]: the case's own gold test; a sanity adapter that must score 100%.
//! - [`Empty`]: a test that always passes; a sanity adapter that must score 0%.
//! - [`External`]: any program that reads the case and writes a test.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::case::Case;
use super::score::Candidate;
use super::AdapterInfo;
use crate::model::{ChatModel, ChatRequest, ChatResponse, Message, ModelError, ModelInfo, Spend};
use crate::reproduce::{self, Request, Status};
use crate::sandbox::Choice;

/// What an adapter gets for one case.
pub struct Workspace<'a> {
    pub case: &'a Case,
    pub issue: &'a str,
    /// A private checkout of the buggy tree: the adapter may index it and write in it;
    /// only what it returns is scored.
    pub repo: &'a Path,
    /// The case's output directory, for the adapter's own artifacts.
    pub out: &'a Path,
    /// The model, for adapters that use one (metered by the harness).
    pub model: Option<&'a dyn ChatModel>,
    /// Where the adapter may run what it writes.
    pub sandbox: Choice,
    pub image: Option<String>,
    /// The case's environment (the one its tests are scored in) and Docker placement.
    pub environment: Option<std::sync::Arc<crate::sandbox::env::Environment>>,
    pub env: crate::sandbox::env::EnvOptions,
    pub timeout_secs: u64,
}

/// A reproducer under test.
pub trait Adapter: Send + Sync {
    /// Its name and settings, for the run record.
    fn info(&self) -> AdapterInfo;
    /// Does it call a model (so the harness must give it one)?
    fn uses_model(&self) -> bool {
        false
    }
    /// Produce a candidate test for one case; `Err` is the adapter's failure, with why.
    fn produce(&self, ws: &Workspace) -> Result<Candidate, String>;
}

/// Counts a model's calls, tokens and cost.
pub struct Metered<'a> {
    pub inner: &'a dyn ChatModel,
    pub spend: Mutex<Spend>,
}

impl<'a> Metered<'a> {
    pub fn new(inner: &'a dyn ChatModel) -> Self {
        Metered { inner, spend: Mutex::new(Spend::default()) }
    }
    pub fn spend(&self) -> Spend {
        self.spend.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

impl ChatModel for Metered<'_> {
    fn chat(&self, req: &ChatRequest) -> Result<ChatResponse, ModelError> {
        let r = self.inner.chat(req)?;
        if let Ok(mut s) = self.spend.lock() {
            s.add(&r.usage);
        }
        Ok(r)
    }
    fn describe(&self) -> ModelInfo {
        self.inner.describe()
    }
}

/// Index the checkout (graph and keyword index), as `reproagent index` would.
fn index(repo: &Path) -> Result<(), String> {
    crate::index::run(&crate::index::Options::new(repo))
        .map(|_| ())
        .map_err(|e| format!("indexing the checkout failed: {e}"))
}

/// Write the issue beside the case's artifacts, for the reproducers that read a file.
fn issue_file(ws: &Workspace) -> Result<PathBuf, String> {
    let p = ws.out.join("issue.md");
    std::fs::write(&p, ws.issue).map_err(|e| format!("{}: {e}", p.display()))?;
    Ok(p)
}

/// Keep a reproduce run's directory with the case's artifacts.
fn keep_run(ws: &Workspace, run_dir: &str) {
    let to = ws.out.join("reproduce");
    let _ = super::case::copy_tree(Path::new(run_dir), &to);
}

/// A reproduce outcome as a candidate: its test when it wrote one (the best attempt
/// counts too: the harness, not the reproducer, decides whether it reproduces).
fn from_outcome(o: &reproduce::Outcome) -> Result<Candidate, String> {
    let claimed = Some(o.status.as_str().to_string());
    let probe = o.probe.and_then(|p| serde_json::to_value(p).ok()).and_then(|v| v.as_str().map(str::to_string));
    match (&o.test_path, &o.test_code, o.status) {
        (Some(p), Some(c), _) => Ok(Candidate {
            files: vec![(p.clone(), c.clone())],
            patch: None,
            claimed,
            reason: Some(o.reason.clone()),
            only: Vec::new(),
            probe,
        }),
        (_, _, Status::Error) => Err(format!("reproduce ended in error: {}", o.reason)),
        _ => Ok(Candidate { claimed, reason: Some(o.reason.clone()), ..Candidate::default() }),
    }
}

fn request(ws: &Workspace, issue: PathBuf) -> Request {
    Request {
        root: ws.repo.to_path_buf(),
        issue_file: issue,
        issue_text: ws.issue.to_string(),
        sandbox: ws.sandbox,
        image: ws.image.clone(),
        write: false,
        timeout_secs: ws.timeout_secs,
        resume: None,
        env: ws.env.clone(),
        environment: ws.environment.clone(),
    }
}

/// The key-free mode.
pub struct KeyFree;

impl Adapter for KeyFree {
    fn info(&self) -> AdapterInfo {
        AdapterInfo { name: "keyfree".into(), model: Some("none".into()), ..AdapterInfo::default() }
    }
    fn produce(&self, ws: &Workspace) -> Result<Candidate, String> {
        index(ws.repo)?;
        let issue = issue_file(ws)?;
        let o = reproduce::keyfree::run(&request(ws, issue)).map_err(|e| format!("key-free mode: {e}"))?;
        keep_run(ws, &o.run_dir);
        from_outcome(&o)
    }
}

/// The four-stage model pipeline, with its options (review model, fix probe, per-case
/// budget, tool protocol).
pub struct Pipeline {
    pub model: ModelInfo,
    pub options: reproduce::pipeline::Options,
}

impl Adapter for Pipeline {
    fn info(&self) -> AdapterInfo {
        model_info("pipeline", &self.model)
    }
    fn uses_model(&self) -> bool {
        true
    }
    fn produce(&self, ws: &Workspace) -> Result<Candidate, String> {
        let model = ws.model.ok_or("the pipeline adapter needs a model")?;
        index(ws.repo)?;
        let issue = issue_file(ws)?;
        let o = reproduce::pipeline::run_with(&request(ws, issue), model, &self.options)
            .map_err(|e| format!("pipeline: {e}"))?;
        keep_run(ws, &o.run_dir);
        from_outcome(&o)
    }
}

fn model_info(name: &str, m: &ModelInfo) -> AdapterInfo {
    AdapterInfo {
        name: name.into(),
        model: Some(m.model.clone()),
        endpoint: Some(m.endpoint_host.clone()),
        temperature: m.sampling.temperature,
        top_p: m.sampling.top_p,
        seed: m.sampling.seed,
        command: None,
    }
}

/// The gold test: what the case's own fix came with.
pub struct Gold;

impl Adapter for Gold {
    fn info(&self) -> AdapterInfo {
        AdapterInfo { name: "gold".into(), ..AdapterInfo::default() }
    }
    fn produce(&self, ws: &Workspace) -> Result<Candidate, String> {
        let patch =
            ws.case.gold_test_patch_text().map_err(|e| e.to_string())?.ok_or("the case has no gold_test_patch")?;
        Ok(Candidate {
            patch: Some(patch),
            claimed: Some("gold".into()),
            only: ws.case.fail_to_pass.clone(),
            ..Candidate::default()
        })
    }
}

/// A test that passes whatever the code does.
pub struct Empty;

impl Adapter for Empty {
    fn info(&self) -> AdapterInfo {
        AdapterInfo { name: "empty".into(), ..AdapterInfo::default() }
    }
    fn produce(&self, ws: &Workspace) -> Result<Candidate, String> {
        let junit5 = ws.case.tests.framework.as_deref() == Some("junit5");
        let (path, code) = match ws.case.language.as_str() {
            "python" => ("tests/test_reproagent_empty.py", "def test_empty():\n    pass\n".to_string()),
            "typescript" => (
                "test/reproagent_empty.test.js",
                "const { test } = require('node:test');\n\ntest('empty', () => {});\n".to_string(),
            ),
            "java" if junit5 => (
                "src/test/java/ReproagentEmptyTest.java",
                "import org.junit.jupiter.api.Test;\n\npublic class ReproagentEmptyTest {\n    @Test\n    public void empty() {}\n}\n".to_string(),
            ),
            "java" => (
                "src/test/java/ReproagentEmptyTest.java",
                "import org.junit.Test;\n\npublic class ReproagentEmptyTest {\n    @Test\n    public void empty() {}\n}\n".to_string(),
            ),
            other => return Err(format!("no empty test for language {other}")),
        };
        // A `"type": "module"` package makes `.js` an ES module: write the import form.
        let code = if ws.case.language == "typescript" && is_esm(ws.repo) {
            "import { test } from 'node:test';\n\ntest('empty', () => {});\n".to_string()
        } else {
            code
        };
        Ok(Candidate { files: vec![(path.into(), code)], claimed: Some("empty".into()), ..Candidate::default() })
    }
}

fn is_esm(repo: &Path) -> bool {
    crate::confine::read_text(repo, "package.json")
        .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
        .is_some_and(|v| v.get("type").and_then(|t| t.as_str()) == Some("module"))
}

/// One model call with BM25 context: the issue, the code the keyword index ranks
/// highest for it, and the repository's test conventions; the answer is one test file.
pub struct ZeroShot {
    pub model: ModelInfo,
    /// Code excerpts given as context.
    pub hits: usize,
}

pub const ZERO_SHOT_PROMPT: &str = include_str!("zero_shot.md");

impl Adapter for ZeroShot {
    fn info(&self) -> AdapterInfo {
        model_info("zero-shot", &self.model)
    }
    fn uses_model(&self) -> bool {
        true
    }
    fn produce(&self, ws: &Workspace) -> Result<Candidate, String> {
        let model = ws.model.ok_or("the zero-shot adapter needs a model")?;
        index(ws.repo)?;
        let context = bm25_context(ws.repo, ws.issue, self.hits)?;
        let conv = reproduce::pipeline::conventions(ws.repo, &suspect_files(ws.repo, ws.issue, self.hits));
        let example = match (&conv.example_path, &conv.example) {
            (Some(p), Some(c)) => format!("An existing test, `{p}`:\n\n```\n{c}\n```\n"),
            _ => "No existing test file was found.\n".into(),
        };
        let user = format!(
            "# Issue\n\n{}\n\n# Code the issue is most likely about\n\n{context}\n# Test conventions\n\nLanguages: {}. Framework: {}. Test directory: `{}`.\n\n{example}",
            ws.issue.trim(),
            conv.languages.join(", "),
            conv.framework,
            conv.test_dir
        );
        let req = ChatRequest::new(vec![Message::system(ZERO_SHOT_PROMPT), Message::user(user)]);
        let _ =
            std::fs::write(ws.out.join("zero_shot_request.json"), serde_json::to_vec_pretty(&req).unwrap_or_default());
        let resp = model.chat(&req).map_err(|e| format!("the model call failed: {e}"))?;
        let text = resp.message.content.clone().unwrap_or_default();
        let _ = std::fs::write(ws.out.join("zero_shot_answer.md"), &text);
        let (path, code) = parse_test_answer(&text).ok_or_else(|| {
            format!(
                "the answer holds no `PATH: ...` line followed by a fenced code block: {}",
                super::score::one_line(&text)
            )
        })?;
        Ok(Candidate { files: vec![(path, code)], claimed: None, reason: None, ..Candidate::default() })
    }
}

/// The files of the top keyword hits for the issue, best first: the code whose tests
/// the conventions describe.
fn suspect_files(repo: &Path, issue: &str, hits: usize) -> Vec<String> {
    let Ok(search) = crate::search::SearchIndex::open(repo) else { return Vec::new() };
    let query: String = issue.split_whitespace().take(200).collect::<Vec<_>>().join(" ");
    let mut out: Vec<String> = Vec::new();
    for h in search.search(&query, None, None, hits.max(1) * 3).unwrap_or_default() {
        if !out.contains(&h.path) {
            out.push(h.path);
        }
    }
    out
}

/// The top keyword hits for the issue, with their code.
fn bm25_context(repo: &Path, issue: &str, hits: usize) -> Result<String, String> {
    let search = crate::search::SearchIndex::open(repo).map_err(|e| format!("keyword index: {e}"))?;
    // The issue's words, capped: a long traceback would drown the query.
    let query: String = issue.split_whitespace().take(200).collect::<Vec<_>>().join(" ");
    let found = search.search(&query, None, None, hits * 3).map_err(|e| format!("keyword search: {e}"))?;
    let mut out = String::new();
    let mut seen: Vec<(String, i64)> = Vec::new();
    for h in found.iter().filter(|h| h.kind != "file") {
        if seen.len() >= hits || seen.iter().any(|(p, l)| *p == h.path && *l == h.start_line) {
            continue;
        }
        seen.push((h.path.clone(), h.start_line));
        let text = crate::confine::read_text(repo, &h.path).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let (s, e) = (
            (h.start_line.max(1) - 1) as usize,
            (h.end_line.max(h.start_line) as usize).min(lines.len()).min(h.start_line.max(1) as usize + 80),
        );
        out.push_str(&format!(
            "`{}` lines {}-{} ({}):\n\n```\n{}\n```\n\n",
            h.path,
            s + 1,
            e,
            h.id,
            lines.get(s..e).unwrap_or(&[]).join("\n")
        ));
    }
    if out.is_empty() {
        out.push_str("(the keyword index found nothing for the issue's words)\n");
    }
    Ok(out)
}

/// `PATH: tests/test_x.py` followed by a fenced block: the path and the code.
pub fn parse_test_answer(text: &str) -> Option<(String, String)> {
    let mut path = None;
    let mut lines = text.lines();
    while let Some(l) = lines.next() {
        let t = l.trim().trim_matches('*').trim();
        if let Some(p) = t.strip_prefix("PATH:").or_else(|| t.strip_prefix("Path:")) {
            path = Some(p.trim().trim_matches('`').to_string());
            continue;
        }
        if t.starts_with("```") {
            let p = path.take()?;
            let mut code = String::new();
            for l in lines.by_ref() {
                if l.trim_start().starts_with("```") {
                    return (!p.is_empty() && crate::sandbox::check_rel(&p).is_ok()).then_some((p, code));
                }
                code.push_str(l);
                code.push('\n');
            }
            return None;
        }
    }
    None
}

/// Any program: it runs with the checkout as its working directory, the issue on its
/// standard input, and these variables: `REPROAGENT_CASE` (case.json), `REPROAGENT_ISSUE`
/// (the issue as a file), `REPROAGENT_REPO` (the checkout), `REPROAGENT_OUT` (a
/// directory for its own artifacts). It either prints a unified diff that adds its test,
/// or writes the test into the checkout: the files it adds or changes are the candidate.
pub struct External {
    pub command: String,
    pub timeout: Duration,
}

impl Adapter for External {
    fn info(&self) -> AdapterInfo {
        AdapterInfo { name: "command".into(), command: Some(self.command.clone()), ..AdapterInfo::default() }
    }
    fn produce(&self, ws: &Workspace) -> Result<Candidate, String> {
        use std::io::Write;
        use std::os::unix::process::CommandExt;
        use std::process::{Command, Stdio};
        let issue = issue_file(ws)?;
        let before = snapshot(ws.repo);
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(&self.command)
            .current_dir(ws.repo)
            .env("REPROAGENT_CASE", ws.case.dir.join("case.json"))
            .env("REPROAGENT_ISSUE", &issue)
            .env("REPROAGENT_REPO", ws.repo)
            .env("REPROAGENT_OUT", ws.out)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .map_err(|e| format!("{}: {e}", self.command))?;
        if let Some(mut stdin) = child.stdin.take() {
            let _ = stdin.write_all(ws.issue.as_bytes());
        }
        let pid = child.id() as i32;
        // Ctrl-C on `bench run` kills the command's whole group too.
        let _interrupt = crate::sandbox::interrupt::register_group(pid);
        let (out_t, err_t) = (drain(child.stdout.take()), drain(child.stderr.take()));
        let started = Instant::now();
        let status = loop {
            match child.try_wait() {
                Ok(Some(s)) => break s,
                Ok(None) if started.elapsed() > self.timeout => {
                    // SAFETY: kill(2) on the process group we made for the child.
                    unsafe { libc::kill(-pid, libc::SIGKILL) };
                    let _ = child.wait();
                    return Err(format!(
                        "`{}` ran past its {} s timeout and was killed",
                        self.command,
                        self.timeout.as_secs()
                    ));
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(50)),
                Err(e) => return Err(format!("{}: {e}", self.command)),
            }
        };
        let stdout = out_t.join().unwrap_or_default();
        let stderr = err_t.join().unwrap_or_default();
        let _ = std::fs::write(ws.out.join("command.stdout"), &stdout);
        let _ = std::fs::write(ws.out.join("command.stderr"), &stderr);
        if !status.success() {
            return Err(format!(
                "`{}` exited with {}: {}",
                self.command,
                status.code().map(|c| c.to_string()).unwrap_or_else(|| "a signal".into()),
                super::score::one_line(
                    &String::from_utf8_lossy(&stderr)
                        .chars()
                        .rev()
                        .take(400)
                        .collect::<String>()
                        .chars()
                        .rev()
                        .collect::<String>()
                )
            ));
        }
        let out = String::from_utf8_lossy(&stdout);
        let trimmed = out.trim_start();
        if trimmed.starts_with("diff --git") || trimmed.starts_with("--- ") {
            return Ok(Candidate { patch: Some(trimmed.to_string()), ..Candidate::default() });
        }
        let after = snapshot(ws.repo);
        let files: Vec<(String, String)> = after
            .iter()
            .filter(|(p, h)| before.get(*p) != Some(h))
            .filter_map(|(p, _)| crate::confine::read_text(ws.repo, p).map(|c| (p.clone(), c)))
            .collect();
        Ok(Candidate { files, ..Candidate::default() })
    }
}

fn drain<R: std::io::Read + Send + 'static>(r: Option<R>) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(mut r) = r {
            let _ = r.read_to_end(&mut buf);
        }
        buf
    })
}

/// Every file's content hash, `.git` and `.reproagent` left out.
fn snapshot(root: &Path) -> BTreeMap<String, blake3::Hash> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&dir) else { continue };
        for e in rd.flatten() {
            let name = e.file_name();
            // Hidden directories, caches and dependencies are no test the program wrote.
            let n = name.to_string_lossy();
            if n.starts_with('.') || n == "__pycache__" || n == "node_modules" {
                continue;
            }
            let p = e.path();
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(p),
                Ok(t) if t.is_file() => {
                    if let (Ok(b), Ok(rel)) = (std::fs::read(&p), p.strip_prefix(root)) {
                        out.insert(rel.to_string_lossy().into_owned(), blake3::hash(&b));
                    }
                }
                _ => {}
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_test_answer_is_a_path_and_a_block() {
        let a = "Here it is.\n\nPATH: tests/test_bug.py\n\n```python\nimport x\n\ndef test_a():\n    assert x.f() == 1\n```\n";
        let (p, c) = parse_test_answer(a).unwrap();
        assert_eq!(p, "tests/test_bug.py");
        assert_eq!(c, "import x\n\ndef test_a():\n    assert x.f() == 1\n");
        assert!(parse_test_answer("```python\nx\n```").is_none(), "no path");
        assert!(parse_test_answer("PATH: ../escape.py\n```\nx\n```").is_none(), "outside the tree");
    }
}
