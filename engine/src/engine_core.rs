//! The engine core: one thread that owns the model and the device and runs the step loop,
//! `schedule()` → `runner.execute(..)` → `scheduler.update_from_output(..)`, and the
//! [`EngineHandle`] through which HTTP handlers submit requests and receive their outputs.
//!
//! A request's outputs arrive on its [`RequestStream`]. Dropping the stream (the client went
//! away, or the handler saw a stop string) aborts the request within one step and frees its
//! KV blocks.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::admission::{Admission, AdmissionLimits, QueueGate};
use crate::loader::LoadFormat;
use crate::scheduler::io::{RequestId, TokenLogprobs};

pub use crate::admission::{AddRequestError, ValidRequest};
pub use crate::scheduler::{FinishReason, FinishedRequest};
pub use start::{KvCachePlan, StateCachePlan};

mod outbox;
pub mod ranks;
mod start;
mod step_loop;
mod step_profile;

/// What one engine step produced for one request.
#[derive(Debug, Clone, PartialEq)]
pub struct StepOutput {
    /// Tokens generated this step (usually one).
    pub new_token_ids: Vec<u32>,
    /// One entry per new token when the request asked for `logprobs`.
    pub logprobs: Vec<TokenLogprobs>,
    /// Once, with the first output, when the request asked for `prompt_logprobs`: one entry per
    /// prompt token after the first (the first has no prediction).
    pub prompt_logprobs: Option<Vec<TokenLogprobs>>,
    /// Set on the request's last output.
    pub finished: Option<FinishedRequest>,
}

/// Static facts about the loaded model, for validation and `/v1/models`.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelInfo {
    /// `--model-name`, or the checkpoint directory's name.
    pub served_name: String,
    /// Maximum tokens of a sequence (prompt + output): `--max-seq-len` capped by the model.
    pub max_model_len: usize,
    pub vocab_size: usize,
    /// End-of-sequence ids from generation_config.json.
    pub eos_token_ids: Vec<u32>,
    /// Unix seconds when the model finished loading.
    pub created: u64,
    /// The device in words ([`crate::backend::Backend::describe`]).
    pub device: String,
    /// KV cache: usable blocks (of KV group 0 with groups) and tokens a block.
    pub kv_cache_blocks: usize,
    /// A model with sliding-window layers: each KV group's layers and blocks in words
    /// (`KvCachePlan::describe_groups`); empty without groups.
    pub kv_groups: String,
    pub block_size: usize,
    /// The weights' formats in words: the checkpoint's, what `--requantize` changed, and how
    /// the device holds them (`start.rs::describe_weights`), for the start-up log and
    /// `GET /version`.
    pub weights: String,
}

/// A live view of the engine for `/metrics` and `/ready`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EngineStats {
    pub num_running: usize,
    pub num_waiting: usize,
    /// Fraction of KV blocks in use, 0..=1.
    pub kv_cache_usage: f64,
    pub kv_blocks_used: usize,
    pub kv_blocks_total: usize,
    pub prompt_tokens_total: u64,
    pub generation_tokens_total: u64,
    pub prefix_cache_queries_total: u64,
    pub prefix_cache_hits_total: u64,
    pub num_preemptions_total: u64,
    pub steps_total: u64,
    /// Tokens computed in the last step and the step's batch size.
    pub last_step_tokens: usize,
    pub last_step_seqs: usize,
    pub max_num_seqs: usize,
    pub max_num_batched_tokens: usize,
    /// `--num-drafts` with `--speculative` (0: speculation off), and its counters.
    pub num_drafts: usize,
    pub spec: crate::scheduler::SpecDecodeStats,
}

/// Messages from handles to the engine thread.
#[derive(Debug)]
pub(crate) enum Command {
    Add {
        id: RequestId,
        /// Boxed: the request (with its sampling parameters) is most of the command's size.
        request: Box<ValidRequest>,
        outputs: tokio::sync::mpsc::UnboundedSender<StepOutput>,
        /// Its batch slot and queue place, given back by dropping (`admission.rs`).
        admission: Admission,
    },
    Abort(RequestId),
    /// Stop admitting; finish what is running.
    Drain,
    /// Abort everything and end the thread.
    Shutdown,
}

/// The per-request output stream. Dropping it aborts the request (a no-op once finished).
#[derive(Debug)]
pub struct RequestStream {
    pub id: RequestId,
    rx: tokio::sync::mpsc::UnboundedReceiver<StepOutput>,
    commands: std::sync::mpsc::Sender<Command>,
    finished: bool,
}

impl RequestStream {
    /// The next output; `None` after the finished one (or if the engine stopped).
    pub async fn next(&mut self) -> Option<StepOutput> {
        if self.finished {
            return None;
        }
        let out = self.rx.recv().await;
        match &out {
            Some(o) if o.finished.is_some() => self.finished = true,
            None => self.finished = true,
            _ => {}
        }
        out
    }
}

impl Drop for RequestStream {
    fn drop(&mut self) {
        if !self.finished {
            // The engine may already be gone; then there is nothing to abort.
            let _ = self.commands.send(Command::Abort(self.id));
        }
    }
}

