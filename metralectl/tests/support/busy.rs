//! Running a binary a test has just copied (shared by `support` and `term`).

use std::process::Command;

/// Runs a program the test has just written (a copied binary), retrying while Linux says
/// "text file busy": another test thread's fork can hold the copy's write handle open for the
/// instant before its exec, and running the file then fails with ETXTBSY.
pub trait RunCopied {
    fn output_copied(&mut self) -> std::io::Result<std::process::Output>;
    fn spawn_copied(&mut self) -> std::io::Result<std::process::Child>;
}

impl RunCopied for Command {
    fn output_copied(&mut self) -> std::io::Result<std::process::Output> {
        retry_busy(|| self.output())
    }

    fn spawn_copied(&mut self) -> std::io::Result<std::process::Child> {
        retry_busy(|| self.spawn())
    }
}

pub fn retry_busy<T>(mut run: impl FnMut() -> std::io::Result<T>) -> std::io::Result<T> {
    for _ in 0..200 {
        match run() {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            other => return other,
        }
    }
    run()
}
