//! Free disk where checkpoints are cached (the Hugging Face hub cache).

use super::{Check, Status, gib, space};
use crate::dirs;

/// Below this, a large checkpoint will not fit.
const WARN_BYTES: u64 = 50 << 30;
/// Below this, not even the demo's first download will.
const ERROR_BYTES: u64 = 1 << 30;

pub fn check() -> Check {
    let cache = dirs::hf_hub_cache_dir();
    let Some((fs_path, free, total)) = space(&cache) else {
        return Check::problem(
            "disk",
            Status::Warning,
            "free disk unknown",
            vec![format!(
                "cannot read the file system of {}",
                cache.display()
            )],
            "set HF_HOME or HF_HUB_CACHE to a directory on a local disk",
        );
    };
    let found = vec![format!(
        "model cache {} (on the file system of {}): {} free of {}",
        cache.display(),
        fs_path.display(),
        gib(free),
        gib(total)
    )];
    let fix = "free space there, or point HF_HOME (or HF_HUB_CACHE) at a larger disk";
    if free < ERROR_BYTES {
        Check::problem(
            "disk",
            Status::Error,
            format!("only {} free for models", gib(free)),
            found,
            fix,
        )
    } else if free < WARN_BYTES {
        Check::problem(
            "disk",
            Status::Warning,
            format!(
                "{} free for models: enough for small checkpoints only",
                gib(free)
            ),
            found,
            fix,
        )
    } else {
        Check::ok("disk", format!("{} free for models", gib(free)), found)
    }
}
