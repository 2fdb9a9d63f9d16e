//! STAND-IN for `EngineHandle::start` (engine core, written by the lead): a plain engine
//! thread so the server can be tested end to end before the real scheduler, KV cache manager
//! and runner are merged. Whole-prompt prefill, one batched forward a step, blocks reserved
//! for prompt + max_tokens at admission, no preemption, no prefix cache, no penalties.
//! Sampling is a pure function of (seed, output index, logits), as the real runner's will be.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;

use crate::backend::{Backend, BatchInputs, CpuBackend, SeqChunk};
use crate::engine_core::{
    Command, EngineConfig, EngineHandle, EngineStats, FinishReason, Finished, ModelInfo, Shared,
    StepOutput,
};
use crate::loader::{ModelDir, Weights};
use crate::models::Model;
use crate::models::qwen3::Qwen3;
use crate::sampling_params::SamplingParams;
use crate::scheduler::io::{RequestId, TokenLogprobs};
use crate::score::top_k_of;

struct Req {
    id: RequestId,
    tokens: Vec<u32>,
    num_prompt: usize,
    computed: usize,
    sampling: SamplingParams,
    tx: tokio::sync::mpsc::UnboundedSender<StepOutput>,
    blocks: Vec<u32>,
}

pub fn start(config: EngineConfig) -> anyhow::Result<EngineHandle> {
    let dir = ModelDir::open(&config.model_dir)?;
    let mc = dir.config()?;
    let gc = dir.generation_config()?;
    let weights = Weights::open(&dir.root, config.load_format)?;
    let model = Qwen3::load(&CpuBackend, &mc, &weights)
        .with_context(|| format!("failed to load {}", config.model_dir.display()))?;
    let max_model_len = config
        .max_seq_len
        .unwrap_or(mc.max_position_embeddings)
        .min(mc.max_position_embeddings);
    let bs = config.block_size;
    let num_blocks = match config.kv_cache_bytes {
        Some(b) => b / (model.kv_bytes_per_token(4) * bs),
        None => config.max_num_seqs * max_model_len.div_ceil(bs),
    };
    let kv = model.new_kv_storage(&CpuBackend, num_blocks + 1, bs)?;
    let (tx, rx) = mpsc::channel();
    let shared = Arc::new(Shared {
        commands: Mutex::new(tx),
        next_id: AtomicU64::new(1),
        info: ModelInfo {
            served_name: config.served_name.clone(),
            max_model_len,
            vocab_size: mc.vocab_size,
            eos_token_ids: gc.eos_token_ids.clone(),
            created: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        },
        stats: Mutex::new(EngineStats {
            kv_blocks_total: num_blocks,
            max_num_seqs: config.max_num_seqs,
            max_num_batched_tokens: config.max_num_batched_tokens,
            ..EngineStats::default()
        }),
        waiting: AtomicUsize::new(0),
        max_queued: config.max_queued_requests,
        kv_capacity_tokens: num_blocks * bs,
        draining: AtomicBool::new(false),
        stopped: AtomicBool::new(false),
    });
    let sh = shared.clone();
    std::thread::Builder::new()
        .name("met-engine".into())
        .spawn(move || {
            let mut e = Engine {
                model,
                kv,
                bs,
                max_model_len,
                max_seqs: config.max_num_seqs,
                free: (1..=num_blocks as u32).rev().collect(),
                num_blocks,
                waiting: VecDeque::new(),
                running: Vec::new(),
                sh: sh.clone(),
            };
            e.run(rx);
            sh.stopped.store(true, Ordering::SeqCst);
        })?;
    Ok(EngineHandle { shared })
}

struct Engine {
    model: Qwen3<CpuBackend>,
    kv: crate::models::KvStorage<CpuBackend>,
    bs: usize,
    max_model_len: usize,
    max_seqs: usize,
    free: Vec<u32>,
    num_blocks: usize,
    waiting: VecDeque<Req>,
    running: Vec<Req>,
    sh: Arc<Shared>,
}

