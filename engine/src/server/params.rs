//! Request fields → validated [`SamplingParams`], shared by chat and completions.
//!
//! Each value is the request's, else the checkpoint's `generation_config.json`, else OpenAI's
//! default. Ranges follow OpenAI and vLLM; a value outside them is a 400 naming the field.

use metrale_protocol::openai::SamplingFields;

use super::error::ApiError;
use crate::engine_core::ModelInfo;
use crate::loader::GenerationConfig;
use crate::sampling_params::SamplingParams;

/// Most completions one request may ask for (`n` × prompts).
pub const MAX_CHOICES: usize = 128;
/// Most alternatives per token (`top_logprobs`, completions `logprobs`).
pub const MAX_TOP_LOGPROBS: u32 = 20;
/// Most stop strings.
pub const MAX_STOP_STRINGS: usize = 16;

/// A request's generation settings, validated; `max_tokens` is resolved per prompt.
#[derive(Debug, Clone)]
pub struct Generation {
    /// `max_tokens` is set per prompt by [`Generation::for_prompt`]; `seed` is the first
    /// choice's (choice `i` uses `seed + i`).
    pub sampling: SamplingParams,
    pub max_tokens: Option<usize>,
    pub n: usize,
    pub stop: Vec<String>,
    pub skip_special_tokens: bool,
}

/// What the endpoint adds to the shared fields.
#[derive(Debug, Clone, Copy, Default)]
pub struct Extras {
    pub max_tokens: Option<u64>,
    pub n: Option<u32>,
    /// Alternatives per sampled token, when log-probabilities are asked for.
    pub logprobs: Option<u32>,
    /// Alternatives per prompt token (completions `echo` + `logprobs`).
    pub prompt_logprobs: Option<u32>,
    /// `max_tokens: 0` is allowed (completions with `echo`: score the prompt only).
    pub allow_zero_max_tokens: bool,
}

fn check_range(param: &str, v: f64, ok: bool, range: &str) -> Result<f32, ApiError> {
    if ok && v.is_finite() {
        Ok(v as f32)
    } else {
        Err(ApiError::invalid(
            param,
            format!("`{param}` must be {range}, got {v}"),
        ))
    }
}

/// Most entries of `logit_bias` (OpenAI's limit).
pub const MAX_LOGIT_BIAS: usize = 300;

/// OpenAI's `logit_bias`: token ids (as strings) to a bias in [-100, 100], sorted by id.
fn logit_bias(
    bias: &serde_json::Map<String, serde_json::Value>,
    vocab: usize,
) -> Result<Vec<(u32, f32)>, ApiError> {
    if bias.len() > MAX_LOGIT_BIAS {
        return Err(ApiError::invalid(
            "logit_bias",
            format!("at most {MAX_LOGIT_BIAS} tokens can be biased"),
        ));
    }
    let mut out = Vec::with_capacity(bias.len());
    for (key, v) in bias {
        let param = format!("logit_bias.{key}");
        let id = key
            .parse::<u32>()
            .ok()
            .filter(|&id| (id as usize) < vocab)
            .ok_or_else(|| {
                ApiError::invalid(
                    &param,
                    format!("`{key}` is not a token id of this model (0..{vocab})"),
                )
            })?;
        let b = v.as_f64().unwrap_or(f64::NAN);
        out.push((
            id,
            check_range(
                &param,
                b,
                (-100.0..=100.0).contains(&b),
                "a number in [-100, 100]",
            )?,
        ));
    }
    out.sort_unstable_by_key(|&(id, _)| id);
    Ok(out)
}

