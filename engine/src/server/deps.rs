//! The one place the server names modules that other branches are writing in parallel.
//!
//! PENDING MERGE: today these point at `crate::standin` (minimal stand-ins, same signatures).
//! When the real ones land, this file becomes:
//!
//! ```text
//! pub use crate::chat_template::ChatTemplate;
//! pub use crate::detokenizer::{IncrementalDetokenizer, StopMatcher};
//! pub use crate::tokenizer::Tokenizer;
//! pub fn start_engine(c: EngineConfig) -> anyhow::Result<EngineHandle> { EngineHandle::start(c) }
//! ```
//!
//! and `engine/src/standin/` is deleted.

use crate::engine_core::{EngineConfig, EngineHandle};

pub use crate::standin::chat_template::ChatTemplate;
pub use crate::standin::detokenizer::{IncrementalDetokenizer, StopMatcher};
pub use crate::standin::tokenizer::Tokenizer;

/// Load the model, size the KV cache and start the engine thread; returns when it can serve.
pub fn start_engine(config: EngineConfig) -> anyhow::Result<EngineHandle> {
    crate::standin::engine::start(config)
}
