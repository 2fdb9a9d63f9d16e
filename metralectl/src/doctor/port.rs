//! The default port free on 127.0.0.1.

use std::net::TcpListener;

use super::{Check, Status};

pub fn check(port: u16) -> Check {
    match TcpListener::bind(("127.0.0.1", port)) {
        Ok(_) => Check::ok("port", format!("port {port} is free"), Vec::new()),
        Err(e) => Check::problem(
            "port",
            Status::Warning,
            format!("port {port} is in use"),
            vec![format!("cannot listen on 127.0.0.1:{port}: {e}")],
            format!(
                "pass another port to run (`--port {}`), or stop what listens there (`metralectl ps`)",
                port.saturating_add(1)
            ),
        ),
    }
}
