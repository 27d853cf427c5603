//! Ctrl-C and SIGTERM for the long commands (`reproduce`, `bench run`): whatever the
//! process was doing, the live sandbox resources are torn down, every run directory
//! without an outcome gets one that says where it stopped, and the process exits 130
//! (143 for SIGTERM).
//!
//! The sandboxes register what they hold while they hold it ([`register_container`],
//! [`register_dir`], [`register_group`]); a run directory registers itself with a
//! callback that writes its `error` outcome ([`register_run`]). Each registration is a
//! [`Registration`] guard that unregisters on drop.
//!
//! [`install`] blocks SIGINT and SIGTERM in the calling thread, so in every thread
//! spawned after it, and starts one thread that waits for them with `sigwait`. The
//! handler therefore runs whatever the main thread is doing (a blocking model call, an
//! await on the sandbox); it never depends on the main thread reaching an await point.
//! Child processes do not inherit the mask (std resets it before `exec`).
//!
//! The handler first closes the write gate ([`write_gate`]): every artifact write goes
//! through it, so once the handler holds it the main thread can no longer write an
//! outcome (a command it sees dying under it would otherwise read as `not reproduced`).
//! Likewise every write into a registered temp dir (the copy, the shims, the files the
//! agent writes) holds the fill gate ([`filling`]) shared; the handler takes it whole
//! before deleting the dirs, so no thread recreates a dir after it is gone (a
//! `create_dir_all` one step behind the delete would, and the exit would leave it).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// What a run directory does when interrupted: write its outcome with this reason, and
/// say in one line what it did (printed on stderr).
pub type OnInterrupt = Box<dyn FnOnce(&str) -> String + Send>;

enum Resource {
    Container(String),
    Dir(PathBuf),
    Group(i32),
    Run { stage: String, on_interrupt: OnInterrupt },
}

static REGISTRY: Mutex<BTreeMap<u64, Resource>> = Mutex::new(BTreeMap::new());
static NEXT: AtomicU64 = AtomicU64::new(1);
static INTERRUPTED: AtomicBool = AtomicBool::new(false);
static GATE: Mutex<()> = Mutex::new(());
static FILL: std::sync::RwLock<()> = std::sync::RwLock::new(());
/// How the interrupt came: `Ctrl-C` or `SIGTERM`.
static SIGNAL: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();

fn registry() -> MutexGuard<'static, BTreeMap<u64, Resource>> {
    REGISTRY.lock().unwrap_or_else(|p| p.into_inner())
}

/// A registered resource; dropping it unregisters (the owner cleaned up itself).
#[must_use = "the resource is unregistered when this guard drops"]
#[derive(Debug)]
pub struct Registration(u64);

impl Registration {
    /// For a run directory: the stage it is in now, named in an interrupted outcome.
    pub fn set_stage(&self, stage: &str) {
        if let Some(Resource::Run { stage: s, .. }) = registry().get_mut(&self.0) {
            *s = stage.to_string();
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        registry().remove(&self.0);
    }
}

/// Register a resource. Once an interrupt is being handled, a resource made since (by a
/// worker still running: a bench case opening its next sandbox) is cleaned up at once,
/// and the thread that made it waits for the exit.
fn register(r: Resource) -> Registration {
    let mut reg = registry();
    if interrupted() {
        drop(reg);
        let name = SIGNAL.get().copied().unwrap_or("Ctrl-C");
        let lines = cleanup(BTreeMap::from([(0, r)]), name);
        for line in lines {
            eprintln!("{line}");
        }
        park_forever();
    }
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    reg.insert(id, r);
    Registration(id)
}

/// Set once this process has asked the engine for a container: from then on an
/// interrupt looks for this process's containers even when none is registered yet (one
/// created while the signal came is not registered until its id comes back).
static CONTAINERS_ASKED: AtomicBool = AtomicBool::new(false);

/// Say that a container is about to be created (before the request goes out).
pub fn creating_container() {
    CONTAINERS_ASKED.store(true, Ordering::SeqCst);
}

/// A Docker container to remove (force) on an interrupt.
pub fn register_container(id: &str) -> Registration {
    register(Resource::Container(id.to_string()))
}

/// A temporary directory to delete on an interrupt.
pub fn register_dir(path: &Path) -> Registration {
    register(Resource::Dir(path.to_path_buf()))
}

/// A process group to kill on an interrupt.
pub fn register_group(pgid: i32) -> Registration {
    register(Resource::Group(pgid))
}

/// A run directory without an outcome yet: on an interrupt `on_interrupt` is called
/// with the reason (`interrupted (Ctrl-C) during <stage>`).
pub fn register_run(stage: &str, on_interrupt: OnInterrupt) -> Registration {
    register(Resource::Run { stage: stage.to_string(), on_interrupt })
}

/// Whether an interrupt is being handled (the process is about to exit).
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Hold this while writing a run's artifacts. Once an interrupt is being handled it
/// never returns: the handler alone writes, then exits the process.
pub fn write_gate() -> MutexGuard<'static, ()> {
    let g = GATE.lock().unwrap_or_else(|p| p.into_inner());
    if interrupted() {
        park_forever();
    }
    g
}

