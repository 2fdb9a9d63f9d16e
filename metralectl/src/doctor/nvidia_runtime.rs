//! The NVIDIA container runtime: registered with Docker (`nvidia` runtime or CDI devices), and
//! a GPU visible from inside a throw-away container when the engine image is at hand.

use std::time::Duration;

use super::{Check, Facts, Status};

const FIX: &str = "install the NVIDIA Container Toolkit \
    (https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/install-guide.html), then \
    `sudo nvidia-ctk runtime configure --runtime=docker && sudo systemctl restart docker`";

/// The engine image of this launcher's version, as the built-in recipes name it.
fn engine_image() -> String {
    format!("ghcr.io/metrale/met:{}", env!("CARGO_PKG_VERSION"))
}

pub async fn check(facts: &Facts) -> Check {
    let (client, info) = match &facts.docker {
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
    if !info.nvidia_ready() {
        let mut found = vec![format!(
            "runtimes: {}; no NVIDIA CDI devices",
            info.runtimes.join(", ")
        )];
        if facts.gpus.gpus.is_empty() {
            found.push("no GPU on this machine either: containers can run CPU recipes only".into());
        } else {
            found.push("GPU recipes run natively (`metralectl run NAME --native`)".into());
        }
        return Check::problem(
            "nvidia-runtime",
            Status::Warning,
            "no NVIDIA container runtime",
            found,
            FIX,
        );
    }
    let mut found = vec![if info.runtimes.iter().any(|r| r == "nvidia") {
        format!("runtimes: {}", info.runtimes.join(", "))
    } else {
        format!("CDI devices: {}", info.cdi_devices.join(", "))
    }];
    // The proof: a GPU seen from inside a container.
    let image = engine_image();
    if !client.image_present(&image).await.unwrap_or(false) {
        found.push(format!(
            "a GPU inside a container was not tried: {image} is not on this machine (`metralectl pull NAME`)"
        ));
        return Check::ok(
            "nvidia-runtime",
            "NVIDIA container runtime registered",
            found,
        );
    }
    match client
        .run_to_end(
            &image,
            &["nvidia-smi", "-L"],
            true,
            info,
            Duration::from_secs(60),
        )
        .await
    {
        Ok((0, output)) if output.contains("GPU") => {
            found.extend(
                output
                    .lines()
                    .map(|l| format!("in a container: {}", l.trim())),
            );
            Check::ok("nvidia-runtime", "GPUs visible inside a container", found)
        }
        Ok((code, output)) => {
            found.push(format!(
                "`nvidia-smi -L` in {image} exited {code}: {}",
                output.lines().last().unwrap_or("no output").trim()
            ));
            Check::problem(
                "nvidia-runtime",
                Status::Error,
                "the NVIDIA runtime is registered but a container sees no GPU",
                found,
                format!(
                    "{FIX}; then `docker run --rm --gpus all {image} nvidia-smi` must list the GPUs"
                ),
            )
        }
        Err(e) => {
            found.push(format!("a throw-away container of {image} failed: {e}"));
            Check::problem(
                "nvidia-runtime",
                Status::Error,
                "the NVIDIA runtime is registered but a GPU container does not start",
                found,
                FIX,
            )
        }
    }
}
