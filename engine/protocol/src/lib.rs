//! Plain serde types shared by `met` and `metralectl`. No I/O, no heavy dependencies.

pub mod anthropic;
pub mod bench;
pub mod metrics;
pub mod openai;
