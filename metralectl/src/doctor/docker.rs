//! The Docker daemon: reachable, and which version and API it speaks.

use super::{Check, Facts, Status};

pub fn check(facts: &Facts) -> Check {
    match &facts.docker {
        Ok((_, info)) => Check::ok(
            "docker",
            format!(
                "Docker Engine {} (API {})",
                info.server_version, info.api_version
            ),
            vec![format!("daemon at {}", info.host)],
        ),
        Err(e) => Check::problem(
            "docker",
            Status::Warning,
            "Docker is not reachable",
            vec![
                e.clone(),
                "without Docker, `metralectl run` starts the engine natively".into(),
            ],
            "install Docker Engine (https://docs.docker.com/engine/install/) and start it \
             (`sudo systemctl start docker`); if it runs elsewhere, set DOCKER_HOST",
        ),
    }
}
