//! The NVIDIA driver and GPUs (`nvidia-smi`), and whether the driver is new enough for the
//! engine image's CUDA.

use std::process::Command;

use super::{Check, Facts, Status, gib};

/// The CUDA version the engine image is built on, and the oldest Linux driver that runs it.
pub const IMAGE_CUDA: &str = "13.0";
pub const MIN_DRIVER_MAJOR: u32 = 580;

pub fn check(facts: &Facts) -> Check {
    if facts.gpus.gpus.is_empty() {
        let note = facts
            .gpus
            .note
            .clone()
            .unwrap_or_else(|| "no NVIDIA GPU found".into());
        return Check::problem(
            "nvidia-driver",
            Status::Warning,
            "no NVIDIA GPU: native CPU engine only",
            vec![
                note,
                "CPU recipes (like `demo`) run; GPU recipes need an NVIDIA GPU and driver".into(),
            ],
            format!(
                "on a GPU machine, install the NVIDIA driver {MIN_DRIVER_MAJOR} or newer (`nvidia-smi` must work)"
            ),
        );
    }
    let mut found: Vec<String> = facts
        .gpus
        .gpus
        .iter()
        .map(|g| {
            format!(
                "GPU {}: {} (compute {}), memory {} total, {} free",
                g.index,
                g.name,
                g.compute_capability,
                g.memory_total_bytes.map_or_else(|| "n/a".into(), gib),
                g.memory_free_bytes.map_or_else(|| "n/a".into(), gib),
            )
        })
        .collect();
    let (driver, cuda) = versions();
    found.push(format!(
        "driver {}, CUDA {}",
        driver.as_deref().unwrap_or("unknown"),
        cuda.as_deref().unwrap_or("unknown")
    ));
    let major = driver
        .as_deref()
        .and_then(|d| d.split('.').next())
        .and_then(|m| m.parse::<u32>().ok());
    match major {
        Some(m) if m < MIN_DRIVER_MAJOR => Check::problem(
            "nvidia-driver",
            Status::Error,
            format!("NVIDIA driver too old for the engine (CUDA {IMAGE_CUDA})"),
            found,
            format!("install NVIDIA driver {MIN_DRIVER_MAJOR} or newer"),
        ),
        _ => Check::ok(
            "nvidia-driver",
            format!("NVIDIA driver and {} GPU(s)", facts.gpus.gpus.len()),
            found,
        ),
    }
}

/// The driver version (`--query-gpu=driver_version`) and the CUDA version from `nvidia-smi`'s
/// banner.
fn versions() -> (Option<String>, Option<String>) {
    let program = std::env::var(crate::gpu::NVIDIA_SMI_ENV)
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "nvidia-smi".into());
    let run = |args: &[&str]| {
        Command::new(&program)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
    };
    let driver = run(&["--query-gpu=driver_version", "--format=csv,noheader"])
        .and_then(|t| t.lines().next().map(|l| l.trim().to_owned()))
        .filter(|d| d.chars().next().is_some_and(|c| c.is_ascii_digit()));
    let cuda = run(&[]).and_then(|banner| cuda_from_banner(&banner));
    (driver, cuda)
}

fn cuda_from_banner(banner: &str) -> Option<String> {
    let at = banner.find("CUDA Version:")?;
    banner[at + "CUDA Version:".len()..]
        .split_whitespace()
        .next()
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_the_cuda_version_from_the_banner() {
        let banner =
            "| NVIDIA-SMI 580.65.06   Driver Version: 580.65.06   CUDA Version: 13.0     |";
        assert_eq!(super::cuda_from_banner(banner).as_deref(), Some("13.0"));
        assert_eq!(super::cuda_from_banner("no banner"), None);
    }
}