impl Engine {
    fn run(&mut self, rx: mpsc::Receiver<Command>) {
        loop {
            let idle = self.waiting.is_empty() && self.running.is_empty();
            let first = if idle {
                match rx.recv() {
                    Ok(c) => Some(c),
                    Err(_) => return,
                }
            } else {
                None
            };
            for c in first.into_iter().chain(rx.try_iter()) {
                match c {
                    Command::Add {
                        id,
                        request,
                        outputs,
                    } => self.waiting.push_back(Req {
                        id,
                        num_prompt: request.prompt_token_ids.len(),
                        tokens: request.prompt_token_ids,
                        computed: 0,
                        sampling: request.sampling,
                        tx: outputs,
                        blocks: Vec::new(),
                    }),
                    Command::Abort(id) => self.abort(id),
                    Command::Drain => {}
                    Command::Shutdown => {
                        for r in self.waiting.drain(..).chain(self.running.drain(..)) {
                            let _ = r.tx.send(finished_output(&r, FinishReason::Abort));
                        }
                        return;
                    }
                }
            }
            self.admit();
            if let Err(e) = self.step() {
                tracing::error!("stand-in engine step failed: {e:#}");
                for r in self.running.drain(..) {
                    let _ = r.tx.send(finished_output(&r, FinishReason::Abort));
                    self.free.extend(r.blocks);
                }
            }
            self.publish();
        }
    }

    fn abort(&mut self, id: RequestId) {
        if let Some(i) = self.waiting.iter().position(|r| r.id == id) {
            self.waiting.remove(i);
            self.sh.waiting.fetch_sub(1, Ordering::SeqCst);
        }
        if let Some(i) = self.running.iter().position(|r| r.id == id) {
            let r = self.running.remove(i);
            self.free.extend(r.blocks);
        }
    }

    fn admit(&mut self) {
        while self.running.len() < self.max_seqs {
            let Some(r) = self.waiting.front() else { break };
            let need = (r.tokens.len() + r.sampling.max_tokens)
                .min(self.max_model_len)
                .div_ceil(self.bs)
                .max(1);
            if need > self.free.len() {
                break;
            }
            let Some(mut r) = self.waiting.pop_front() else {
                break;
            };
            r.blocks = self.free.split_off(self.free.len() - need);
            self.sh.waiting.fetch_sub(1, Ordering::SeqCst);
            self.running.push(r);
        }
    }

    fn step(&mut self) -> anyhow::Result<()> {
        if self.running.is_empty() {
            return Ok(());
        }
        let chunks: Vec<SeqChunk<'_>> = self
            .running
            .iter()
            .map(|r| {
                let n = r.tokens.len() - r.computed;
                let rows = if r.computed == 0 && r.sampling.prompt_logprobs.is_some() {
                    (0..n).collect()
                } else {
                    vec![n - 1]
                };
                SeqChunk {
                    tokens: &r.tokens[r.computed..],
                    start_pos: r.computed,
                    block_table: &r.blocks,
                    logits_rows: rows,
                }
            })
            .collect();
        let host = BatchInputs::build(self.bs, &chunks);
        let batch = CpuBackend.prepare_batch(&host)?;
        let mut logits = self
            .model
            .forward(&CpuBackend, &host, &batch, &mut self.kv)?;
        CpuBackend.log_softmax(&mut logits)?;
        let lp = CpuBackend.to_host(&logits)?;
        let vocab = self.model.vocab_size();
        let mut rows = lp.chunks(vocab);
        let mut done = Vec::new();
        let mut new_prompt = 0u64;
        let mut new_gen = 0u64;
        for (i, r) in self.running.iter_mut().enumerate() {
            let prefill = r.computed == 0;
            let mut out = StepOutput {
                new_token_ids: Vec::new(),
                logprobs: Vec::new(),
                prompt_logprobs: None,
                finished: None,
            };
            if prefill {
                new_prompt += r.num_prompt as u64;
                if let Some(k) = r.sampling.prompt_logprobs {
                    let mut v = Vec::new();
                    for p in 0..r.num_prompt - 1 {
                        let row = rows.next().unwrap_or_default();
                        let t = r.tokens[p + 1];
                        v.push(TokenLogprobs {
                            token_id: t,
                            logprob: row.get(t as usize).copied().unwrap_or(f32::NEG_INFINITY),
                            top: top_k_of(row, k as usize),
                        });
                    }
                    out.prompt_logprobs = Some(v);
                }
            }
            let row = rows.next().unwrap_or_default();
            r.computed = r.tokens.len();
            let generated = r.tokens.len() - r.num_prompt;
            let mut reason = None;
            if r.sampling.max_tokens == 0 {
                reason = Some(FinishReason::Length);
            } else {
                let t = sample(row, &r.sampling, generated as u64);
                if let Some(k) = r.sampling.logprobs {
                    out.logprobs.push(TokenLogprobs {
                        token_id: t,
                        logprob: row[t as usize],
                        top: top_k_of(row, k as usize),
                    });
                }
                r.tokens.push(t);
                out.new_token_ids.push(t);
                new_gen += 1;
                let generated = generated + 1;
                let s = &r.sampling;
                let eos = !s.ignore_eos && s.eos_token_ids.contains(&t);
                if generated >= s.min_tokens && (eos || s.stop_token_ids.contains(&t)) {
                    reason = Some(FinishReason::StopToken(t));
                } else if generated >= s.max_tokens || r.tokens.len() >= self.max_model_len {
                    reason = Some(FinishReason::Length);
                }
            }
            if let Some(reason) = reason {
                out.finished = finished_output(r, reason).finished;
                done.push(i);
            }
            if r.tx.send(out).is_err() && !done.contains(&i) {
                done.push(i);
            }
        }
        for i in done.into_iter().rev() {
            let r = self.running.remove(i);
            self.free.extend(r.blocks);
        }
        if let Ok(mut s) = self.sh.stats.lock() {
            s.prompt_tokens_total += new_prompt;
            s.generation_tokens_total += new_gen;
            s.steps_total += 1;
            s.last_step_tokens = host.num_tokens();
            s.last_step_seqs = host.num_seqs();
        }
        Ok(())
    }

