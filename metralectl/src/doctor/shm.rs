//! `/dev/shm`: the engine in a container shares the host's IPC namespace (`--ipc=host`), and
//! the engine's worker threads use shared memory.

use std::path::Path;

use super::{Check, Status, gib, space};

const WARN_BYTES: u64 = 1 << 30;

pub fn check() -> Check {
    let shm = Path::new("/dev/shm");
    if !shm.exists() {
        return Check::problem(
            "shm",
            Status::Warning,
            "/dev/shm is missing",
            Vec::new(),
            "mount a tmpfs on /dev/shm (`sudo mount -t tmpfs -o size=8g tmpfs /dev/shm`)",
        );
    }
    match space(shm) {
        Some((_, free, total)) if total < WARN_BYTES => Check::problem(
            "shm",
            Status::Warning,
            format!("/dev/shm is small ({})", gib(total)),
            vec![format!("{} free of {}", gib(free), gib(total))],
            "grow it: `sudo mount -o remount,size=8g /dev/shm`",
        ),
        Some((_, free, total)) => Check::ok(
            "shm",
            format!("/dev/shm {}", gib(total)),
            vec![format!("{} free", gib(free))],
        ),
        None => Check::problem(
            "shm",
            Status::Warning,
            "/dev/shm size unknown",
            Vec::new(),
            "check `df -h /dev/shm`",
        ),
    }
}