/// Hold this while writing into a registered temp dir (one file or directory at a time:
/// the handler waits for the holders before it deletes the dirs). Shared: writers do not
/// wait for each other. Once an interrupt is being handled it never returns.
pub fn filling() -> std::sync::RwLockReadGuard<'static, ()> {
    let g = FILL.read().unwrap_or_else(|p| p.into_inner());
    if interrupted() {
        drop(g);
        park_forever();
    }
    g
}

/// Wait for the handler to exit the process, if an interrupt is being handled; return
/// at once otherwise. For callers about to exit with their own code.
pub fn wait_if_interrupted() {
    if interrupted() {
        park_forever();
    }
}

fn park_forever() -> ! {
    loop {
        std::thread::park();
    }
}

fn signal_set() -> libc::sigset_t {
    // SAFETY: sigemptyset initializes the set; sigaddset adds valid signal numbers.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        set
    }
}

/// Install the handler: block SIGINT and SIGTERM here (call it before any thread is
/// spawned, so every later thread inherits the mask) and start the thread that waits
/// for them. Calling it twice does nothing the second time.
pub fn install() -> std::io::Result<()> {
    static INSTALLED: AtomicBool = AtomicBool::new(false);
    if INSTALLED.swap(true, Ordering::SeqCst) {
        return Ok(());
    }
    let set = signal_set();
    // SAFETY: changes this thread's signal mask only.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(std::io::Error::from_raw_os_error(rc));
    }
    std::thread::Builder::new().name("reproagent-signals".into()).spawn(move || loop {
        let mut sig: libc::c_int = 0;
        // SAFETY: the set holds blocked signals; sig is a valid out pointer.
        if unsafe { libc::sigwait(&set, &mut sig) } == 0 {
            handle(sig);
        }
    })?;
    Ok(())
}

/// What the handler does, in order: close the write gate, kill the process groups,
/// remove the containers, delete the temp dirs, write the outcomes, exit. A second
/// signal meanwhile exits at once.
fn handle(sig: libc::c_int) -> ! {
    let (name, code) = if sig == libc::SIGTERM { ("SIGTERM", 143) } else { ("Ctrl-C", 130) };
    let gate = GATE.lock().unwrap_or_else(|p| p.into_inner());
    let _ = SIGNAL.set(name);
    INTERRUPTED.store(true, Ordering::SeqCst);
    eprintln!("\ninterrupted ({name}): cleaning up the sandbox (again to exit at once)");
    // A second signal while cleaning up (a hung engine): exit without waiting.
    let _ = std::thread::Builder::new().name("reproagent-signals-2".into()).spawn(move || {
        let set = signal_set();
        let mut sig: libc::c_int = 0;
        // SAFETY: as in `install`.
        if unsafe { libc::sigwait(&set, &mut sig) } == 0 {
            std::process::exit(code);
        }
    });
    let resources = std::mem::take(&mut *registry());
    let report = cleanup(resources, name);
    for line in report {
        eprintln!("{line}");
    }
    drop(gate);
    std::process::exit(code);
}

