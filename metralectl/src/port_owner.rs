//! What holds a TCP port on this machine: the listening socket in `/proc/net/tcp{,6}` and the
//! process whose file descriptors include it (Linux; elsewhere nothing is named).

use std::fs;
use std::path::Path;

/// The process listening on a port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub pid: u32,
    /// Its command line, arguments joined by spaces (the `comm` name when that is empty).
    pub command: String,
}

/// What `port` is held by, as one phrase for a message: `pid 42 (python3 -m http.server)`, a
/// Docker container's published port, or a process this user cannot see.
pub fn describe(port: u16) -> Option<String> {
    let inodes = listening_inodes(Path::new("/proc/net"), port);
    if inodes.is_empty() {
        return None;
    }
    match find_holder(Path::new("/proc"), &inodes) {
        Some(h) if h.command.contains("docker-proxy") => Some(format!(
            "a Docker container's published port (pid {}, docker-proxy; `docker ps --filter publish={port}` names it)",
            h.pid
        )),
        Some(h) => Some(format!("pid {} ({})", h.pid, h.command)),
        None => Some(
            "a process this user cannot see (another user's or a container's; `sudo ss -ltnp` names it)"
                .to_owned(),
        ),
    }
}

/// What to do about a busy port: another port, or stopping what holds it (`metralectl stop` only
/// for an engine `ps` lists).
pub fn busy_fix(port: u16, holder: Option<&str>) -> String {
    let other = format!("pass another port (`--port {}`)", port.saturating_add(1));
    match holder {
        Some(h) if h.starts_with("pid ") => {
            let pid = h[4..].split_whitespace().next().unwrap_or("");
            format!("{other}, or stop that process (`kill {pid}`)")
        }
        Some(_) => format!("{other}, or stop what holds it"),
        None => format!("{other}, or stop what listens there"),
    }
}

/// The inodes of the sockets listening on `port`, from `dir/tcp` and `dir/tcp6`.
fn listening_inodes(dir: &Path, port: u16) -> Vec<u64> {
    let mut inodes = Vec::new();
    for file in ["tcp", "tcp6"] {
        let Ok(text) = fs::read_to_string(dir.join(file)) else {
            continue;
        };
        // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
        for line in text.lines().skip(1) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(state), Some(inode)) = (cols.get(1), cols.get(3), cols.get(9))
            else {
                continue;
            };
            let local_port = local
                .rsplit(':')
                .next()
                .and_then(|p| u16::from_str_radix(p, 16).ok());
            if *state == "0A"
                && local_port == Some(port)
                && let Ok(inode) = inode.parse::<u64>()
                && inode != 0
            {
                inodes.push(inode);
            }
        }
    }
    inodes
}

/// The first process under `proc` with a descriptor on one of `inodes`.
fn find_holder(proc: &Path, inodes: &[u64]) -> Option<Holder> {
    let wanted: Vec<String> = inodes.iter().map(|i| format!("socket:[{i}]")).collect();
    for entry in fs::read_dir(proc).ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(fds) = fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        let holds = fds.flatten().any(|fd| {
            fs::read_link(fd.path())
                .is_ok_and(|target| wanted.iter().any(|w| target.as_os_str() == w.as_str()))
        });
        if holds {
            return Some(Holder {
                pid,
                command: command_of(&entry.path()),
            });
        }
    }
    None
}

fn command_of(proc_pid: &Path) -> String {
    let cmdline = fs::read(proc_pid.join("cmdline")).unwrap_or_default();
    let words: Vec<String> = cmdline
        .split(|b| *b == 0)
        .filter(|w| !w.is_empty())
        .map(|w| String::from_utf8_lossy(w).into_owned())
        .collect();
    if words.is_empty() {
        return fs::read_to_string(proc_pid.join("comm"))
            .map(|c| c.trim().to_owned())
            .unwrap_or_else(|_| "unknown".into());
    }
    let line = words.join(" ");
    if line.chars().count() > 120 {
        format!("{}…", line.chars().take(119).collect::<String>())
    } else {
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_this_process_as_the_holder_of_its_listener() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let said = describe(port).expect("the port is held");
        assert!(
            said.starts_with(&format!("pid {} (", std::process::id())),
            "{said}"
        );
        drop(listener);
        assert_eq!(describe(port), None);
    }

    #[test]
    fn reads_only_listening_sockets_on_the_port() {
        let dir = tempfile::tempdir().expect("tempdir");
        // 0x1F40 = 8000; state 0A = LISTEN, 01 = ESTABLISHED.
        let tcp = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
                   0: 0100007F:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 4242 1\n\
                   1: 0100007F:1F40 0100007F:D3B2 01 00000000:00000000 00:00000000 00000000  1000        0 4343 1\n\
                   2: 0100007F:1F41 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 4444 1\n";
        fs::write(dir.path().join("tcp"), tcp).expect("write");
        assert_eq!(listening_inodes(dir.path(), 8000), vec![4242]);
        assert_eq!(listening_inodes(dir.path(), 8002), Vec::<u64>::new());
    }
}