/// `--device`: where the model runs. `met`'s flags are these enums themselves (clap's
/// `ValueEnum`): a variant's doc comment is its `--help` line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Device {
    Cpu,
    /// The first NVIDIA GPU (a `met` built with `--features cuda`; `CUDA_VISIBLE_DEVICES`
    /// chooses which).
    Cuda,
}

/// `--dtype`: the type weights, GEMM operands and the KV cache are kept in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ComputeDtype {
    /// bfloat16 on cuda, float32 on the cpu.
    #[default]
    Auto,
    /// cuda only.
    #[value(alias = "bf16")]
    Bfloat16,
    /// Weights, activations and the KV cache in f32: on cuda twice the memory and far slower,
    /// for checking against float32 references; what the cpu always does.
    #[value(alias = "float", alias = "fp32")]
    Float32,
}

/// Everything `met serve` decides before the engine starts (flags, validated).
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub model_dir: PathBuf,
    pub device: Device,
    /// `--dtype`.
    pub dtype: ComputeDtype,
    /// Fraction of the GPU's memory the engine may use (weights, activations, KV cache).
    pub gpu_memory_utilization: f64,
    pub served_name: String,
    pub load_format: LoadFormat,
    /// `--requantize`: parts re-quantized as they load (`loader/requantize.rs`).
    pub requantize: crate::loader::Requantize,
    /// Longest sequence (prompt + output); `None` = the model's `max_position_embeddings`.
    pub max_seq_len: Option<usize>,
    /// Most sequences in one step (`--max-batch-size`).
    pub max_num_seqs: usize,
    /// Token budget of one step (`--max-num-batched-tokens`); chunked prefill splits longer prompts.
    pub max_num_batched_tokens: usize,
    /// Most prompt tokens a step takes while a sequence decodes
    /// (`--prefill-chunk-with-decodes`; `None`: the whole budget).
    pub max_prefill_with_decodes: Option<usize>,
    /// Waiting requests beyond which admission answers 429 (`--max-queued-requests`).
    pub max_queued_requests: usize,
    pub enable_prefix_caching: bool,
    /// Never replay CUDA graphs (`--enforce-eager`; already folded into `tuning`).
    pub enforce_eager: bool,
    /// The tuning knobs, read once at start-up (`crate::tuning`): the backend's, the step
    /// profile, the debug step delay, forced speculative acceptance.
    pub tuning: crate::tuning::Tuning,
    /// Tokens a KV block holds.
    pub block_size: usize,
    /// Memory for the KV cache on the CPU backend, in bytes; `None` = enough for every
    /// sequence of the batch at full length, capped at a quarter of system memory.
    pub kv_cache_bytes: Option<usize>,
    /// `--num-gpu-blocks-override`: exactly this many usable KV blocks, whatever the memory.
    pub num_gpu_blocks_override: Option<usize>,
    /// `--ssm-cache-slots`: recurrent-state slots (hybrid models); `None` = `max_num_seqs`.
    pub ssm_cache_slots: Option<usize>,
    /// `--ssm-checkpoint-slots`: prefix checkpoints of the recurrent state kept for prefix
    /// caching; `None` = as many as `ssm_cache_slots`.
    pub ssm_checkpoint_slots: Option<usize>,
    /// `--ssm-checkpoint-interval`: tokens between checkpoints (a multiple of `block_size`).
    pub ssm_checkpoint_interval: usize,
    /// `--kv-cache-dtype fp8`: e4m3 KV cache with per-head scales (`backend/kv_fp8.rs`); on the
    /// CPU the f32 cache holds the same rounded values.
    pub kv_cache_fp8: bool,
    /// `--speculative --num-drafts N --speculative-max-batch M`: drafts from the checkpoint's
    /// MTP head (Qwen3.5/3.6), verified by the model (`runner/speculative.rs`).
    pub speculative: Option<crate::scheduler::SpeculativeConfig>,
    /// `--tensor-parallel-size`: ranks the model is split over (1: this process holds it
    /// all; more: `engine_core/ranks.rs` starts the others as processes, CPU only for now).
    pub tensor_parallel_size: usize,
    /// `--enable-expert-parallel`: with several ranks, each holds a slice of the routed
    /// experts, whole, instead of a slice of every expert's width.
    pub enable_expert_parallel: bool,
    /// Where the ranks meet and which of them run here (`--nnodes`, `--node-rank`,
    /// `--master-addr`, `--master-port`); `None`: a free port of 127.0.0.1, every rank here.
    pub rendezvous: Option<ranks::Rendezvous>,
    /// `--dist-timeout`: how long rank 0 waits on another rank inside a step before it takes
    /// the rank for stuck and stops the group.
    pub dist_timeout: std::time::Duration,
}

/// State shared between the handles and the engine thread.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) commands: Mutex<std::sync::mpsc::Sender<Command>>,
    pub(crate) next_id: AtomicU64,
    pub(crate) info: ModelInfo,
    pub(crate) live: Arc<Live>,
    /// What every request is checked against before it is sent to the engine thread.
    pub(crate) limits: AdmissionLimits,
}

