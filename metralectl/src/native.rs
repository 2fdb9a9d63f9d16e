//! The engine as a native process: finding `met`, starting it with its output in a log file,
//! and the record under the state directory that lets `ps`, `stop` and `logs` find it later
//! (`<state dir>/engines/<name>.json` and `<name>.log`).

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rustix::process::{Pid, Signal, kill_process, test_kill_process};
use serde::{Deserialize, Serialize};

/// The engine binary's name.
pub const MET: &str = "met";

#[derive(Debug, thiserror::Error)]
pub enum NativeError {
    #[error("cannot find the engine binary `met`: looked beside metralectl ({beside}) and on PATH")]
    MetNotFound { beside: String },
    #[error("failed to start {program}: {source}")]
    Spawn { program: String, source: io::Error },
    #[error("failed to {op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("failed to read the engine record {path}: {message}")]
    Record { path: PathBuf, message: String },
    #[error("failed to signal engine process {pid}: {source}")]
    Signal { pid: i32, source: io::Error },
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> NativeError + 'a {
    move |source| NativeError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// `met` beside the running `metralectl`, else the first on `PATH`.
pub fn find_met() -> Result<PathBuf, NativeError> {
    let name = format!("{MET}{}", std::env::consts::EXE_SUFFIX);
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|d| d.join(&name)));
    if let Some(path) = beside.as_ref().filter(|p| p.is_file()) {
        return Ok(path.clone());
    }
    if let Some(path) = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(&name))
            .find(|p| p.is_file())
    }) {
        return Ok(path);
    }
    Err(NativeError::MetNotFound {
        beside: beside.map_or_else(|| "unknown".into(), |p| p.display().to_string()),
    })
}

/// What the launcher remembers about a native engine it started.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    pub name: String,
    pub recipe: String,
    pub pid: i32,
    pub host: String,
    pub port: u16,
    /// Seconds since the epoch.
    pub started: u64,
    /// `all`, `0,1`, or `none`.
    pub gpus: String,
    pub log: PathBuf,
    pub argv: Vec<String>,
}

/// The directory holding the records and logs.
pub fn engines_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("engines")
}

fn record_path(state_dir: &Path, name: &str) -> PathBuf {
    engines_dir(state_dir).join(format!("{name}.json"))
}

/// The log file of the engine named `name`.
pub fn log_path(state_dir: &Path, name: &str) -> PathBuf {
    engines_dir(state_dir).join(format!("{name}.log"))
}

/// A native engine that is starting or running, owned by this launcher process.
#[derive(Debug)]
pub struct Started {
    pub child: Child,
    pub record: Record,
    record_path: PathBuf,
}

/// What to start.
#[derive(Debug, Clone)]
pub struct Launch<'a> {
    pub name: &'a str,
    pub recipe: &'a str,
    pub met: &'a Path,
    /// Arguments after `met`.
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub host: &'a str,
    pub port: u16,
    pub gpus: &'a str,
}

/// Starts `met` in its own process group (so a Ctrl-C at the terminal reaches the launcher,
/// which decides), its stdout and stderr appended to the log, and writes the record.
pub fn start(state_dir: &Path, launch: &Launch<'_>) -> Result<Started, NativeError> {
    let dir = engines_dir(state_dir);
    fs::create_dir_all(&dir).map_err(io_err("create", &dir))?;
    let log = log_path(state_dir, launch.name);
    let out = File::create(&log).map_err(io_err("create", &log))?;
    let err = out.try_clone().map_err(io_err("open", &log))?;
    let child = Command::new(launch.met)
        .args(&launch.args)
        .envs(&launch.env)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0)
        .spawn()
        .map_err(|source| NativeError::Spawn {
            program: launch.met.display().to_string(),
            source,
        })?;
    let record = Record {
        name: launch.name.to_owned(),
        recipe: launch.recipe.to_owned(),
        pid: i32::try_from(child.id()).unwrap_or(i32::MAX),
        host: launch.host.to_owned(),
        port: launch.port,
        started: now_secs(),
        gpus: launch.gpus.to_owned(),
        log,
        argv: std::iter::once(launch.met.display().to_string())
            .chain(launch.args.iter().cloned())
            .collect(),
    };
    let path = record_path(state_dir, launch.name);
    let text = serde_json::to_string_pretty(&record).unwrap_or_default();
    fs::write(&path, text).map_err(io_err("write", &path))?;
    Ok(Started {
        child,
        record,
        record_path: path,
    })
}

