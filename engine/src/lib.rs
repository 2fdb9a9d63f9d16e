//! The Metrale inference engine: `met serve`, `met score`.
//!
//! Module owners follow `docs/architecture.md`: `server/` speaks HTTP only, `scheduler/` and
//! `kv_cache/` are pure bookkeeping, `runner/` turns a step into one varlen batch, `models/`
//! hold one family a file, `backend/` one op per method.

pub mod admission;
pub mod backend;
pub mod chat_template;
pub mod detokenizer;
pub mod engine_core;
pub mod grammar;
pub mod kv_cache;
pub mod loader;
pub mod metrics;
pub mod models;
pub mod parallel;
pub mod request;
pub mod runner;
pub mod sampling_params;
pub mod scheduler;
pub mod score;
pub mod server;
pub mod tokenizer;
pub mod tool_parsers;
pub mod tuning;