impl Generation {
    pub fn from_request(
        f: &SamplingFields,
        x: Extras,
        defaults: &GenerationConfig,
        info: &ModelInfo,
    ) -> Result<Self, ApiError> {
        let mut s = SamplingParams::default();
        if let Some(t) = f.temperature.or(defaults.temperature.map(f64::from)) {
            s.temperature = check_range("temperature", t, (0.0..=2.0).contains(&t), "in [0, 2]")?;
        }
        if let Some(p) = f.top_p.or(defaults.top_p.map(f64::from)) {
            s.top_p = check_range("top_p", p, p > 0.0 && p <= 1.0, "in (0, 1]")?;
        }
        match f.top_k.or(defaults.top_k.map(i64::from)) {
            None | Some(-1) | Some(0) => s.top_k = 0,
            Some(k) if k > 0 => s.top_k = u32::try_from(k).unwrap_or(u32::MAX),
            Some(k) => {
                return Err(ApiError::invalid(
                    "top_k",
                    format!("`top_k` must be -1 (off) or at least 0, got {k}"),
                ));
            }
        }
        if let Some(p) = f.min_p.or(defaults.min_p.map(f64::from)) {
            s.min_p = check_range("min_p", p, (0.0..=1.0).contains(&p), "in [0, 1]")?;
        }
        if let Some(p) = f.presence_penalty {
            s.presence_penalty = check_range(
                "presence_penalty",
                p,
                (-2.0..=2.0).contains(&p),
                "in [-2, 2]",
            )?;
        }
        if let Some(p) = f.frequency_penalty {
            s.frequency_penalty = check_range(
                "frequency_penalty",
                p,
                (-2.0..=2.0).contains(&p),
                "in [-2, 2]",
            )?;
        }
        if let Some(p) = f
            .repetition_penalty
            .or(defaults.repetition_penalty.map(f64::from))
        {
            s.repetition_penalty = check_range("repetition_penalty", p, p > 0.0, "greater than 0")?;
        }
        if let Some(bias) = &f.logit_bias {
            s.logit_bias = logit_bias(bias, info.vocab_size)?;
        }
        s.seed = match f.seed {
            Some(seed) => seed.0,
            None => rand::random(),
        };
        s.ignore_eos = f.ignore_eos.unwrap_or(false);
        s.eos_token_ids = info.eos_token_ids.clone();
        if let Some(ids) = &f.stop_token_ids {
            if let Some((i, bad)) = ids
                .iter()
                .enumerate()
                .find(|(_, t)| **t as usize >= info.vocab_size)
            {
                return Err(ApiError::invalid(
                    format!("stop_token_ids[{i}]"),
                    format!(
                        "token id {bad} is outside the vocabulary (0..{})",
                        info.vocab_size
                    ),
                ));
            }
            s.stop_token_ids = ids.clone();
        }
        let max_tokens = match x.max_tokens {
            None => None,
            Some(0) if x.allow_zero_max_tokens => Some(0),
            Some(0) => {
                return Err(ApiError::invalid(
                    "max_tokens",
                    "`max_tokens` must be at least 1",
                ));
            }
            Some(m) => Some(usize::try_from(m).unwrap_or(usize::MAX)),
        };
        if let Some(m) = f.min_tokens {
            let m = usize::try_from(m).unwrap_or(usize::MAX);
            if max_tokens.is_some_and(|max| m > max) {
                return Err(ApiError::invalid(
                    "min_tokens",
                    "`min_tokens` must not exceed `max_tokens`",
                ));
            }
            s.min_tokens = m;
        }
        for (param, k) in [
            ("logprobs", x.logprobs),
            ("prompt_logprobs", x.prompt_logprobs),
        ] {
            if k.is_some_and(|k| k > MAX_TOP_LOGPROBS) {
                return Err(ApiError::invalid(
                    param,
                    format!("at most {MAX_TOP_LOGPROBS} alternatives per token can be returned"),
                ));
            }
        }
        s.logprobs = x.logprobs;
        s.prompt_logprobs = x.prompt_logprobs;
        let n = x.n.unwrap_or(1) as usize;
        if !(1..=MAX_CHOICES).contains(&n) {
            return Err(ApiError::invalid(
                "n",
                format!("`n` must be between 1 and {MAX_CHOICES}, got {n}"),
            ));
        }
        let stop = f.stop.clone().map(|s| s.into_vec()).unwrap_or_default();
        if stop.len() > MAX_STOP_STRINGS {
            return Err(ApiError::invalid(
                "stop",
                format!("at most {MAX_STOP_STRINGS} stop strings are allowed"),
            ));
        }
        Ok(Self {
            sampling: s,
            max_tokens,
            n,
            stop,
            skip_special_tokens: f.skip_special_tokens.unwrap_or(true),
        })
    }

    /// `max_tokens: 0`: score the prompt, generate nothing (completions with `echo`).
    pub fn prompt_only(&self) -> bool {
        self.max_tokens == Some(0)
    }

    /// Sampling for choice `i` of a prompt of `prompt_len` tokens: `max_tokens` as asked, or
    /// absent the rest of the context, and the seed offset by `i`. Whether it fits is
    /// admission's call (`admission.rs`), made once when the request is validated.
    pub fn for_prompt(&self, prompt_len: usize, info: &ModelInfo, i: usize) -> SamplingParams {
        let max_tokens = self
            .max_tokens
            .unwrap_or_else(|| info.max_model_len.saturating_sub(prompt_len));
        let mut s = self.sampling.clone();
        // The engine always generates; a prompt-only request asks for one token and the
        // output side drops it. A prompt that fills the context asks for one too, which
        // admission refuses by name.
        s.max_tokens = max_tokens.max(1);
        s.seed = s.seed.wrapping_add(i as u64);
        s
    }
}

#[cfg(test)]
mod tests {
    use metrale_protocol::openai::Seed;
    use serde_json::{Value, json};