impl Started {
    /// The exit status once the process has ended.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Stops the engine (SIGTERM, SIGKILL after `grace`), reaps it and forgets its record.
    pub fn stop(mut self, grace: Duration) -> Result<(), NativeError> {
        if self.exited().is_none() {
            signal(self.record.pid, Signal::TERM)?;
            let deadline = Instant::now() + grace;
            while self.exited().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            if self.exited().is_none() {
                let _ = self.child.kill();
                let _ = self.child.wait();
            }
        }
        forget(&self.record_path)?;
        forget(&self.record.log)
    }

    /// Leaves the engine running (`--detach`); the record stays for `ps`, `stop`, `logs`.
    pub fn detach(self) {}
}

fn forget(path: &Path) -> Result<(), NativeError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(NativeError::Io {
            op: "remove",
            path: path.to_path_buf(),
            source,
        }),
    }
}

fn signal(pid: i32, sig: Signal) -> Result<(), NativeError> {
    let Some(p) = Pid::from_raw(pid) else {
        return Ok(());
    };
    match kill_process(p, sig) {
        Ok(()) => Ok(()),
        Err(e) if e == rustix::io::Errno::SRCH => Ok(()),
        Err(e) => Err(NativeError::Signal {
            pid,
            source: e.into(),
        }),
    }
}

/// Whether `pid` is alive and still an engine (not a recycled pid): on Linux its command line
/// must name `met` and `serve`.
pub fn is_running(record: &Record) -> bool {
    let Some(pid) = Pid::from_raw(record.pid) else {
        return false;
    };
    if test_kill_process(pid).is_err() {
        return false;
    }
    let proc_dir = PathBuf::from(format!("/proc/{}", record.pid));
    if !proc_dir.exists() {
        return true; // no /proc (macOS): trust the signal test
    }
    if fs::read_to_string(proc_dir.join("stat"))
        .ok()
        .and_then(|s| {
            s.rsplit(')')
                .next()
                .map(|r| r.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
    {
        return false; // a zombie waiting for its parent
    }
    fs::read(proc_dir.join("cmdline")).is_ok_and(|raw| {
        let args: Vec<&[u8]> = raw.split(|b| *b == 0).collect();
        args.first()
            .is_some_and(|a0| String::from_utf8_lossy(a0).ends_with(MET))
            && args.iter().any(|a| *a == b"serve")
    })
}

/// Every record under the state directory, with whether its process still runs. Records of
/// engines that are gone are removed.
pub fn list(state_dir: &Path) -> Result<Vec<Record>, NativeError> {
    let dir = engines_dir(state_dir);
    let entries = match fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(NativeError::Io {
                op: "read",
                path: dir,
                source,
            });
        }
    };
    let mut records = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let text = fs::read_to_string(&path).map_err(io_err("read", &path))?;
        let record: Record = serde_json::from_str(&text).map_err(|e| NativeError::Record {
            path: path.clone(),
            message: e.to_string(),
        })?;
        if is_running(&record) {
            records.push(record);
        } else {
            forget(&path)?;
        }
    }
    records.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(records)
}

/// Stops a recorded engine that another launcher process started (`metralectl stop`).
pub fn stop_recorded(
    state_dir: &Path,
    record: &Record,
    grace: Duration,
) -> Result<(), NativeError> {
    if is_running(record) {
        signal(record.pid, Signal::TERM)?;
        let deadline = Instant::now() + grace;
        while is_running(record) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        if is_running(record) {
            signal(record.pid, Signal::KILL)?;
            let deadline = Instant::now() + Duration::from_secs(5);
            while is_running(record) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
    forget(&record_path(state_dir, &record.name))?;
    forget(&record.log)
}

/// The last `n` lines of a log file.
pub fn tail(path: &Path, n: usize) -> Vec<String> {
    let text = fs::read(path)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..]
        .iter()
        .map(|l| (*l).to_owned())
        .collect()
}

pub fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
