//! The NVIDIA GPUs of this machine, as `nvidia-smi` reports them.
//!
//! `METRALE_NVIDIA_SMI` names another program to run in its place (tests use a fake script,
//! since the machines that run them have no GPU).

use std::env;
use std::io::ErrorKind;
use std::process::Command;

use serde::Serialize;

use crate::recipe::schema::ComputeCapability;

pub const NVIDIA_SMI_ENV: &str = "METRALE_NVIDIA_SMI";
const QUERY: [&str; 2] = [
    "--query-gpu=name,memory.total,memory.free,compute_cap",
    "--format=csv,noheader,nounits",
];

#[derive(Debug, Clone, Serialize)]
pub struct Gpu {
    pub index: usize,
    pub name: String,
    /// `None` where the GPU reports no size (e.g. unified memory).
    pub memory_total_bytes: Option<u64>,
    pub memory_free_bytes: Option<u64>,
    pub compute_capability: ComputeCapability,
}

/// What the probe found; `note` says why the list is empty, or what was odd.
#[derive(Debug, Clone, Serialize)]
pub struct Probe {
    pub gpus: Vec<Gpu>,
    pub note: Option<String>,
}

impl Probe {
    fn none(note: String) -> Self {
        Self {
            gpus: Vec::new(),
            note: Some(note),
        }
    }
}

/// Runs `nvidia-smi` (or its stand-in) and reads its answer. Never fails: every problem becomes
/// an empty list with a note.
pub fn probe() -> Probe {
    let program = env::var(NVIDIA_SMI_ENV)
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "nvidia-smi".to_owned());
    let output = match Command::new(&program).args(QUERY).output() {
        Ok(output) => output,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            return Probe::none(format!("no NVIDIA GPU found: cannot find {program}"));
        }
        Err(e) => return Probe::none(format!("no NVIDIA GPU found: cannot run {program}: {e}")),
    };
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let stdout = String::from_utf8_lossy(&output.stdout);
        let said = stderr
            .lines()
            .chain(stdout.lines())
            .find(|l| !l.trim().is_empty())
            .unwrap_or("no message");
        return Probe::none(format!(
            "no NVIDIA GPU found: {program} failed ({}): {}",
            output.status,
            said.trim()
        ));
    }
    match parse(&String::from_utf8_lossy(&output.stdout)) {
        Ok(gpus) if gpus.is_empty() => {
            Probe::none(format!("no NVIDIA GPU found: {program} listed none"))
        }
        Ok(gpus) => Probe { gpus, note: None },
        Err(problem) => Probe::none(format!(
            "no NVIDIA GPU found: cannot read the output of {program}: {problem}"
        )),
    }
}

/// Parses `name, memory.total, memory.free, compute_cap` lines (MiB, no units).
fn parse(text: &str) -> Result<Vec<Gpu>, String> {
    let mut gpus = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        let [name, total, free, cc] = fields[..] else {
            return Err(format!("expected 4 comma-separated fields, got {line:?}"));
        };
        let mib = |field: &str| -> Result<Option<u64>, String> {
            if field.starts_with('[') {
                return Ok(None); // "[N/A]", "[Not Supported]"
            }
            field
                .parse::<u64>()
                .map(|m| Some(m * 1024 * 1024))
                .map_err(|_| format!("{field:?} is not a size in MiB"))
        };
        gpus.push(Gpu {
            index: gpus.len(),
            name: name.to_owned(),
            memory_total_bytes: mib(total)?,
            memory_free_bytes: mib(free)?,
            compute_capability: cc.parse()?,
        });
    }
    Ok(gpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_two_gpus() {
        let gpus =
            parse("NVIDIA H100 80GB HBM3, 81559, 81000, 9.0\nNVIDIA B200, 183359, 1000, 10.0\n")
                .expect("well-formed output parses");
        assert_eq!(gpus.len(), 2);
        assert_eq!(gpus[1].index, 1);
        assert_eq!(gpus[0].memory_total_bytes, Some(81559 << 20));
        assert_eq!(
            gpus[1].compute_capability,
            ComputeCapability {
                major: 10,
                minor: 0
            }
        );
    }

    #[test]
    fn unified_memory_reports_no_size() {
        let gpus = parse("NVIDIA GB10, [N/A], [N/A], 12.1").expect("N/A sizes are accepted");
        assert_eq!(gpus[0].memory_total_bytes, None);
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse("No devices were found").is_err());
        assert!(parse("GPU, lots, 1, 9.0").is_err());
    }
}
