//! The NVIDIA container runtime: registered with Docker (`nvidia` runtime or CDI devices).

use super::{Check, Facts, Status};

const FIX: &str = "install the NVIDIA Container Toolkit \
    (https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/install-guide.html), then \
    `sudo nvidia-ctk runtime configure --runtime=docker && sudo systemctl restart docker`";

pub fn check(facts: &Facts) -> Check {
    let (_, info) = match &facts.docker {
        Ok(d) => d,
        Err(_) => {
            return Check::problem(
                "nvidia-runtime",
                Status::Warning,
                "NVIDIA container runtime not checked",
                vec!["Docker is not reachable".into()],
                "fix Docker first",
            );
        }
    };
    let cdi: Vec<&String> = info
        .cdi_devices
        .iter()
        .filter(|d| d.starts_with("nvidia.com/gpu"))
        .collect();
    if info.runtimes.iter().any(|r| r == "nvidia") {
        return Check::ok(
            "nvidia-runtime",
            "NVIDIA container runtime registered",
            vec![format!("runtimes: {}", info.runtimes.join(", "))],
        );
    }
    if !cdi.is_empty() {
        return Check::ok(
            "nvidia-runtime",
            "NVIDIA GPUs available to containers through CDI",
            vec![format!(
                "CDI devices: {}",
                cdi.iter()
                    .map(|d| d.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )],
        );
    }
    let mut found = vec![format!(
        "runtimes: {}; no NVIDIA CDI devices",
        info.runtimes.join(", ")
    )];
    if facts.gpus.gpus.is_empty() {
        found.push("no GPU on this machine either: containers can run CPU recipes only".into());
    } else {
        found.push("GPU recipes run natively (`metralectl run NAME --native`)".into());
    }
    Check::problem(
        "nvidia-runtime",
        Status::Warning,
        "no NVIDIA container runtime",
        found,
        FIX,
    )
}
