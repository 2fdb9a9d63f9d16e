//! What the real-terminal and end-to-end tests share: the binaries, an isolated launcher, a
//! private tmux server.
#![allow(dead_code)] // each test file uses its part

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

#[path = "../support/busy.rs"]
mod busy;

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub fn metralectl() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_metralectl"))
}

/// `met`, built beside `metralectl` (built here if this package's tests run alone).
pub fn met_binary() -> PathBuf {
    let met = metralectl().parent().expect("bin dir").join("met");
    if !met.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let ok = Command::new(cargo)
            .args(["build", "-q", "-p", "metrale-engine", "--bin", "met"])
            .current_dir(repo_root())
            .status()
            .expect("run cargo build");
        assert!(ok.success(), "building met failed");
    }
    met
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// An isolated launcher: its own state, config and data directories; engines it started are
/// stopped when it is dropped.
pub struct Ctl {
    pub dir: tempfile::TempDir,
    /// The binary to run (a copy for the "installed" tests).
    pub bin: PathBuf,
    /// The working directory (the checkout, unless a test moves it out).
    pub cwd: PathBuf,
}

impl Ctl {
    pub fn new() -> Self {
        met_binary();
        Self {
            dir: tempfile::tempdir().expect("temp dir"),
            bin: metralectl(),
            cwd: repo_root(),
        }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// `KEY=VALUE ...` for a shell command line (tmux).
    pub fn env_words(&self) -> String {
        self.env()
            .iter()
            .map(|(k, v)| format!("{k}='{}'", v.display()))
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn env(&self) -> Vec<(&'static str, PathBuf)> {
        vec![
            ("METRALE_STATE_DIR", self.path("state")),
            ("METRALE_CONFIG_DIR", self.path("config")),
            ("METRALE_DATA_DIR", self.path("data")),
            ("XDG_RUNTIME_DIR", self.path("run")),
            ("NO_COLOR", PathBuf::from("1")),
        ]
    }

    pub fn command(&self, args: &[&str]) -> Command {
        std::fs::create_dir_all(self.path("run")).expect("runtime dir");
        let mut cmd = Command::new(&self.bin);
        cmd.args(args)
            .current_dir(&self.cwd)
            .envs(self.env())
            .env_remove("MET_API_KEY")
            .env_remove("DOCKER_HOST");
        cmd
    }

    /// Runs metralectl, retrying while Linux says "text file busy" (a test that copied the
    /// binary: another thread's fork can hold the copy's write handle for an instant).
    pub fn run(&self, args: &[&str]) -> Output {
        busy::retry_busy(|| self.command(args).output()).expect("run metralectl")
    }

    /// `run demo --native --detach` on a free port under `name`; its base URL and port. A port
    /// taken between `free_port` and the engine's bind (another test's, tests run in parallel)
    /// is refused by `run` before anything starts: that run is retried on another port.
    pub fn demo(&self, name: &str) -> (String, u16) {
        let mut last = String::new();
        for _ in 0..5 {
            let port = free_port();
            let out = self.run(&[
                "run",
                "demo",
                "--native",
                "--detach",
                "--port",
                &port.to_string(),
                "--name",
                name,
                "--ready-timeout",
                "120",
            ]);
            if out.status.success() {
                return (format!("http://127.0.0.1:{port}"), port);
            }
            last = format!("{}\n{}", text(&out.stderr), text(&out.stdout));
            if !last.contains("already in use") {
                break;
            }
        }
        panic!("run demo: {last}");
    }
}

impl Drop for Ctl {
    fn drop(&mut self) {
        let _ = self.run(&["stop", "--all"]);
    }
}

/// A private tmux server running one session; killed when dropped.
pub struct Tmux {
    server: String,
}

impl Tmux {
    pub fn run(name: &str, command: &str) -> Tmux {
        assert!(
            Command::new("tmux").arg("-V").output().is_ok(),
            "this test needs tmux (apt-get install -y tmux)"
        );
        let tmux = Tmux {
            server: format!("metrale-{name}-{}", std::process::id()),
        };
        let ok = tmux
            .cmd()
            .args(["new-session", "-d", "-s", "top", "-x", "120", "-y", "40"])
            .arg(command)
            .status()
            .expect("tmux new-session");
        assert!(ok.success());
        tmux
    }

    pub fn cmd(&self) -> Command {
        let mut c = Command::new("tmux");
        c.args(["-L", &self.server]).env_remove("TMUX");
        c
    }

    /// Keep the pane after its program exits, to read what it printed last.
    pub fn remain_on_exit(&self) {
        let _ = self
            .cmd()
            .args(["set-option", "-t", "top", "remain-on-exit", "on"])
            .status();
    }

    pub fn screen(&self, colours: bool) -> String {
        let mut c = self.cmd();
        c.args(["capture-pane", "-p", "-t", "top"]);
        if colours {
            c.arg("-e");
        }
        let out = c.output().expect("capture-pane");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Types `keys` (tmux key names: `Enter`, `C-d`, or literal text with `-l`).
    pub fn keys(&self, keys: &[&str]) {
        let _ = self
            .cmd()
            .args(["send-keys", "-t", "top"])
            .args(keys)
            .status();
    }

    /// Types `text` literally.
    pub fn type_text(&self, text: &str) {
        let _ = self
            .cmd()
            .args(["send-keys", "-t", "top", "-l", text])
            .status();
    }

    /// Poll the screen until `ok` holds; the last screen on failure.
    pub fn wait_for(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        self.wait_for_within(what, Duration::from_secs(30), ok)
    }

    pub fn wait_for_within(
        &self,
        what: &str,
        limit: Duration,
        ok: impl Fn(&str) -> bool,
    ) -> String {
        let deadline = Instant::now() + limit;
        loop {
            let s = self.screen(false);
            if ok(&s) {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "the screen never showed {what}:\n{s}"
            );
            std::thread::sleep(Duration::from_millis(150));
        }
    }

    /// What the pane's processes are doing, for a failure message: the pane's terminal
    /// settings (raw or cooked), and each process on it with its state and where it waits.
    pub fn diagnose(&self) -> String {
        let out = self
            .cmd()
            .args([
                "display-message",
                "-p",
                "-t",
                "top",
                "#{pane_pid} #{pane_tty} dead=#{pane_dead}",
            ])
            .output();
        let line = out.map(|o| text(&o.stdout)).unwrap_or_default();
        let mut words = line.split_whitespace();
        let (Some(pid), Some(tty)) = (words.next(), words.next()) else {
            return format!("no pane to diagnose ({line})");
        };
        let run = |program: &str, args: &[&str]| {
            Command::new(program)
                .args(args)
                .output()
                .map(|o| format!("{}{}", text(&o.stdout), text(&o.stderr)))
                .unwrap_or_else(|e| format!("{program}: {e}"))
        };
        let mut report = format!(
            "pane pid {pid} on {tty} ({line})\nstty: {}",
            run("stty", &["-a", "-F", tty])
        );
        let tty_name = tty.trim_start_matches("/dev/");
        report += &run(
            "ps",
            &[
                "-t",
                tty_name,
                "-o",
                "pid,ppid,pgid,sid,tpgid,stat,wchan:24,args",
            ],
        );
        report += &run(
            "ps",
            &["-L", "-t", tty_name, "-o", "pid,tid,stat,wchan:24,comm"],
        );
        report
    }

    /// Whether the pane's program has ended (with `remain-on-exit`). Read from tmux's
    /// `pane_dead`, not the "Pane is dead" line: tmux 3.3a leaves that line out when the
    /// terminal closes before tmux has reaped the program (tmux PR 4841 names the race).
    pub fn dead(&self) -> bool {
        self.cmd()
            .args(["display-message", "-p", "-t", "top", "#{pane_dead}"])
            .output()
            .is_ok_and(|o| text(&o.stdout).trim() == "1")
    }

    pub fn alive(&self) -> bool {
        self.cmd()
            .args(["has-session", "-t", "top"])
            .output()
            .is_ok_and(|o| o.status.success())
    }

    /// Waits for the session to end (its program exited).
    pub fn wait_gone(&self, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(15);
        while self.alive() {
            assert!(Instant::now() < deadline, "{what} did not end");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd().arg("kill-server").output();
    }
}

/// Whether `path` (a pid) is a live process, not a zombie.
pub fn pid_alive(pid: &str) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            s.rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('Z'))
        })
}
