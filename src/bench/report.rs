//! `bench report`: Markdown and HTML from run records (in progress).

use super::BenchRecord;

/// The Markdown comparison of runs (placeholder until the report lands).
pub fn markdown(records: &[BenchRecord]) -> String {
    let mut s = String::from("| run | adapter | fail-to-pass |\n|---|---|---|\n");
    for r in records {
        let t = super::summarize(r).total;
        s.push_str(&format!("| {} | {} | {}/{} |\n", r.run_id, r.adapter.name, t.fail_to_pass, t.judged()));
    }
    s
}

/// The HTML page (placeholder until the report lands).
pub fn html(records: &[BenchRecord]) -> String {
    format!("<!DOCTYPE html><html><body><pre>{}</pre></body></html>", markdown(records))
}
