//! `bench report`: runs compared side by side, as Markdown and as one HTML page.
//!
//! Everything is recomputed from the run records ([`summarize`]), so a report never
//! disagrees with the records it came from. Both outputs hold the same three tables
//! (per run, per language, per case); they are built once as plain cells and rendered
//! twice. The HTML page is self-contained, well-formed XHTML (it parses as XML) with
//! three inline SVG charts drawn here, so it opens offline and needs no script.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write;

use super::{summarize, AdapterInfo, BenchRecord, CaseResult, CaseStatus, Summary};

/// Run colours (Okabe–Ito, told apart by colour-blind readers); run `i` takes `i mod 8`.
const PALETTE: [&str; 8] = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#000000", "#F0E442"];

/// How long a reason may be in a per-case cell before it is cut.
const REASON_CHARS: usize = 60;

/// How the metrics are defined, shared by both outputs.
const NOTES: [&str; 6] = [
    "fail-before: the candidate's run on the buggy tree does not pass (a test fails or the run errors).",
    "pass-after: every test in the candidate passes once the gold patch is applied.",
    "fail-to-pass: both; the headline rate.",
    "judged = scored cases + adapter errors: invalid cases (the case itself is broken: repository missing, gold patch \
     does not apply, tests cannot run) are left out of the rates; an adapter error counts as a failure.",
    "failure matches issue: of the judged cases whose issue reports an error type (matchable), how many failed on the \
     buggy tree with that type (and, when the issue gives a message, with that message: one holds the other, or two \
     thirds of its words are there).",
    "cost and model calls are summed over the run's cases; wall time is the whole run's (cases run in parallel).",
];

/// The Markdown comparison of runs: a summary per run, fail-to-pass per language and a
/// verdict per case, then how the metrics are defined.
pub fn markdown(records: &[BenchRecord]) -> String {
    let runs = runs(records);
    let mut s = String::from("# Bench report\n\n");
    s.push_str(&overview(&runs));
    s.push_str("\n\n");
    for (title, table) in [
        ("Summary", summary_table(&runs)),
        ("Fail-to-pass per language", language_table(&runs)),
        ("Per case", case_table(&runs)),
    ] {
        let _ = writeln!(s, "## {title}\n");
        s.push_str(&table.markdown());
        s.push('\n');
    }
    if let Some(t) = probe_table(&runs) {
        let _ = writeln!(s, "## Fix probe against the gold fail-to-pass\n");
        s.push_str(&t.markdown());
        s.push('\n');
        let _ = writeln!(s, "{PROBE_NOTE}\n");
    }
    s.push_str("## How to read this\n\n");
    for n in NOTES {
        let _ = writeln!(s, "- {n}");
    }
    let _ = writeln!(
        s,
        "- Per case: `F→P` fail-to-pass; `fails before only` fails on the buggy tree but not fixed by the gold patch; \
         `passes before` does not fail on the buggy tree; `no test` the reproducer wrote none (scored as a failure); \
         `invalid` the case is broken; `adapter error` the reproducer broke; `–` the run did not have the case."
    );
    s
}

/// The HTML page: the Markdown's tables plus three charts (fail-to-pass per run, per
/// language per run, cost against fail-to-pass). Self-contained XHTML, no script.
pub fn html(records: &[BenchRecord]) -> String {
    let runs = runs(records);
    let mut s = String::new();
    s.push_str("<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\">\n<head>\n");
    s.push_str("<meta charset=\"utf-8\"/>\n<title>reproagent bench report</title>\n<style>");
    s.push_str(CSS);
    s.push_str("</style>\n</head>\n<body>\n<h1>Bench report</h1>\n");
    let _ = writeln!(s, "<p class=\"note\">{}</p>", esc(&overview(&runs)));
    s.push_str("<h2>Summary</h2>\n");
    s.push_str(&summary_table(&runs).html());
    s.push_str("<h2>Fail-to-pass per run</h2>\n");
    s.push_str(&chart_adapter(&runs));
    s.push_str("<h2>Fail-to-pass per language</h2>\n");
    s.push_str(&chart_language(&runs));
    s.push_str(&language_table(&runs).html());
    s.push_str("<h2>Cost and fail-to-pass</h2>\n");
    s.push_str(&chart_cost(&runs));
    s.push_str("<h2>Per case</h2>\n");
    s.push_str(&case_table(&runs).html());
    if let Some(t) = probe_table(&runs) {
        s.push_str("<h2>Fix probe against the gold fail-to-pass</h2>\n");
        s.push_str(&t.html());
        let _ = writeln!(s, "<p class=\"note\">{}</p>", esc(PROBE_NOTE));
    }
    s.push_str("<h2>How to read this</h2>\n<ul>\n");
    for n in NOTES {
        let _ = writeln!(s, "<li>{}</li>", esc(n));
    }
    s.push_str(
        "<li>Per case: <b>F→P</b> fail-to-pass; <b>fails before only</b> fails on the buggy tree but not fixed by the \
         gold patch; <b>passes before</b> does not fail on the buggy tree; <b>no test</b> the reproducer wrote none \
         (scored as a failure); <b>invalid</b> the case is broken; <b>adapter error</b> the reproducer broke; \
         <b>–</b> the run did not have the case. Hover a cell for the full reason.</li>\n</ul>\n</body>\n</html>\n",
    );
    s
}

