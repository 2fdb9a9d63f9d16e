//! Everything a record holds besides the figures: the harness binary's hash, the machine, the
//! date.

use std::fs;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use metrale_protocol::bench::{GpuInfo, Harness, Machine};
use sha2::{Digest as _, Sha256};

use crate::gpu::NVIDIA_SMI_ENV;

pub use crate::fsutil::write_atomic;

/// This program: its name, version and the sha256 of its binary.
pub fn harness() -> anyhow::Result<Harness> {
    let exe = std::env::current_exe().context("cannot find the metralectl binary to hash it")?;
    let bytes =
        fs::read(&exe).with_context(|| format!("cannot read {} to hash it", exe.display()))?;
    let digest = Sha256::digest(&bytes);
    Ok(Harness {
        name: "metralectl".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        binary_sha256: digest.iter().map(|b| format!("{b:02x}")).collect(),
    })
}

/// The GPUs as `nvidia-smi` (or `$METRALE_NVIDIA_SMI`) reports them; `cpu` when there are none.
pub fn machine() -> Machine {
    let program = std::env::var(NVIDIA_SMI_ENV)
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "nvidia-smi".to_owned());
    let gpus = Command::new(program)
        .args([
            "--query-gpu=name,driver_version,clocks.max.sm,clocks.max.memory",
            "--format=csv,noheader,nounits",
        ])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| parse_gpus(&String::from_utf8_lossy(&o.stdout)))
        .unwrap_or_default();
    let kind = if gpus.is_empty() {
        "cpu".to_owned()
    } else {
        gpus.iter()
            .map(|g| g.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    Machine { kind, gpus }
}

fn parse_gpus(csv: &str) -> Vec<GpuInfo> {
    csv.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split(',').map(str::trim).collect();
            let [name, driver, sm, mem] = f.as_slice() else {
                return None;
            };
            Some(GpuInfo {
                name: (*name).to_owned(),
                driver: (*driver).to_owned(),
                sm_clock_max_mhz: sm.parse().ok(),
                mem_clock_max_mhz: mem.parse().ok(),
            })
        })
        .collect()
}

/// Now, RFC 3339 in UTC.
pub fn now_rfc3339() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    rfc3339(secs)
}

fn rfc3339(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_rfc3339_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_796_000_000), "2026-11-30T00:53:20Z");
    }

    #[test]
    fn gpus_parse_from_nvidia_smi_csv() {
        let gpus = parse_gpus("NVIDIA H200, 580.65.06, 1980, 3201\nbroken line\n");
        assert_eq!(gpus.len(), 1);
        assert_eq!(gpus[0].name, "NVIDIA H200");
        assert_eq!(gpus[0].driver, "580.65.06");
        assert_eq!(gpus[0].sm_clock_max_mhz, Some(1980));
    }
}