fn cleanup(resources: BTreeMap<u64, Resource>, name: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let (mut containers, mut dirs, mut runs) = (Vec::new(), Vec::new(), Vec::new());
    for r in resources.into_values() {
        match r {
            Resource::Group(p) if p > 1 => {
                // SAFETY: killing a process group the local sandbox created.
                unsafe {
                    libc::kill(-p, libc::SIGKILL);
                }
            }
            Resource::Group(_) => {}
            Resource::Container(id) => containers.push(id),
            Resource::Dir(d) => dirs.push(d),
            Resource::Run { stage, on_interrupt } => runs.push((stage, on_interrupt)),
        }
    }
    // Every write under way into a dir ends before the delete; later ones never start
    // (`filling` parks once `INTERRUPTED` is set, which it is by now).
    let _fill = if dirs.is_empty() { None } else { Some(FILL.write().unwrap_or_else(|p| p.into_inner())) };
    if !containers.is_empty() || CONTAINERS_ASKED.load(Ordering::SeqCst) {
        // Its own thread: this may run on a thread inside a runtime (a late registration).
        lines.extend(std::thread::spawn(move || remove_containers(containers)).join().unwrap_or_default());
    }
    for d in dirs {
        // Another thread may still be copying into it: try again while it fills.
        let mut last = None;
        for _ in 0..20 {
            match std::fs::remove_dir_all(&d) {
                Ok(()) => {
                    last = None;
                    break;
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    last = None;
                    break;
                }
                Err(e) => last = Some(e),
            }
            std::thread::sleep(std::time::Duration::from_millis(25));
        }
        if let Some(e) = last {
            lines.push(format!("could not remove {}: {e}", d.display()));
        }
    }
    for (stage, f) in runs {
        lines.push(f(&format!("interrupted ({name}) during {stage}")));
    }
    lines
}

/// Remove containers from a fresh runtime (the process's own runtime may be busy or
/// gone), within a bound so a hung engine cannot keep the process alive; then any other
/// container of this process's sessions (created but not yet registered when the
/// signal came: session ids start with the pid).
fn remove_containers(mut ids: Vec<String>) -> Vec<String> {
    use bollard::query_parameters::RemoveContainerOptions;
    let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
        return vec![
            "could not start a runtime to remove the containers (`reproagent sandbox clean` removes them)".into()
        ];
    };
    rt.block_on(async move {
        let Ok(d) = bollard::Docker::connect_with_local_defaults() else {
            return vec![
                "could not reach Docker to remove the containers (`reproagent sandbox clean` removes them)".into()
            ];
        };
        let mut lines = Vec::new();
        ids.extend(own_containers(&d).await.into_iter().filter(|c| !ids.contains(c)).collect::<Vec<_>>());
        for id in ids {
            let opts = RemoveContainerOptions { force: true, v: true, ..Default::default() };
            match tokio::time::timeout(Duration::from_secs(8), d.remove_container(&id, Some(opts))).await {
                Ok(Ok(())) => {}
                Ok(Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. })) => {}
                Ok(Err(e)) => {
                    lines.push(format!("could not remove container {id}: {e} (`reproagent sandbox clean` removes it)"))
                }
                Err(_) => {
                    lines.push(format!("removing container {id} timed out (`reproagent sandbox clean` removes it)"))
                }
            }
        }
        lines
    })
}

/// The containers whose session label says this process made them.
async fn own_containers(d: &bollard::Docker) -> Vec<String> {
    use super::docker::SESSION_LABEL;
    use bollard::query_parameters::ListContainersOptions;
    let filters = std::collections::HashMap::from([("label".to_string(), vec![super::CONTAINER_LABEL.to_string()])]);
    let opts = ListContainersOptions { all: true, filters: Some(filters), ..Default::default() };
    let prefix = format!("{}-", std::process::id());
    match tokio::time::timeout(Duration::from_secs(5), d.list_containers(Some(opts))).await {
        Ok(Ok(list)) => list
            .into_iter()
            .filter(|c| c.labels.as_ref().and_then(|l| l.get(SESSION_LABEL)).is_some_and(|s| s.starts_with(&prefix)))
            .filter_map(|c| c.id)
            .collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A write into the dir that started before the delete ends first; what it made is
    /// deleted with the rest. Without the gate the delete runs at once and the late
    /// `create_dir_all` brings the dir back.
    #[test]
    fn the_delete_waits_for_a_write_under_way_and_nothing_comes_back() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("reproagent-sandbox-x");
        std::fs::create_dir_all(dir.join("repo")).unwrap();
        let (held, hold) = std::sync::mpsc::channel();
        let writer = {
            let dir = dir.clone();
            std::thread::spawn(move || {
                let _fill = filling();
                held.send(()).unwrap();
                std::thread::sleep(Duration::from_millis(300));
                std::fs::create_dir_all(dir.join("home")).unwrap();
            })
        };
        hold.recv().unwrap();
        let lines = cleanup(BTreeMap::from([(0, Resource::Dir(dir.clone()))]), "SIGTERM");
        writer.join().unwrap();
        assert!(lines.is_empty(), "{lines:?}");
        assert!(!dir.exists(), "the dir came back after the delete");
    }
}
