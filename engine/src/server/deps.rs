//! The modules the server builds on from other parts of the engine, named in one place:
//! the tokenizer, chat template and detokenizer, and the engine's start-up.

pub use crate::chat_template::ChatTemplate;
pub use crate::detokenizer::{IncrementalDetokenizer, StopMatcher};
pub use crate::engine_core::KvCachePlan;
pub use crate::tokenizer::Tokenizer;

use crate::engine_core::{EngineConfig, EngineHandle};
use crate::metrics::MetricsHub;

/// Load the model, size the KV cache and start the engine thread, reporting start-up phases
/// and then every step to `hub`; returns when it can serve.
pub fn start_engine(
    config: EngineConfig,
    hub: MetricsHub,
) -> anyhow::Result<(EngineHandle, KvCachePlan)> {
    EngineHandle::start_observed(config, hub)
}
