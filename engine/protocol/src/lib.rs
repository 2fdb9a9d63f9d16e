//! Plain serde types shared by `met` and `metralectl`, and the table of what the engine
//! serves (`support`). No I/O, no heavy dependencies.

pub mod anthropic;
pub mod bench;
pub mod metrics;
pub mod openai;
pub mod support;
