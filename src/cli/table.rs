//! Plain aligned tables for terminal output.

/// Print rows under headers, columns padded to their widest cell (cells cut at 100
/// characters).
pub fn print(headers: &[String], rows: &[Vec<String>]) {
    let cut = |s: &str| -> String {
        let one_line = s.replace('\n', " ");
        if one_line.chars().count() > 100 {
            format!("{}…", one_line.chars().take(99).collect::<String>())
        } else {
            one_line
        }
    };
    let rows: Vec<Vec<String>> = rows.iter().map(|r| r.iter().map(|c| cut(c)).collect()).collect();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(c.chars().count());
            }
        }
    }
    let line = |cells: &[String]| -> String {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<w$}  ", w = widths[i]));
            }
        }
        s.trim_end().to_string()
    };
    println!("{}", line(headers));
    println!("{}", line(&widths.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>()));
    for r in &rows {
        println!("{}", line(r));
    }
}
