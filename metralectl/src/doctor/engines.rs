//! Running Metrale engines (containers labelled `ai.metrale.*` and native processes we started)
//! and whether they answer `/ready`.

use std::time::Duration;

use super::{Check, Facts, Status};
use crate::engines;

pub async fn check(facts: &Facts) -> Check {
    let docker = Some(facts.docker.as_ref().map(|(c, _)| c));
    let state_dir = crate::dirs::state_dir();
    let found = match docker {
        Some(Ok(client)) => engines::list(state_dir.as_deref(), Some(Ok(client))).await,
        _ => engines::list(state_dir.as_deref(), None).await,
    };
    let found = match found {
        Ok(found) => found,
        Err(e) => {
            return Check::problem(
                "engines",
                Status::Warning,
                "cannot list the running engines",
                vec![format!("{e:#}")],
                "check the state directory (METRALE_STATE_DIR) and Docker",
            );
        }
    };
    let running: Vec<_> = found
        .engines
        .iter()
        .filter(|e| e.state == "running")
        .collect();
    if running.is_empty() {
        return Check::ok("engines", "no Metrale engines running", Vec::new());
    }
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .no_proxy()
        .build();
    let mut found_lines = Vec::new();
    let mut not_ready = Vec::new();
    for e in running {
        let ready = match (&client, e.url()) {
            (Ok(c), Some(url)) => c
                .get(format!("{url}/ready"))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success()),
            _ => false,
        };
        found_lines.push(format!(
            "{} ({}, {}) at {}: {}",
            e.name,
            e.recipe,
            e.mode.as_str(),
            e.url().unwrap_or_else(|| "no port".into()),
            if ready { "ready" } else { "not ready" }
        ));
        if !ready {
            not_ready.push(e.name.clone());
        }
    }
    if not_ready.is_empty() {
        Check::ok(
            "engines",
            format!("{} engine(s) running and ready", found_lines.len()),
            found_lines,
        )
    } else {
        Check::problem(
            "engines",
            Status::Warning,
            format!("{} engine(s) not answering /ready", not_ready.len()),
            found_lines,
            format!(
                "a starting engine turns ready after loading; otherwise see `metralectl logs {}`",
                not_ready[0]
            ),
        )
    }
}
