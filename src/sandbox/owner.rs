//! Who owns a sandbox, so `sandbox clean` removes what a killed run left and spares
//! what a live one holds. The owner is `<pid>:<start time>` (the start time, in clock
//! ticks since boot from `/proc/<pid>/stat`, tells a reused pid apart). A Docker
//! container carries it as the label [`OWNER_LABEL`]; a local sandbox's temp dir
//! (`reproagent-sandbox-*` in the temp dir) holds it in the file [`OWNER_FILE`].

use std::path::{Path, PathBuf};

/// The container label naming the owning process.
pub const OWNER_LABEL: &str = "reproagent.owner";
/// The file in a local sandbox's temp dir naming the owning process.
pub const OWNER_FILE: &str = "owner";
/// The prefix of a local sandbox's temp dir.
pub const LOCAL_PREFIX: &str = "reproagent-sandbox-";

fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    // Field 22 (starttime) is the 20th after the name.
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// This process as an owner tag.
pub fn this_process() -> String {
    let pid = std::process::id();
    format!("{pid}:{}", start_time(pid).unwrap_or(0))
}

/// Whether the process a tag names is alive (same pid, same start time). A tag that
/// does not parse names no live process.
pub fn alive(tag: &str) -> bool {
    let Some((pid, start)) = tag.trim().split_once(':') else {
        return false;
    };
    let (Ok(pid), Ok(start)) = (pid.parse::<u32>(), start.parse::<u64>()) else {
        return false;
    };
    match start_time(pid) {
        Some(s) => start == 0 || s == start,
        None => false,
    }
}

/// What `sandbox clean` did with one local sandbox dir.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LocalLeft {
    pub dir: PathBuf,
    /// Processes killed that still ran in it.
    pub killed: usize,
}

/// Local sandbox dirs under `tmp` whose owner is dead: the processes still running in
/// them (by working directory) are killed and the dirs removed. A dir without an owner
/// file is left alone: it is being made, or an older reproagent made it and may still
/// be using it.
pub fn clean_local(tmp: &Path) -> (Vec<LocalLeft>, Vec<String>) {
    let mut done = Vec::new();
    let mut errors = Vec::new();
    let Ok(rd) = std::fs::read_dir(tmp) else {
        return (done, errors);
    };
    for e in rd.filter_map(Result::ok) {
        if !e.file_name().to_string_lossy().starts_with(LOCAL_PREFIX) {
            continue;
        }
        let dir = e.path();
        if !std::fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir()) {
            continue;
        }
        match std::fs::read_to_string(dir.join(OWNER_FILE)) {
            Ok(tag) if !alive(&tag) => {}
            _ => continue,
        }
        let canon = dir.canonicalize().unwrap_or_else(|_| dir.clone());
        let killed = kill_inside(&canon);
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => done.push(LocalLeft { dir, killed }),
            Err(err) => errors.push(format!("could not remove {}: {err}", dir.display())),
        }
    }
    done.sort_by(|a, b| a.dir.cmp(&b.dir));
    (done, errors)
}

/// Kill (SIGKILL) every process whose working directory is under `dir`; how many. The
/// signal is delivered asynchronously: this waits (at most [`KILL_WAIT`]) until each
/// killed process is gone or a zombie, so a caller that removes `dir` next, or reports
/// the sandbox cleaned, is not ahead of the kernel.
pub(super) fn kill_inside(dir: &Path) -> usize {
    let mut killed = Vec::new();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return 0;
    };
    for e in rd.filter_map(Result::ok) {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(cwd) = std::fs::read_link(e.path().join("cwd")) else {
            continue;
        };
        if cwd.starts_with(dir) && pid > 1 && pid as u32 != std::process::id() {
            // SAFETY: signalling a process left in a dead run's sandbox.
            if unsafe { libc::kill(pid, libc::SIGKILL) } == 0 {
                killed.push(pid);
            }
        }
    }
    let deadline = std::time::Instant::now() + KILL_WAIT;
    while killed.iter().any(|&p| running(p)) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    killed.len()
}

/// How long [`kill_inside`] waits for the processes it killed to end.
const KILL_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Is `pid` still running (not gone, not a zombie or dead)?
fn running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        let state = s.rfind(')').and_then(|i| s[i + 1..].split_whitespace().next());
        !matches!(state, Some("Z" | "X" | "x"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_dead_or_reused_pid_is_not() {
        assert!(alive(&this_process()));
        let (pid, start) =
            this_process().split_once(':').map(|(a, b)| (a.to_string(), b.parse::<u64>().unwrap())).unwrap();
        assert!(!alive(&format!("{pid}:{}", start + 1)), "same pid, other start time: a reused pid");
        assert!(!alive("4194304:1"), "beyond pid_max");
        assert!(!alive("garbage"));
    }
}