    fn publish(&self) {
        if let Ok(mut s) = self.sh.stats.lock() {
            s.num_running = self.running.len();
            s.num_waiting = self.waiting.len();
            s.kv_blocks_used = self.num_blocks - self.free.len();
            s.kv_cache_usage = s.kv_blocks_used as f64 / self.num_blocks.max(1) as f64;
        }
    }
}

fn finished_output(r: &Req, reason: FinishReason) -> StepOutput {
    StepOutput {
        new_token_ids: Vec::new(),
        logprobs: Vec::new(),
        prompt_logprobs: None,
        finished: Some(Finished {
            reason,
            num_prompt_tokens: r.num_prompt,
            num_generated_tokens: r.tokens.len().saturating_sub(r.num_prompt),
            num_cached_tokens: 0,
        }),
    }
}

/// Temperature, top-k, top-p and min-p over a log-softmax row, seeded by (seed, index).
fn sample(row: &[f32], s: &SamplingParams, index: u64) -> u32 {
    if s.is_greedy() {
        return top_k_of(row, 1).first().map_or(0, |&(t, _)| t);
    }
    let k = if s.top_k == 0 {
        row.len()
    } else {
        s.top_k as usize
    };
    let mut cand: Vec<(u32, f32)> = top_k_of(row, k)
        .into_iter()
        .map(|(t, lp)| (t, lp / s.temperature))
        .collect();
    let max = cand.first().map_or(0.0, |c| c.1);
    let mut probs: Vec<f32> = cand.iter().map(|c| (c.1 - max).exp()).collect();
    let sum: f32 = probs.iter().sum();
    probs.iter_mut().for_each(|p| *p /= sum);
    let mut keep = probs.len();
    let mut acc = 0.0;
    for (i, p) in probs.iter().enumerate() {
        acc += p;
        if acc >= s.top_p || (s.min_p > 0.0 && *p < s.min_p * probs[0]) {
            keep = if acc >= s.top_p { i + 1 } else { i.max(1) };
            break;
        }
    }
    cand.truncate(keep);
    // Gumbel-max with noise keyed by (seed, index, token id): a sample that tiny numeric
    // differences between batch shapes do not move (unlike a CDF walk over sorted tokens).
    let mut best = (f32::NEG_INFINITY, 0u32);
    for &(t, scaled) in &cand {
        let u = (splitmix(s.seed ^ splitmix(index ^ (u64::from(t) << 32))) >> 11) as f64
            / (1u64 << 53) as f64;
        let g = -(-(u.max(f64::MIN_POSITIVE)).ln()).ln() as f32;
        if scaled + g > best.0 {
            best = (scaled + g, t);
        }
    }
    best.1
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}