const CSS: &str = "
body { font: 14px/1.45 system-ui, -apple-system, 'Segoe UI', sans-serif; color: #222; max-width: 1200px; margin: 2em auto; padding: 0 1em; }
h2 { margin-top: 1.6em; }
table { border-collapse: collapse; margin: 0.5em 0 1em; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.f2p { background: #e2f3e6; }
td.error { background: #fbe6e1; }
td.invalid, td.missing { color: #777; }
.swatch { display: inline-block; width: 0.8em; height: 0.8em; margin-right: 0.4em; vertical-align: -0.05em; }
.note { color: #555; }
svg { display: block; max-width: 100%; height: auto; margin: 0.5em 0 1em; }
svg text { font: 12px system-ui, sans-serif; fill: #222; }
svg text.small { font-size: 10px; fill: #555; }
svg .axis { stroke: #444; stroke-width: 1; }
svg .grid { stroke: #e6e6e6; stroke-width: 1; }
svg .track { fill: #f1f1f1; }
";

/// One run with what every table and chart needs.
struct Run<'a> {
    record: &'a BenchRecord,
    summary: Summary,
    /// The adapter (and model), with the run id when another run has the same.
    label: String,
    /// Its colour in the charts and the summary table.
    color: &'static str,
    /// Its cases by id.
    cases: HashMap<&'a str, &'a CaseResult>,
}

fn runs(records: &[BenchRecord]) -> Vec<Run<'_>> {
    let adapters: Vec<String> = records.iter().map(|r| adapter_label(&r.adapter)).collect();
    records
        .iter()
        .zip(&adapters)
        .enumerate()
        .map(|(i, (record, a))| {
            let shared = adapters.iter().filter(|b| *b == a).count() > 1;
            let mut cases = HashMap::new();
            for c in &record.cases {
                cases.entry(c.case_id.as_str()).or_insert(c);
            }
            Run {
                record,
                summary: summarize(record),
                label: if shared { format!("{a} [{}]", record.run_id) } else { a.clone() },
                color: PALETTE[i % PALETTE.len()],
                cases,
            }
        })
        .collect()
}

/// `name (model)`, or the name for adapters that use no model.
fn adapter_label(a: &AdapterInfo) -> String {
    match &a.model {
        Some(m) => format!("{} ({m})", a.name),
        None => a.name.clone(),
    }
}

/// One line on what is compared; a warning when the runs used different suites.
fn overview(runs: &[Run]) -> String {
    if runs.is_empty() {
        return "No runs given.".into();
    }
    let suites: BTreeSet<&str> = runs.iter().map(|r| r.record.suite.as_str()).collect();
    let mut s = format!("{} run{} over ", runs.len(), if runs.len() == 1 { "" } else { "s" });
    if suites.len() == 1 {
        let _ = write!(s, "suite {}.", one_line(suites.first().copied().unwrap_or("")));
    } else {
        let list: Vec<String> = suites.iter().map(|x| one_line(x)).collect();
        let _ = write!(s, "different suites ({}): the rates are not directly comparable.", list.join(", "));
    }
    s
}

/// `n/N (pp%)`; a rate never rounds to 0% or 100% unless it is one.
fn frac_pct(n: usize, d: usize) -> String {
    if d == 0 {
        return format!("{n}/0 (n/a)");
    }
    let mut p = (100.0 * n as f64 / d as f64).round() as usize;
    if n < d {
        p = p.min(99);
    }
    if n > 0 {
        p = p.max(1);
    }
    format!("{n}/{d} ({p}%)")
}

fn rate(n: usize, d: usize) -> f64 {
    if d == 0 {
        0.0
    } else {
        n as f64 / d as f64
    }
}

/// Seconds as `12.3 s`, `4m 05s` or `1h 02m`.
fn duration(secs: f64) -> String {
    if !secs.is_finite() || secs < 0.0 {
        return "?".into();
    }
    if secs < 60.0 {
        return format!("{secs:.1} s");
    }
    let t = secs.round() as u64;
    if t < 3600 {
        format!("{}m {:02}s", t / 60, t % 60)
    } else {
        format!("{}h {:02}m", t / 3600, t % 3600 / 60)
    }
}

/// A cost that is a number (a broken record must not break the charts).
fn cost(run: &Run) -> f64 {
    let c = run.summary.total.cost_usd;
    if c.is_finite() && c > 0.0 {
        c
    } else {
        0.0
    }
}

/// One line: whitespace runs (newlines included) become one space, other control
/// characters go.
fn one_line(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut space = false;
    for ch in s.chars() {
        if ch.is_whitespace() {
            space = !out.is_empty();
        } else if !ch.is_control() {
            if space {
                out.push(' ');
                space = false;
            }
            out.push(ch);
        }
    }
    out
}

/// [`one_line`], cut to `max` characters with an ellipsis.
fn truncate(s: &str, max: usize) -> String {
    let l = one_line(s);
    if l.chars().count() <= max {
        l
    } else {
        let mut t: String = l.chars().take(max.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

/// Text for XML (content and quoted attributes): the five markup characters escaped,
/// characters XML 1.0 forbids (terminal escapes in test output...) replaced.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '\t' | '\n' | '\r' => out.push(ch),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

/// A Markdown table cell: on one line, `|` escaped, and `<` so that text from test
/// output cannot open an HTML tag where the Markdown is rendered.
fn md(s: &str) -> String {
    one_line(s).replace('|', "\\|").replace('<', "\\<")
}

/// A table cell: its text, and for HTML a tooltip, a class and a run's colour swatch.
#[derive(Default)]
struct Cell {
    text: String,
    title: Option<String>,
    class: Option<&'static str>,
    swatch: Option<&'static str>,
}

impl Cell {
    fn new(text: impl Into<String>) -> Self {
        Cell { text: text.into(), ..Cell::default() }
    }
    fn num(text: impl Into<String>) -> Self {
        Cell { text: text.into(), class: Some("num"), ..Cell::default() }
    }
}

/// A table built once, rendered as Markdown or as HTML.
struct Table {
    head: Vec<String>,
    /// Which columns are numbers (right-aligned).
    right: Vec<bool>,
    rows: Vec<Vec<Cell>>,
}

impl Table {
    fn markdown(&self) -> String {
        if self.rows.is_empty() {
            return "(nothing to show)\n".into();
        }
        let mut s = String::new();
        let head: Vec<String> = self.head.iter().map(|h| md(h)).collect();
        let _ = writeln!(s, "| {} |", head.join(" | "));
        let rule: Vec<&str> = self.right.iter().map(|&r| if r { "---:" } else { "---" }).collect();
        let _ = writeln!(s, "|{}|", rule.join("|"));
        for row in &self.rows {
            let cells: Vec<String> = row.iter().map(|c| md(&c.text)).collect();
            let _ = writeln!(s, "| {} |", cells.join(" | "));
        }
        s
    }

    /// Right-align every column from `first` on.
    fn align_from(mut self, first: usize) -> Self {
        self.right = (0..self.head.len()).map(|i| i >= first).collect();
        self
    }

    fn html(&self) -> String {
        if self.rows.is_empty() {
            return "<p class=\"note\">(nothing to show)</p>\n".into();
        }
        let mut s = String::from("<table>\n<thead><tr>");
        for h in &self.head {
            let _ = write!(s, "<th>{}</th>", esc(h));
        }
        s.push_str("</tr></thead>\n<tbody>\n");
        for row in &self.rows {
            s.push_str("<tr>");
            for c in row {
                s.push_str("<td");
                if let Some(k) = c.class {
                    let _ = write!(s, " class=\"{k}\"");
                }
                if let Some(t) = &c.title {
                    let _ = write!(s, " title=\"{}\"", esc(&one_line(t)));
                }
                s.push('>');
                if let Some(col) = c.swatch {
                    let _ = write!(s, "<span class=\"swatch\" style=\"background: {col}\"></span>");
                }
                let _ = write!(s, "{}</td>", esc(&one_line(&c.text)));
            }
            s.push_str("</tr>\n");
        }
        s.push_str("</tbody>\n</table>\n");
        s
    }
}

/// One row per run: its counts, rates, cost and time.
fn summary_table(runs: &[Run]) -> Table {
    let head = [
        "run",
        "adapter",
        "cases",
        "judged",
        "fail-to-pass",
        "fail-before",
        "failure matches issue",
        "invalid",
        "adapter errors",
        "cost (USD)",
        "model calls",
        "wall time",
    ];
    let rows = runs
        .iter()
        .map(|r| {
            let t = &r.summary.total;
            vec![
                Cell { swatch: Some(r.color), ..Cell::new(&r.record.run_id) },
                Cell::new(adapter_label(&r.record.adapter)),
                Cell::num(t.cases.to_string()),
                Cell::num(t.judged().to_string()),
                Cell::num(frac_pct(t.fail_to_pass, t.judged())),
                Cell::num(format!("{}/{}", t.fail_before, t.judged())),
                Cell::num(format!("{}/{}", t.matches_issue, t.matchable)),
                Cell::num(t.invalid.to_string()),
                Cell::num(t.adapter_errors.to_string()),
                Cell::num(format!("{:.4}", cost(r))),
                Cell::num(t.model_calls.to_string()),
                Cell::num(duration(r.record.wall_secs)),
            ]
        })
        .collect();
    Table { head: head.iter().map(|h| h.to_string()).collect(), right: Vec::new(), rows }.align_from(2)
}

const PROBE_NOTE: &str = "The pipeline's fix probe applies a fix the model proposed in a sandbox copy and says whether the test then passes. It agrees with the gold run when it says `passes` on a case the harness scored fail-to-pass, or `fails` on one it did not; `no fix` cases say nothing and are left out of the agreement.";

/// How often the fix probe's verdict agreed with the gold fail-to-pass, per run that
/// recorded probes; `None` when no run did.
fn probe_table(runs: &[Run]) -> Option<Table> {
    let head = ["run", "probed", "passes", "fails", "no fix", "agreed", "passes but not F→P", "fails but F→P"];
    let rows: Vec<Vec<Cell>> = runs
        .iter()
        .filter_map(|r| {
            let probed: Vec<&CaseResult> =
                r.record.cases.iter().filter(|c| c.status != CaseStatus::Invalid && c.probe.is_some()).collect();
            if probed.is_empty() {
                return None;
            }
            let is = |c: &CaseResult, p: &str| c.probe.as_deref() == Some(p);
            let n = |f: &dyn Fn(&CaseResult) -> bool| probed.iter().filter(|c| f(c)).count();
            let judged = n(&|c| !is(c, "no_fix"));
            let agreed = n(&|c| (is(c, "passes") && c.fail_to_pass) || (is(c, "fails") && !c.fail_to_pass));
            Some(vec![
                Cell { swatch: Some(r.color), ..Cell::new(&r.record.run_id) },
                Cell::num(probed.len().to_string()),
                Cell::num(n(&|c| is(c, "passes")).to_string()),
                Cell::num(n(&|c| is(c, "fails")).to_string()),
                Cell::num(n(&|c| is(c, "no_fix")).to_string()),
                Cell::num(frac_pct(agreed, judged)),
                Cell::num(n(&|c| is(c, "passes") && !c.fail_to_pass).to_string()),
                Cell::num(n(&|c| is(c, "fails") && c.fail_to_pass).to_string()),
            ])
        })
        .collect();
    if rows.is_empty() {
        return None;
    }
    Some(Table { head: head.iter().map(|h| h.to_string()).collect(), right: Vec::new(), rows }.align_from(1))
}

/// Every language any run has, sorted.
fn languages(runs: &[Run]) -> Vec<String> {
    let set: BTreeSet<&String> = runs.iter().flat_map(|r| r.summary.per_language.keys()).collect();
    set.into_iter().cloned().collect()
}

/// Rows are languages, one column per run: fail-to-pass over judged cases.
fn language_table(runs: &[Run]) -> Table {
    let mut head = vec!["language".to_string()];
    head.extend(runs.iter().map(|r| r.label.clone()));
    let rows = languages(runs)
        .into_iter()
        .map(|lang| {
            let mut row = vec![Cell::new(&lang)];
            for r in runs {
                row.push(match r.summary.per_language.get(&lang) {
                    Some(t) => Cell::num(frac_pct(t.fail_to_pass, t.judged())),
                    None => Cell { class: Some("missing"), ..Cell::new("–") },
                });
            }
            row
        })
        .collect();
    Table { head, right: Vec::new(), rows }.align_from(1)
}

/// A case's outcome in one run, in a few words.
fn verdict(c: &CaseResult) -> Cell {
    let reason = c.reason.as_deref().map(one_line).filter(|r| !r.is_empty());
    let with = |what: &str, class| match &reason {
        Some(why) => Cell {
            title: Some(why.clone()),
            class: Some(class),
            ..Cell::new(format!("{what}: {}", truncate(why, REASON_CHARS)))
        },
        None => Cell { class: Some(class), ..Cell::new(what) },
    };
    match c.status {
        CaseStatus::Invalid => with("invalid", "invalid"),
        CaseStatus::AdapterError => with("adapter error", "error"),
        CaseStatus::Scored => {
            let (text, class) = if c.fail_to_pass {
                ("F→P", Some("f2p"))
            } else if c.test_files.is_empty() && c.before.is_none() {
                ("no test", None)
            } else if c.fail_before {
                ("fails before only", None)
            } else {
                ("passes before", None)
            };
            let before = c.before.as_ref().and_then(|b| b.failure.as_ref().or(b.error.as_ref()));
            let title = before.map(|b| format!("before the fix: {b}")).or(reason);
            Cell { title, class, ..Cell::new(text) }
        }
    }
}

/// Rows are case ids (every run's, sorted), one column per run with the verdict.
fn case_table(runs: &[Run]) -> Table {
    let mut ids: BTreeMap<&str, &str> = BTreeMap::new();
    for r in runs {
        for c in &r.record.cases {
            ids.entry(c.case_id.as_str()).or_insert(c.language.as_str());
        }
    }
    let mut head = vec!["case".to_string(), "language".to_string()];
    head.extend(runs.iter().map(|r| r.label.clone()));
    let rows = ids
        .into_iter()
        .map(|(id, lang)| {
            let mut row = vec![Cell::new(id), Cell::new(lang)];
            for r in runs {
                row.push(match r.cases.get(id) {
                    Some(c) => verdict(c),
                    None => Cell { class: Some("missing"), ..Cell::new("–") },
                });
            }
            row
        })
        .collect();
    Table { head, right: vec![false; runs.len() + 2], rows }
}

// Charts: plain SVG, laid out by hand in a fixed-width view box that scales down.

const CHART_W: f64 = 760.0;

/// A chart's opening tag and its `<title>`.
fn svg_open(s: &mut String, id: &str, h: f64, title: &str) {
    let _ = writeln!(
        s,
        "<svg id=\"{id}\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{CHART_W}\" height=\"{h:.0}\" \
         viewBox=\"0 0 {CHART_W} {h:.0}\" role=\"img\" aria-labelledby=\"{id}-title\">"
    );
    let _ = writeln!(s, "<title id=\"{id}-title\">{}</title>", esc(title));
}

/// A text element; `extra` holds further attributes (already escaped).
fn text(s: &mut String, x: f64, y: f64, anchor: &str, extra: &str, content: &str) {
    let _ = writeln!(s, "<text x=\"{x:.1}\" y=\"{y:.1}\" text-anchor=\"{anchor}\"{extra}>{}</text>", esc(content));
}

fn line(s: &mut String, x1: f64, y1: f64, x2: f64, y2: f64, class: &str) {
    let _ = writeln!(s, "<line class=\"{class}\" x1=\"{x1:.1}\" y1=\"{y1:.1}\" x2=\"{x2:.1}\" y2=\"{y2:.1}\"/>");
}

/// A y-axis label, turned to run along the axis.
fn y_label(s: &mut String, x: f64, y: f64, content: &str) {
    let _ = writeln!(
        s,
        "<text x=\"{x:.1}\" y=\"{y:.1}\" text-anchor=\"middle\" transform=\"rotate(-90 {x:.1} {y:.1})\">{}</text>",
        esc(content)
    );
}

/// A bar for run `i`, with a tooltip.
fn bar(s: &mut String, i: usize, color: &str, (x, y, w, h): (f64, f64, f64, f64), tip: &str) {
    let _ = writeln!(
        s,
        "<rect class=\"bar\" data-run=\"{i}\" x=\"{x:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{color}\"><title>{}</title></rect>",
        w.max(0.0),
        h.max(0.0),
        esc(tip)
    );
}

/// Horizontal bars: each run's fail-to-pass rate, with `n/N`.
fn chart_adapter(runs: &[Run]) -> String {
    let (left, right, top, row) = (250.0, 110.0, 12.0, 30.0);
    let plot_w = CHART_W - left - right;
    let plot_h = row * runs.len().max(1) as f64;
    let h = top + plot_h + 52.0;
    let mut s = String::new();
    svg_open(&mut s, "chart-adapter", h, "Fail-to-pass rate per run");
    for k in 0..=4 {
        let x = left + plot_w * k as f64 / 4.0;
        line(&mut s, x, top, x, top + plot_h, "grid");
        text(&mut s, x, top + plot_h + 16.0, "middle", "", &format!("{}%", k * 25));
    }
    if runs.is_empty() {
        text(&mut s, left + plot_w / 2.0, top + plot_h / 2.0, "middle", "", "no runs");
    }
    for (i, r) in runs.iter().enumerate() {
        let t = &r.summary.total;
        let y = top + row * i as f64;
        let mid = y + row / 2.0 + 4.0;
        text(&mut s, left - 8.0, mid, "end", "", &truncate(&r.label, 40));
        let _ = writeln!(
            s,
            "<rect class=\"track\" x=\"{left:.1}\" y=\"{:.1}\" width=\"{plot_w:.1}\" height=\"{:.1}\"/>",
            y + 5.0,
            row - 10.0
        );
        let f = frac_pct(t.fail_to_pass, t.judged());
        let geom = (left, y + 5.0, plot_w * rate(t.fail_to_pass, t.judged()), row - 10.0);
        bar(&mut s, i, r.color, geom, &format!("{} ({}): {f} fail-to-pass", r.label, r.record.run_id));
        text(&mut s, left + plot_w + 8.0, mid, "start", "", &f);
    }
    line(&mut s, left, top, left, top + plot_h, "axis");
    line(&mut s, left, top + plot_h, left + plot_w, top + plot_h, "axis");
    text(&mut s, left + plot_w / 2.0, h - 10.0, "middle", "", "fail-to-pass rate (% of judged cases)");
    y_label(&mut s, 14.0, top + plot_h / 2.0, "run (adapter)");
    s.push_str("</svg>\n");
    s
}

/// A legend of runs, wrapped to the chart's width; returns its height.
fn legend(s: &mut String, runs: &[Run], x0: f64, y0: f64, max_x: f64) -> f64 {
    let (mut x, mut y) = (x0, y0);
    for (i, r) in runs.iter().enumerate() {
        let label = truncate(&r.label, 40);
        let w = 18.0 + 7.0 * label.chars().count() as f64 + 18.0;
        if x > x0 && x + w > max_x {
            x = x0;
            y += 18.0;
        }
        let _ = writeln!(
            s,
            "<rect class=\"swatch\" data-run=\"{i}\" x=\"{x:.1}\" y=\"{:.1}\" width=\"12\" height=\"12\" fill=\"{}\"/>",
            y - 10.0,
            r.color
        );
        text(s, x + 17.0, y, "start", "", &label);
        x += w;
    }
    if runs.is_empty() {
        0.0
    } else {
        y - y0 + 18.0
    }
}

/// Grouped vertical bars: per language, one bar per run, with a legend above.
fn chart_language(runs: &[Run]) -> String {
    let langs = languages(runs);
    let (left, right, plot_h) = (64.0, 16.0, 220.0);
    let plot_w = CHART_W - left - right;
    // The legend's height decides where the plot starts: draw it into a scratch string first.
    let mut leg = String::new();
    let leg_h = legend(&mut leg, runs, left, 20.0, CHART_W - right);
    let top = 20.0 + leg_h + 8.0;
    let h = top + plot_h + 56.0;
    let mut s = String::new();
    svg_open(&mut s, "chart-language", h, "Fail-to-pass rate per language, per run");
    s.push_str(&leg);
    let base = top + plot_h;
    for k in 0..=4 {
        let y = base - plot_h * k as f64 / 4.0;
        line(&mut s, left, y, left + plot_w, y, "grid");
        text(&mut s, left - 6.0, y + 4.0, "end", "", &format!("{}%", k * 25));
    }
    if langs.is_empty() {
        text(&mut s, left + plot_w / 2.0, base - plot_h / 2.0, "middle", "", "no cases");
    }
    let group_w = plot_w / langs.len().max(1) as f64;
    let bar_w = (group_w * 0.8 / runs.len().max(1) as f64).min(44.0);
    for (g, lang) in langs.iter().enumerate() {
        let gx = left + group_w * g as f64;
        let start = gx + (group_w - bar_w * runs.len() as f64) / 2.0;
        for (i, r) in runs.iter().enumerate() {
            let x = start + bar_w * i as f64;
            let Some(t) = r.summary.per_language.get(lang) else {
                text(&mut s, x + bar_w / 2.0, base - 4.0, "middle", " class=\"small\"", "–");
                continue;
            };
            let f = frac_pct(t.fail_to_pass, t.judged());
            let bh = plot_h * rate(t.fail_to_pass, t.judged());
            bar(&mut s, i, r.color, (x + 1.0, base - bh, bar_w - 2.0, bh), &format!("{} · {lang}: {f}", r.label));
            if bar_w >= 30.0 {
                let n = format!("{}/{}", t.fail_to_pass, t.judged());
                text(&mut s, x + bar_w / 2.0, base - bh - 4.0, "middle", " class=\"small\"", &n);
            }
        }
        text(&mut s, gx + group_w / 2.0, base + 18.0, "middle", "", lang);
    }
    line(&mut s, left, top, left, base, "axis");
    line(&mut s, left, base, left + plot_w, base, "axis");
    text(&mut s, left + plot_w / 2.0, h - 10.0, "middle", "", "language");
    y_label(&mut s, 16.0, base - plot_h / 2.0, "fail-to-pass rate (%)");
    s.push_str("</svg>\n");
    s
}

/// A round step for about four ticks up to `max` (1, 2 or 5 times a power of ten).
fn nice_step(max: f64) -> f64 {
    let raw = max / 4.0;
    let mag = 10f64.powf(raw.log10().floor());
    let norm = raw / mag;
    mag * if norm <= 1.0 {
        1.0
    } else if norm <= 2.0 {
        2.0
    } else if norm <= 5.0 {
        5.0
    } else {
        10.0
    }
}

/// Scatter: each run's cost (x) against its fail-to-pass rate (y), labelled.
fn chart_cost(runs: &[Run]) -> String {
    let (left, right, top, plot_h) = (72.0, 190.0, 28.0, 240.0);
    let plot_w = CHART_W - left - right;
    let h = top + plot_h + 56.0;
    let base = top + plot_h;
    let max_cost = runs.iter().map(cost).fold(0.0, f64::max);
    let mut s = String::new();
    svg_open(&mut s, "chart-cost", h, "Cost against fail-to-pass rate, per run");
    for k in 0..=4 {
        let y = base - plot_h * k as f64 / 4.0;
        line(&mut s, left, y, left + plot_w, y, "grid");
        text(&mut s, left - 10.0, y + 4.0, "end", "", &format!("{}%", k * 25));
    }
    // The x range: round ticks up to the largest cost, or just 0 when nothing cost anything.
    let x_max = if max_cost > 0.0 {
        let step = nice_step(max_cost);
        let n = (max_cost / step).ceil().max(1.0) as usize;
        let decimals = if step >= 1.0 { 0 } else { (-step.log10().floor()).max(0.0) as usize };
        for k in 0..=n {
            let v = step * k as f64;
            let x = left + plot_w * k as f64 / n as f64;
            line(&mut s, x, top, x, base, "grid");
            text(&mut s, x, base + 16.0, "middle", "", &format!("${v:.decimals$}"));
        }
        step * n as f64
    } else {
        text(&mut s, left, base + 16.0, "middle", "", "$0");
        text(
            &mut s,
            left + plot_w / 2.0,
            top + 14.0,
            "middle",
            " class=\"small\"",
            "No run had a cost: every point is at x = 0.",
        );
        1.0
    };
    line(&mut s, left, top, left, base, "axis");
    line(&mut s, left, base, left + plot_w, base, "axis");
    let mut placed: Vec<(f64, f64)> = Vec::new();
    for (i, r) in runs.iter().enumerate() {
        let t = &r.summary.total;
        let f = frac_pct(t.fail_to_pass, t.judged());
        let x = left + plot_w * cost(r) / x_max;
        let y = base - plot_h * rate(t.fail_to_pass, t.judged());
        let _ = writeln!(
            s,
            "<circle class=\"point\" data-run=\"{i}\" cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"6\" fill=\"{}\" stroke=\"#fff\" \
             stroke-width=\"1.5\"><title>{}</title></circle>",
            r.color,
            esc(&format!("{} ({}): ${:.4}, {f} fail-to-pass", r.label, r.record.run_id, cost(r)))
        );
        // Labels sit above-right of their point, clear of the axis; labels of points close
        // together are stacked rather than drawn over each other.
        let mut ly = y - 8.0;
        while placed.iter().any(|&(px, py)| (px - x).abs() < 140.0 && (py - ly).abs() < 13.0) {
            ly += 13.0;
        }
        placed.push((x, ly));
        text(&mut s, x + 10.0, ly, "start", "", &format!("{} {f}", truncate(&r.label, 28)));
    }
    text(&mut s, left + plot_w / 2.0, h - 10.0, "middle", "", "cost of the run (USD)");
    y_label(&mut s, 16.0, base - plot_h / 2.0, "fail-to-pass rate (%)");
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::super::RunSummary;
    use super::*;

    const HOSTILE: &str = "<script>alert(1)</script>";

    fn case(id: &str, lang: &str, status: CaseStatus, fail_before: bool, pass_after: bool) -> CaseResult {
        let scored = status == CaseStatus::Scored;
        CaseResult {
            case_id: id.into(),
            language: lang.into(),
            status,
            reason: None,
            fail_before,
            pass_after,
            fail_to_pass: fail_before && pass_after,
            matches_issue: None,
            before: scored.then(|| RunSummary {
                status: if fail_before { "failed" } else { "passed" }.into(),
                passed: u32::from(!fail_before),
                failed: u32::from(fail_before),
                failure: fail_before.then(|| "ValueError: x < 0 & y".into()),
                error: None,
            }),
            after: None,
            test_patch: None,
            test_files: if scored { vec!["tests/test_x.py".into()] } else { Vec::new() },
            claimed: None,
            probe: None,
            cost_usd: 0.0,
            model_calls: 0,
            prompt_tokens: 0,
            completion_tokens: 0,
            adapter_secs: 0.0,
            wall_secs: 1.0,
            environment: None,
        }
    }

    /// 13 case ids: 5 Python, 4 TypeScript, 4 Java; one id holds `<`, `&` and `|`.
    fn ids() -> Vec<(String, &'static str)> {
        let mut v: Vec<(String, &str)> = (1..=5).map(|i| (format!("py-{i}"), "python")).collect();
        v.extend((1..=4).map(|i| (format!("ts-{i}"), "typescript")));
        v.extend((1..=3).map(|i| (format!("java-{i}"), "java")));
        v.push(("java-<4>&|x".into(), "java"));
        v
    }

    fn record(run_id: &str, adapter: AdapterInfo, cases: Vec<CaseResult>) -> BenchRecord {
        BenchRecord {
            run_id: run_id.into(),
            started_at: 0,
            reproagent_version: "0.0.0".into(),
            adapter,
            suite: "fixtures/bench".into(),
            sandbox: "local".into(),
            environment: None,
            jobs: 2,
            wall_secs: 75.0,
            cases,
        }
    }

    fn named(name: &str) -> AdapterInfo {
        AdapterInfo { name: name.into(), ..AdapterInfo::default() }
    }

    /// gold 13/13, empty 0/13, and a model run: 6 of 12 judged fail-to-pass, one invalid
    /// case (hostile reason), one adapter error, one without a test, a cost.
    fn records() -> Vec<BenchRecord> {
        let gold = ids().iter().map(|(id, l)| case(id, l, CaseStatus::Scored, true, true)).collect();
        let empty = ids().iter().map(|(id, l)| case(id, l, CaseStatus::Scored, false, true)).collect();
        let model: Vec<CaseResult> = ids()
            .iter()
            .enumerate()
            .map(|(i, (id, l))| {
                let mut c = match i {
                    0..=5 => case(id, l, CaseStatus::Scored, true, true),
                    6 => case(id, l, CaseStatus::Scored, true, false),
                    7 | 8 => case(id, l, CaseStatus::Scored, false, true),
                    9 => {
                        let mut c = case(id, l, CaseStatus::Scored, false, false);
                        c.test_files.clear();
                        c.before = None;
                        c.reason = Some("the reproducer wrote no test".into());
                        c
                    }
                    10 => {
                        let mut c = case(id, l, CaseStatus::Invalid, false, false);
                        c.reason = Some(format!("gold_patch does not apply | {HOSTILE}\nsecond line"));
                        c
                    }
                    11 => {
                        let mut c = case(id, l, CaseStatus::AdapterError, false, false);
                        c.reason = Some(format!("timeout & then {}", "very long ".repeat(20)));
                        c
                    }
                    _ => case(id, l, CaseStatus::Scored, true, true),
                };
                c.cost_usd = 0.01;
                c.model_calls = 3;
                c.matches_issue = (i < 4).then_some(i % 2 == 0);
                c
            })
            .collect();
        let info = AdapterInfo { model: Some("gpt-4o-mini".into()), ..named("zero-shot") };
        vec![
            record("r1-gold", named("gold"), gold),
            record("r2-empty", named("empty"), empty),
            record("r3-zs", info, model),
        ]
    }

    fn row<'a>(md: &'a str, start: &str) -> &'a str {
        md.lines().find(|l| l.starts_with(start)).unwrap_or_else(|| panic!("no row {start:?} in\n{md}"))
    }

    #[test]
    fn markdown_summary_rows_and_counts() {
        let md = markdown(&records());
        assert_eq!(
            row(&md, "| r1-gold |"),
            "| r1-gold | gold | 13 | 13 | 13/13 (100%) | 13/13 | 0/0 | 0 | 0 | 0.0000 | 0 | 1m 15s |"
        );
        assert_eq!(
            row(&md, "| r2-empty |"),
            "| r2-empty | empty | 13 | 13 | 0/13 (0%) | 0/13 | 0/0 | 0 | 0 | 0.0000 | 0 | 1m 15s |"
        );
        // Judged 12: the invalid case is left out, the adapter error counted as a failure.
        assert_eq!(
            row(&md, "| r3-zs |"),
            "| r3-zs | zero-shot (gpt-4o-mini) | 13 | 12 | 7/12 (58%) | 8/12 | 2/4 | 1 | 1 | 0.1300 | 39 | 1m 15s |"
        );
        assert_eq!(row(&md, "| language |"), "| language | gold | empty | zero-shot (gpt-4o-mini) |");
        assert_eq!(row(&md, "| python |"), "| python | 5/5 (100%) | 0/5 (0%) | 5/5 (100%) |");
        assert_eq!(row(&md, "| java |"), "| java | 4/4 (100%) | 0/4 (0%) | 1/3 (33%) |");
        assert_eq!(row(&md, "| typescript |"), "| typescript | 4/4 (100%) | 0/4 (0%) | 1/4 (25%) |");
        assert!(md.contains("How to read this"));
    }

    #[test]
    fn markdown_case_verdicts_escape_pipes_and_newlines() {
        let md = markdown(&records());
        assert_eq!(row(&md, "| py-1 |"), "| py-1 | python | F→P | passes before | F→P |");
        assert_eq!(row(&md, "| ts-2 |"), "| ts-2 | typescript | F→P | passes before | fails before only |");
        assert_eq!(row(&md, "| ts-4 |"), "| ts-4 | typescript | F→P | passes before | passes before |");
        assert_eq!(row(&md, "| java-1 |"), "| java-1 | java | F→P | passes before | no test |");
        let odd = row(&md, "| java-\\<4>&\\|x |");
        assert!(odd.ends_with("| F→P | passes before | F→P |"), "{odd}");
        assert!(
            md.match_indices('<').all(|(i, _)| md[..i].ends_with('\\')),
            "no tag opens where the Markdown is rendered"
        );
        let invalid = row(&md, "| java-2 |");
        assert!(invalid.contains("| invalid: gold_patch does not apply \\| \\<script>"), "{invalid}");
        assert!(!invalid.contains("second line"), "cut to {REASON_CHARS} characters: {invalid}");
        let error = row(&md, "| java-3 |");
        let cell = error.rsplit(" | ").next().unwrap().trim_end_matches(" |");
        assert!(cell.starts_with("adapter error: timeout & then very long"), "{cell}");
        assert!(cell.ends_with('…') && cell.chars().count() <= "adapter error: ".len() + REASON_CHARS, "{cell}");
        // Sorted case ids; every table line is one row of cells.
        let cases: Vec<&str> = md.lines().filter(|l| l.starts_with("| java-") || l.starts_with("| py-")).collect();
        assert_eq!(cases.first().copied(), Some(row(&md, "| java-1 |")));
        for l in md.lines().filter(|l| l.starts_with('|')) {
            assert!(l.ends_with('|'), "{l}");
        }
    }

    /// The page as XML. `<!DOCTYPE html>` is a DTD to roxmltree, refused unless allowed.
    fn parse(page: &str) -> Result<roxmltree::Document<'_>, roxmltree::Error> {
        let opts = roxmltree::ParsingOptions { allow_dtd: true, ..roxmltree::ParsingOptions::default() };
        roxmltree::Document::parse_with_options(page, opts)
    }

    #[test]
    fn doctype_is_the_only_dtd() {
        let page = html(&records());
        let rest = page.strip_prefix("<!DOCTYPE html>\n").expect("starts with the doctype");
        roxmltree::Document::parse(rest).expect("without its doctype the page parses with the defaults");
    }

    fn doc_svg<'a, 'i>(doc: &'a roxmltree::Document<'i>, id: &str) -> roxmltree::Node<'a, 'i> {
        doc.descendants()
            .find(|n| n.has_tag_name("svg") && n.attribute("id") == Some(id))
            .unwrap_or_else(|| panic!("no svg {id}"))
    }

    #[test]
    fn html_is_well_formed_with_three_charts() {
        let recs = records();
        let page = html(&recs);
        assert!(page.starts_with("<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\""));
        let doc = parse(&page).expect("the page parses as XML");
        for id in ["chart-adapter", "chart-language", "chart-cost"] {
            let svg = doc_svg(&doc, id);
            assert!(svg.children().any(|n| n.has_tag_name("title")), "{id} has a title");
            assert!(svg.descendants().filter(|n| n.has_tag_name("text")).count() >= 3, "{id} has labels");
            for i in 0..recs.len() {
                let marks = svg
                    .descendants()
                    .filter(|n| {
                        (n.has_tag_name("rect") || n.has_tag_name("circle"))
                            && n.attribute("data-run") == Some(&i.to_string())
                    })
                    .count();
                assert!(marks >= 1, "{id}: nothing drawn for run {i}");
            }
        }
        // Three tables: summary (a row per run), languages (3), cases (13).
        let rows: Vec<usize> = doc
            .descendants()
            .filter(|n| n.has_tag_name("tbody"))
            .map(|b| b.children().filter(|n| n.has_tag_name("tr")).count())
            .collect();
        assert_eq!(rows, vec![3, 3, 13]);
        assert!(!page.contains("No run had a cost"));
        assert!(!page.contains("<link") && !page.contains(" src=") && !page.contains("<script"), "self-contained");
    }

    #[test]
    fn html_escapes_hostile_text() {
        let page = html(&records());
        assert!(!page.contains(HOSTILE));
        assert!(!page.contains("<script"));
        assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(page.contains("java-&lt;4&gt;&amp;|x"));
        // The text survives as text: the parsed page holds it in a cell's tooltip.
        let doc = parse(&page).unwrap();
        assert!(doc.descendants().filter_map(|n| n.attribute("title")).any(|t| t.contains(HOSTILE)));
        assert!(doc.descendants().all(|n| !n.has_tag_name("script")));
    }

    #[test]
    fn html_without_costs_or_runs_still_parses() {
        let recs: Vec<BenchRecord> = records().into_iter().take(2).collect();
        let page = html(&recs);
        let doc = parse(&page).unwrap();
        let cost = doc_svg(&doc, "chart-cost");
        assert_eq!(cost.descendants().filter(|n| n.has_tag_name("circle")).count(), 2);
        assert!(page.contains("No run had a cost"));
        for c in cost.descendants().filter(|n| n.has_tag_name("circle")) {
            assert_eq!(c.attribute("cx"), Some("72.0"), "at x = 0");
        }

        let page = html(&[]);
        parse(&page).unwrap();
        assert!(markdown(&[]).contains("No runs given."));
    }

    #[test]
    fn control_characters_do_not_break_the_xml() {
        let mut recs = records();
        recs[2].cases[10].reason = Some("\u{1b}[31mred\u{1b}[0m\u{0}".into());
        recs[2].run_id = "r3 \"quoted\" 'x'".into();
        let page = html(&recs);
        parse(&page).unwrap();
    }

    #[test]
    fn rates_and_labels() {
        assert_eq!(frac_pct(199, 200), "199/200 (99%)");
        assert_eq!(frac_pct(1, 1000), "1/1000 (1%)");
        assert_eq!(frac_pct(0, 0), "0/0 (n/a)");
        assert_eq!(duration(12.34), "12.3 s");
        assert_eq!(duration(3725.0), "1h 02m");
        assert!((nice_step(0.13) - 0.05).abs() < 1e-12);
        // Two runs of one adapter are told apart by run id.
        let recs = vec![record("a", named("gold"), vec![]), record("b", named("gold"), vec![])];
        let labels: Vec<String> = runs(&recs).into_iter().map(|r| r.label).collect();
        assert_eq!(labels, vec!["gold [a]", "gold [b]"]);
    }

    #[test]
    fn the_probe_table_shows_how_often_the_probe_agreed_with_the_gold_fail_to_pass() {
        // No run recorded a probe: no table.
        assert!(!markdown(&records()).contains("Fix probe"));
        let probed = |id: &str, f2p: bool, probe: &str| {
            let mut c = case(id, "python", CaseStatus::Scored, true, f2p);
            c.probe = Some(probe.into());
            c
        };
        let cases = vec![
            probed("a", true, "passes"),
            probed("b", true, "passes"),
            probed("c", false, "fails"),
            probed("d", false, "passes"),
            probed("e", true, "fails"),
            probed("f", true, "no_fix"),
            case("g", "python", CaseStatus::Scored, true, true),
        ];
        let md = markdown(&[record("r9-pipeline", named("pipeline"), cases)]);
        assert!(md.contains("## Fix probe against the gold fail-to-pass"), "{md}");
        // 6 probed: 3 passes, 2 fails, 1 no fix; agreed on a, b, c of the 5 with a verdict.
        assert_eq!(row(&md, "| r9-pipeline | 6 |"), "| r9-pipeline | 6 | 3 | 2 | 1 | 3/5 (60%) | 1 | 1 |");
        assert!(html(&[record("r9", named("pipeline"), vec![probed("a", true, "passes")])]).contains("Fix probe"));
    }
}