/// Counters the engine thread publishes and the handles read.
#[derive(Debug)]
pub(crate) struct Live {
    pub(crate) stats: Mutex<EngineStats>,
    /// `--max-queued-requests` against the batch slots (`admission.rs`).
    pub(crate) queue: Arc<QueueGate>,
    pub(crate) draining: AtomicBool,
    pub(crate) stopped: AtomicBool,
    /// Why the engine stopped on its own (a tensor-parallel rank is gone), for the server to
    /// exit with.
    pub(crate) failure: Mutex<Option<String>>,
    /// The engine thread is done: the model dropped (a tensor-parallel group's ranks told to
    /// stop and reaped).
    pub(crate) finished: AtomicBool,
}

impl Live {
    pub(crate) fn new(max_num_seqs: usize, max_queued_requests: usize) -> Self {
        Self {
            stats: Mutex::default(),
            queue: QueueGate::new(max_num_seqs, max_queued_requests),
            draining: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
            failure: Mutex::new(None),
            finished: AtomicBool::new(false),
        }
    }
}

/// A cheap, cloneable handle to the running engine.
#[derive(Debug, Clone)]
pub struct EngineHandle {
    pub(crate) shared: Arc<Shared>,
}

impl EngineHandle {
    pub fn info(&self) -> &ModelInfo {
        &self.shared.info
    }

    pub fn stats(&self) -> EngineStats {
        self.shared
            .live
            .stats
            .lock()
            .map(|s| s.clone())
            .unwrap_or_default()
    }

    /// Why the engine stopped on its own, once it has: every request was failed and no more
    /// can run (a tensor-parallel rank is gone).
    pub fn failure(&self) -> Option<String> {
        self.shared.live.failure.lock().ok().and_then(|f| f.clone())
    }

    /// True once the model is loaded and until draining starts.
    pub fn is_ready(&self) -> bool {
        let live = &self.shared.live;
        !live.draining.load(Ordering::SeqCst) && !live.stopped.load(Ordering::SeqCst)
    }

    /// True when draining and nothing is left running or waiting.
    pub fn is_idle(&self) -> bool {
        // A sequence's slot is given back only after the engine thread removed it, so no
        // admitted request is missed here (the stats are published later than that).
        self.shared.live.queue.admitted_seqs() == 0 && self.stats().num_running == 0
    }

    /// The limits [`AdmissionLimits::validate`] checks requests against; the server validates
    /// every request with them before submitting any.
    pub fn limits(&self) -> &AdmissionLimits {
        &self.shared.limits
    }

    /// Submit a validated request (one sequence). See [`EngineHandle::add_requests`].
    pub fn add_request(&self, request: ValidRequest) -> Result<RequestStream, AddRequestError> {
        let mut streams = self.add_requests(vec![request])?;
        streams.pop().ok_or(AddRequestError::ShuttingDown)
    }

    /// Submit the validated sequences of one client request (its `n` choices of each
    /// prompt) together: admitted or refused as one, taking one queue place if they must
    /// wait. The refusals left are the engine's state: draining, and a full queue (decided
    /// in one locked step here; the engine thread never refuses).
    pub fn add_requests(
        &self,
        requests: Vec<ValidRequest>,
    ) -> Result<Vec<RequestStream>, AddRequestError> {
        let sh = &self.shared;
        if !self.is_ready() {
            return Err(AddRequestError::ShuttingDown);
        }
        let commands = sh
            .commands
            .lock()
            .map_err(|_| AddRequestError::ShuttingDown)?
            .clone();
        let admissions = sh.live.queue.try_reserve(requests.len())?;
        let mut streams = Vec::with_capacity(requests.len());
        for (request, admission) in requests.into_iter().zip(admissions) {
            let id = sh.next_id.fetch_add(1, Ordering::SeqCst);
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            // A failed send drops the command and with it the admission: nothing leaks.
            // The streams already made abort their requests when dropped with the error.
            commands
                .send(Command::Add {
                    id,
                    request: Box::new(request),
                    outputs: tx,
                    admission,
                })
                .map_err(|_| AddRequestError::ShuttingDown)?;
            streams.push(RequestStream {
                id,
                rx,
                commands: commands.clone(),
                finished: false,
            });
        }
        Ok(streams)
    }

    /// Stop admitting new requests; running and waiting ones finish. `/ready` turns 503.
    pub fn drain(&self) {
        self.shared.live.draining.store(true, Ordering::SeqCst);
        self.send(Command::Drain);
    }

    /// Abort everything and stop the engine thread.
    pub fn shutdown(&self) {
        self.shared.live.draining.store(true, Ordering::SeqCst);
        self.send(Command::Shutdown);
    }

    /// True once the engine thread has ended and dropped the model (after [`Self::shutdown`],
    /// or a failure): a tensor-parallel group's other ranks have been told to stop by then.
    pub fn is_finished(&self) -> bool {
        self.shared.live.finished.load(Ordering::SeqCst)
    }

    fn send(&self, c: Command) {
        if let Ok(tx) = self.shared.commands.lock() {
            let _ = tx.send(c);
        }
    }
}
