//! The isolated run of `metralectl` that `cli.rs`'s tests use: an empty environment, the
//! config, data and state directories in a fresh temporary directory, no colour, and
//! `nvidia-smi` either absent or a fake script.

use std::fs;
use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

pub struct Sandbox {
    pub dir: tempfile::TempDir,
    pub env: Vec<(String, String)>,
}

impl Sandbox {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("temporary directory");
        fs::create_dir_all(dir.path().join("config").join("recipes")).expect("config dir");
        fs::create_dir_all(dir.path().join("work")).expect("work dir");
        let mut sandbox = Self {
            dir,
            env: Vec::new(),
        };
        sandbox.set("METRALE_CONFIG_DIR", sandbox.path("config"));
        sandbox.set("METRALE_DATA_DIR", sandbox.path("data"));
        sandbox.set("METRALE_STATE_DIR", sandbox.path("state"));
        sandbox.set("METRALE_NVIDIA_SMI", sandbox.path("no-nvidia-smi-here"));
        sandbox.set("HOME", "/home/user".into());
        sandbox.set("NO_COLOR", "1".into());
        sandbox.set("COLUMNS", "100".into());
        sandbox
    }

    pub fn path(&self, rel: &str) -> String {
        self.dir.path().join(rel).display().to_string()
    }

    pub fn set(&mut self, key: &str, value: String) {
        self.env.retain(|(k, _)| k != key);
        self.env.push((key.to_owned(), value));
    }

    /// Puts a stand-in for `nvidia-smi` that prints `csv` (name, MiB total, MiB free, capability).
    #[cfg(unix)]
    pub fn fake_nvidia_smi(&mut self, csv: &str) {
        use std::os::unix::fs::PermissionsExt;
        let script = self.dir.path().join("fake-nvidia-smi");
        fs::write(&script, format!("#!/bin/sh\ncat <<'EOF'\n{csv}\nEOF\n"))
            .expect("write fake nvidia-smi");
        fs::set_permissions(&script, fs::Permissions::from_mode(0o755))
            .expect("chmod fake nvidia-smi");
        self.set("METRALE_NVIDIA_SMI", script.display().to_string());
    }

    pub fn user_recipe(&self, file: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join("config").join("recipes").join(file);
        fs::write(&path, text).expect("write user recipe");
        path
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_metralectl"));
        cmd.args(args)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .current_dir(self.dir.path().join("work"));
        cmd
    }

    pub fn output(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("metralectl runs")
    }

    /// The run as one text to snapshot, with the sandbox path replaced by `[TMP]` and the
    /// launcher's version (the default image tag) by `[VERSION]`.
    pub fn transcript(&self, args: &[&str]) -> String {
        let out = self.output(args);
        let text = format!(
            "$ metralectl {}\nexit: {}\n--- stdout\n{}--- stderr\n{}",
            args.join(" "),
            out.status
                .code()
                .map_or("signal".to_owned(), |c| c.to_string()),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        self.scrub(&text)
    }

    pub fn scrub(&self, text: &str) -> String {
        let real = fs::canonicalize(self.dir.path()).expect("canonical temp dir");
        text.replace(&real.display().to_string(), "[TMP]")
            .replace(&self.dir.path().display().to_string(), "[TMP]")
            .replace(env!("CARGO_PKG_VERSION"), "[VERSION]")
    }

    pub fn json(&self, args: &[&str]) -> Value {
        let out = self.output(args);
        assert!(
            out.status.success(),
            "{args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("stdout is JSON")
    }
}