    use super::*;

    fn info() -> ModelInfo {
        ModelInfo {
            weights: String::new(),
            served_name: "m".into(),
            max_model_len: 100,
            vocab_size: 50,
            eos_token_ids: vec![7],
            created: 0,
            device: "cpu".into(),
            kv_cache_blocks: 10,
            kv_groups: String::new(),
            block_size: 16,
        }
    }

    fn gen_with(f: SamplingFields, x: Extras) -> Result<Generation, ApiError> {
        Generation::from_request(&f, x, &GenerationConfig::default(), &info())
    }

    fn param_of(r: Result<Generation, ApiError>) -> Option<String> {
        r.expect_err("should be refused").body().error.param
    }

    #[test]
    fn out_of_range_values_name_their_field() {
        let cases: [(SamplingFields, &str); 7] = [
            (
                SamplingFields {
                    temperature: Some(2.5),
                    ..Default::default()
                },
                "temperature",
            ),
            (
                SamplingFields {
                    top_p: Some(0.0),
                    ..Default::default()
                },
                "top_p",
            ),
            (
                SamplingFields {
                    top_k: Some(-2),
                    ..Default::default()
                },
                "top_k",
            ),
            (
                SamplingFields {
                    min_p: Some(1.5),
                    ..Default::default()
                },
                "min_p",
            ),
            (
                SamplingFields {
                    presence_penalty: Some(-3.0),
                    ..Default::default()
                },
                "presence_penalty",
            ),
            (
                SamplingFields {
                    repetition_penalty: Some(0.0),
                    ..Default::default()
                },
                "repetition_penalty",
            ),
            (
                SamplingFields {
                    stop_token_ids: Some(vec![1, 50]),
                    ..Default::default()
                },
                "stop_token_ids[1]",
            ),
        ];
        for (f, want) in cases {
            assert_eq!(
                param_of(gen_with(f, Extras::default())).as_deref(),
                Some(want)
            );
        }
        let x = Extras {
            n: Some(0),
            ..Default::default()
        };
        assert_eq!(
            param_of(gen_with(SamplingFields::default(), x)).as_deref(),
            Some("n")
        );
        let x = Extras {
            max_tokens: Some(0),
            ..Default::default()
        };
        assert_eq!(
            param_of(gen_with(SamplingFields::default(), x)).as_deref(),
            Some("max_tokens")
        );
    }

    #[test]
    fn logit_bias_is_checked_by_entry_and_sorted() {
        let bias = |v: Value| SamplingFields {
            logit_bias: v.as_object().cloned(),
            ..Default::default()
        };
        let g = gen_with(bias(json!({"9": -100, "3": 2.5})), Extras::default()).expect("ok");
        assert_eq!(g.sampling.logit_bias, vec![(3, 2.5), (9, -100.0)]);
        for (v, param) in [
            (json!({"50": 1}), "logit_bias.50"),
            (json!({"x": 1}), "logit_bias.x"),
            (json!({"1": 101}), "logit_bias.1"),
            (json!({"1": "high"}), "logit_bias.1"),
        ] {
            assert_eq!(
                param_of(gen_with(bias(v), Extras::default())).as_deref(),
                Some(param)
            );
        }
    }

    #[test]
    fn request_overrides_generation_config_which_overrides_openai() {
        let defaults = GenerationConfig {
            temperature: Some(0.6),
            top_k: Some(20),
            ..Default::default()
        };
        let f = SamplingFields {
            temperature: Some(0.0),
            ..Default::default()
        };
        let g = Generation::from_request(&f, Extras::default(), &defaults, &info()).expect("ok");
        assert_eq!(g.sampling.temperature, 0.0);
        assert_eq!(g.sampling.top_k, 20);
        assert_eq!(g.sampling.top_p, 1.0);
        assert_eq!(g.sampling.eos_token_ids, vec![7]);
    }

    #[test]
    fn max_tokens_defaults_to_the_rest_of_the_context() {
        let g = gen_with(
            SamplingFields {
                seed: Some(Seed(u64::MAX)),
                ..Default::default()
            },
            Extras::default(),
        )
        .expect("ok");
        let s = g.for_prompt(30, &info(), 1);
        assert_eq!(s.max_tokens, 70);
        assert_eq!(s.seed, 0, "seed + choice index wraps");
        // A full context leaves nothing: one token, which admission refuses.
        assert_eq!(g.for_prompt(100, &info(), 0).max_tokens, 1);
        let g = gen_with(
            SamplingFields::default(),
            Extras {
                max_tokens: Some(80),
                ..Default::default()
            },
        )
        .expect("ok");
        assert_eq!(g.for_prompt(30, &info(), 0).max_tokens, 80);
    }
}
