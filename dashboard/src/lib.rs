//! The live dashboard of `metralectl top` and `met serve`: one [`App`] state changed only by
//! [`App::apply`] (protocol events, connection changes, keys), a pure [`draw`] of it, and the
//! terminal loop in [`term`]. Both binaries feed it protocol-v1 events
//! (`metrale_protocol::metrics`): `metralectl` from the socket or SSE, `met` in-process.

pub mod app;
pub mod draw;
pub mod term;

pub use app::{App, Input, Key};
pub use draw::draw;
/// The terminal library the dashboard draws with, for `metralectl chat`'s prompt.
pub use ratatui::crossterm;
