//! Per-request sampling parameters, validated by the server before they reach the engine.

use crate::grammar::Constraint;

/// How to pick each next token. Defaults match OpenAI's API (temperature 1, no filtering).
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    /// 0 means greedy.
    pub temperature: f32,
    pub top_p: f32,
    /// 0 means off.
    pub top_k: u32,
    pub min_p: f32,
    pub presence_penalty: f32,
    pub frequency_penalty: f32,
    /// 1 means off.
    pub repetition_penalty: f32,
    /// Seed of the request's random stream. The server fills in a random one when the client
    /// gives none, so sampling is always a pure function of (seed, output index, logits).
    pub seed: u64,
    pub max_tokens: usize,
    pub min_tokens: usize,
    pub stop_token_ids: Vec<u32>,
    /// End-of-sequence ids from the checkpoint's generation config.
    pub eos_token_ids: Vec<u32>,
    pub ignore_eos: bool,
    /// Number of top alternatives to return with each sampled token (`None` = no logprobs).
    pub logprobs: Option<u32>,
    /// Number of top alternatives for each prompt token (`None` = none).
    pub prompt_logprobs: Option<u32>,
    /// OpenAI's `logit_bias`: `(token id, bias)` added to the logit after penalties, before
    /// temperature and masks, sorted by id. Rows with a bias are sampled on the host.
    pub logit_bias: Vec<(u32, f32)>,
    /// The grammar the output must match (`response_format`), compiled by the server; `None`
    /// for free text. Its mask is a bitmask the CPU sampler applies on the host and the CUDA
    /// sampler on the device.
    pub constraint: Option<Constraint>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 1.0,
            top_p: 1.0,
            top_k: 0,
            min_p: 0.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            repetition_penalty: 1.0,
            seed: 0,
            max_tokens: 16,
            min_tokens: 0,
            stop_token_ids: Vec::new(),
            eos_token_ids: Vec::new(),
            ignore_eos: false,
            logprobs: None,
            prompt_logprobs: None,
            logit_bias: Vec::new(),
            constraint: None,
        }
    }
}

impl SamplingParams {
    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0
    }

    /// Does sampling need the host: a logit bias (not on the device yet)?
    pub fn needs_host(&self) -> bool {
        !self.logit_bias.is_empty()
    }
}
