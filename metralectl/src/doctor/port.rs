//! The default port free on 127.0.0.1.

use std::net::TcpListener;

use super::{Check, Status};

pub fn check(port: u16) -> Check {
    match TcpListener::bind(("127.0.0.1", port)) {
        Ok(_) => Check::ok("port", format!("port {port} is free"), Vec::new()),
        Err(e) => {
            let holder = crate::port_owner::describe(port);
            let mut found = vec![format!("cannot listen on 127.0.0.1:{port}: {e}")];
            if let Some(h) = &holder {
                found.push(format!("held by {h}"));
            }
            Check::problem(
                "port",
                Status::Warning,
                match &holder {
                    Some(h) => format!("port {port} is in use by {h}"),
                    None => format!("port {port} is in use"),
                },
                found,
                crate::port_owner::busy_fix(port, holder.as_deref()),
            )
        }
    }
}
