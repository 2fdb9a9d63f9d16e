//! The scheduler: which requests run each step and how many of their tokens.

use std::collections::VecDeque;
use std::mem;
use std::sync::Arc;

use crate::admission::{AdmissionLimits, ValidRequest};
use crate::kv_cache::hash::FastMap;
use crate::kv_cache::{GroupConfig, GroupedKvConfig, HashKey, KvCacheConfig, ServingKv};
use crate::request::Request;
use crate::scheduler::config::{MAX_DRAFTS, SchedulerConfig, SchedulerConfigError};
use crate::scheduler::draft_policy::DraftPolicy;
use crate::scheduler::io::{
    GroupTable, RequestId, RunnerOutput, ScheduledSeq, SchedulerOutput, SeqOutput,
};
use crate::scheduler::output::{
    EngineEvent, FinishReason, FinishedRequest, SchedulerStats, SpecDecodeStats,
};
use crate::scheduler::table_rows::TableRows;

#[derive(Debug)]
pub struct Scheduler {
    cfg: SchedulerConfig,
    kv: ServingKv,
    requests: FastMap<RequestId, Request>,
    /// Admission order: new requests at the back, preempted ones at the front.
    waiting: VecDeque<RequestId>,
    /// Sorted by (arrival, id): served first to last, preempted last to first.
    running: Vec<RequestId>,
    /// Requests that left since the last `schedule()`, for `SchedulerOutput::finished`.
    left: Vec<RequestId>,
    num_preemptions: u64,
    last_step_tokens: usize,
    spec: SpecDecodeStats,
    /// How many drafts a step, with `--speculative` (`draft_policy.rs`).
    policy: Option<DraftPolicy>,
    /// Each running request's block-table row in the runner, and what it was sent.
    table_rows: TableRows,
}

impl Scheduler {
    /// A scheduler whose prefix hashes use a random per-process key.
    pub fn new(cfg: SchedulerConfig) -> Result<Self, SchedulerConfigError> {
        Self::with_hash_key(cfg, HashKey::random())
    }

    /// A scheduler with a fixed prefix-hash key (reproducible hashes, for tests).
    pub fn with_hash_key(cfg: SchedulerConfig, key: HashKey) -> Result<Self, SchedulerConfigError> {
        cfg.validate()?;
        let kv = ServingKv::plain(
            KvCacheConfig {
                block_size: cfg.block_size,
                num_blocks: cfg.num_blocks,
                enable_prefix_caching: cfg.enable_prefix_caching,
                state: cfg.state,
            },
            key,
        )?;
        Ok(Self::with_kv(cfg, kv))
    }

    /// A scheduler for a model with sliding-window layers: a block pool and a block table a
    /// KV group (`kv_cache/grouped.rs`), the sliding groups keeping only their window.
    /// `cfg.num_blocks` is group 0's; a model with recurrent state has no groups.
    pub fn with_kv_groups(
        cfg: SchedulerConfig,
        groups: Vec<GroupConfig>,
        key: HashKey,
    ) -> Result<Self, SchedulerConfigError> {
        cfg.validate()?;
        if cfg.state.is_some() {
            return Err(SchedulerConfigError::GroupsWithState);
        }
        let kv = ServingKv::grouped(
            GroupedKvConfig {
                block_size: cfg.block_size,
                groups,
                enable_prefix_caching: cfg.enable_prefix_caching,
            },
            key,
        )?;
        Ok(Self::with_kv(cfg, kv))
    }

    fn with_kv(cfg: SchedulerConfig, kv: ServingKv) -> Self {
        Self {
            cfg,
            kv,
            requests: FastMap::default(),
            waiting: VecDeque::new(),
            running: Vec::new(),
            left: Vec::new(),
            num_preemptions: 0,
            last_step_tokens: 0,
            spec: SpecDecodeStats::default(),
            policy: cfg
                .speculative
                .map(|sp| DraftPolicy::new(sp.ladder, sp.draft_cost)),
            table_rows: TableRows::new(cfg.max_num_seqs),
        }
    }

    pub fn config(&self) -> &SchedulerConfig {
        &self.cfg
    }

    /// Queues an admitted request. Admission decided it fits (`admission.rs`, against this
    /// config's `max_model_len` and KV cache); ids are unique (the engine numbers them).
    pub fn add_request(&mut self, id: RequestId, request: ValidRequest) {
        debug_assert!(!self.requests.contains_key(&id), "request id {id} reused");
        let (prompt, sampling, arrival) = request.into_parts();
        self.requests
            .insert(id, Request::new(id, prompt, Arc::new(sampling), arrival));
        self.waiting.push_back(id);
    }

    /// The limits to validate requests against for this scheduler (`vocab_size` is the
    /// model's, which the scheduler does not know).
    pub fn admission_limits(&self, vocab_size: usize) -> AdmissionLimits {
        // A step writes at most the token budget (a chunk and a decode row's drafts).
        let chunk = self.cfg.max_num_batched_tokens;
        let bs = self.cfg.block_size;
        AdmissionLimits::new(
            self.cfg.max_model_len,
            self.kv.max_request_tokens(chunk) / bs,
            bs,
            vocab_size,
        )
    }

    /// Drops a request wherever it is and frees its blocks now. False when it is unknown
    /// (already finished, or never added).
    pub fn abort_request(&mut self, id: RequestId) -> bool {
        self.remove(id).is_some()
    }

    /// Finishes a request for a reason found outside the scheduler (a stop string). Returns
    /// its final counts, or `None` when it is unknown.
    pub fn finish_request(
        &mut self,
        id: RequestId,
        reason: FinishReason,
    ) -> Option<FinishedRequest> {
        self.remove(id).map(|r| finished(&r, reason))
    }

    pub fn has_unfinished_requests(&self) -> bool {
        !self.requests.is_empty()
    }

    pub fn num_running(&self) -> usize {
        self.running.len()
    }

    pub fn num_waiting(&self) -> usize {
        self.waiting.len()
    }

    pub fn stats(&self) -> SchedulerStats {
        SchedulerStats {
            num_running: self.running.len(),
            num_waiting: self.waiting.len(),
            kv_cache_usage: self.kv.usage(),
            prefix_cache: self.kv.prefix_cache_stats(),
            num_preemptions: self.num_preemptions,
            num_batched_tokens: self.last_step_tokens,
            spec: SpecDecodeStats {
                acceptance: self
                    .policy
                    .as_ref()
                    .map_or([0.0; MAX_DRAFTS], |p| *p.acceptance()),
                ..self.spec
            },
        }
    }

    /// Plans one step: running requests first (oldest first), then waiting ones in queue
    /// order while the token budget, `max_num_seqs` and free blocks allow.
    pub fn schedule(&mut self) -> SchedulerOutput {
        let mut budget = self.cfg.max_num_batched_tokens;
        let mut seqs = Vec::with_capacity(self.running.len() + 1);
        let mut preempted = Vec::new();
        // The most drafts a sequence verifies this step (the ladder's, for this batch), and
        // the drafts the MTP head proposes after it (the policy's choice within it).
        // Counted before admitting anyone: a step that admits the first requests counts as 1.
        let (cap, propose) = match &mut self.policy {
            Some(policy) => {
                let running = self.running.len().max(1);
                let cap = policy.ladder().cap(running);
                if cap == 0 {
                    self.spec.num_paused_steps += 1;
                }
                (cap, policy.choose(running))
            }
            None => (0, 0),
        };
        self.spec.drafts_per_step = propose;
        // Prompt tokens this step may still take: fewer while someone decodes, so long prompts
        // advance in small chunks beside running streams (their inter-token latency is a
        // small chunk's step, not a whole budget's).
        let decoding = self
            .running
            .iter()
            .any(|id| self.requests.get(id).is_some_and(is_decode));
        let mut prefill_left = match self.cfg.max_prefill_with_decodes {
            Some(cap) if decoding => cap,
            _ => usize::MAX,
        };

        // Running requests: each gets what it still lacks, up to the budget.
        let mut i = 0;
        while i < self.running.len() && budget > 0 {
            let id = self.running[i];
            let Some(req) = self.requests.get(&id) else {
                debug_assert!(false, "running request {id} has no state");
                self.running.remove(i);
                continue;
            };
            let start = req.num_computed_tokens;
            let prefill = !is_decode(req);
            let n = match prefill {
                true => req.num_uncomputed_tokens().min(budget).min(prefill_left),
                false => req.num_uncomputed_tokens().min(budget),
            };
            if n == 0 && prefill {
                // The step's prompt tokens are spent: this prompt waits for the next step.
                i += 1;
                continue;
            }
            if n == 0 {
                debug_assert!(false, "running request {id} has nothing to compute");
                i += 1;
                continue;
            }
            // With speculation, a chunk that reaches the end verifies the request's drafts
            // (a decode step only) and holds slots for the keys of the drafts the head chains
            // after it, when blocks allow without preempting anyone.
            // Drafts proposed last step are verified even when the policy proposes fewer now
            // (a probe's drafts are its evidence), but never more than the ladder allows.
            let mut drafts = 0;
            if cap > 0 && n == req.num_uncomputed_tokens() {
                let room = req.num_remaining(self.cfg.max_model_len).max(1);
                if n == 1 {
                    drafts = req.drafts.len().min(cap).min(room - 1).min(budget - n);
                }
                // Never past the last position the request can reach.
                let want = (n + drafts + propose.saturating_sub(1)).min(n + room - 1);
                if !self.kv.allocate_slots(id, start, want, None) {
                    drafts = 0;
                }
            }
            // Make room, preempting the most recently arrived running request until it fits;
            // stop when that is this request itself.
            let fits = loop {
                if self.kv.allocate_slots(id, start, n, None) {
                    break true;
                }
                let Some(victim) = self.running.pop() else {
                    break false;
                };
                self.preempt(victim);
                preempted.push(victim);
                if victim == id {
                    break false;
                }
            };
            if !fits {
                break;
            }
            budget -= n + drafts;
            if prefill {
                prefill_left -= n;
            }
            if let Some(req) = self.requests.get_mut(&id) {
                seqs.push(scheduled_seq(req, &mut self.kv, start, n, drafts, propose));
            }
            i += 1;
        }

        // Waiting requests, unless blocks are so short that someone was just preempted.
        if preempted.is_empty() {
            let mut admitted = Vec::new();
            while budget.min(prefill_left) > 0
                && self.running.len() + admitted.len() < self.cfg.max_num_seqs
            {
                let Some(&id) = self.waiting.front() else {
                    break;
                };
                let Some(n) = self.admit(id, budget.min(prefill_left)) else {
                    break;
                };
                self.waiting.pop_front();
                budget -= n;
                prefill_left -= n;
                admitted.push(id);
                if let Some(req) = self.requests.get_mut(&id) {
                    let start = req.num_computed_tokens;
                    seqs.push(scheduled_seq(req, &mut self.kv, start, n, 0, propose));
                }
            }
            for id in admitted {
                self.insert_running(id);
            }
        }

        // The tables' changes since each sequence's last step, now that all are allocated.
        let groups = self.kv.num_groups();
        for s in &mut seqs {
            let tables: Vec<(&[u32], usize)> = (0..groups)
                .map(|g| {
                    let ids = self.kv.group_block_ids(s.req_id, g);
                    (ids, self.kv.num_released(s.req_id, g))
                })
                .collect();
            let mut deltas = self.table_rows.delta(s.req_id, &tables).into_iter();
            s.table = deltas.next().unwrap_or_default();
            s.group_tables = deltas
                .zip(&tables[1..])
                .map(|(table, (ids, _))| GroupTable {
                    block_ids: ids.to_vec(),
                    table,
                })
                .collect();
        }
        let num_batched_tokens = self.cfg.max_num_batched_tokens - budget;
        self.last_step_tokens = num_batched_tokens;
        SchedulerOutput {
            seqs,
            preempted,
            finished: mem::take(&mut self.left),
            num_batched_tokens,
        }
    }

    /// The wall time of the step `out` planned, from `schedule()` to its results applied:
    /// steady decode steps (every sequence one new token, all verifying and proposing the
    /// same drafts) teach the draft policy what drafts cost at this batch size.
    pub fn record_step_time(&mut self, out: &SchedulerOutput, secs: f64) {
        let Some(policy) = self.policy.as_mut() else {
            return;
        };
        let Some(first) = out.seqs.first() else {
            return;
        };
        let k = first.num_drafts;
        let steady = out
            .seqs
            .iter()
            .all(|s| s.sample && s.num_drafts == k && s.propose == k && s.token_ids.len() == k + 1);
        if steady {
            policy.record_step(out.seqs.len(), k, secs);
        }
        self.spec.draft_cost = policy.draft_cost(out.seqs.len(), k.max(1));
    }

    /// Applies a step's results: advances each request, appends sampled tokens, finishes the
    /// ones that hit a stop condition (freeing their blocks), and reports per request.
    pub fn update_from_output(
        &mut self,
        out: &SchedulerOutput,
        runner: &RunnerOutput,
    ) -> Vec<EngineEvent> {
        let mut events = Vec::with_capacity(out.seqs.len());
        let mut done = Vec::new();
        for (k, seq) in out.seqs.iter().enumerate() {
            let id = seq.req_id;
            let Some(req) = self.requests.get_mut(&id) else {
                continue; // aborted since it was scheduled
            };
            if req.num_computed_tokens != seq.start_pos {
                continue; // reset since it was scheduled: its result is stale
            }
            let res = runner_result(runner, k, id);
            debug_assert!(res.is_some(), "runner returned nothing for request {id}");
            let mut sampled = if seq.sample {
                res.and_then(|r| r.sampled)
            } else {
                None
            };
            // The request's own tokens; the drafts after them count once accepted.
            let n = seq.token_ids.len() - seq.num_drafts;
            // A missing sample (a runner bug) recomputes the last row next step.
            let advance = if seq.sample && sampled.is_none() {
                n - 1
            } else {
                n
            };
            if req.num_computed_tokens + advance > req.num_tokens() {
                debug_assert!(false, "request {id} scheduled past its tokens");
                sampled = None;
            }
            req.num_computed_tokens = (req.num_computed_tokens + advance).min(req.num_tokens());
            self.kv
                .cache_blocks(id, req.computable_token_ids(), req.num_computed_tokens);

            let mut ev = EngineEvent::new(id);
            if let Some(res) = res.filter(|_| seq.want_prompt_logprobs) {
                // Entry j is row start_pos + j; skip rows reported before a preemption.
                let skip = req.num_prompt_logprobs_sent.saturating_sub(seq.start_pos);
                let rows = res.prompt_logprobs.iter().skip(skip);
                ev.prompt_logprobs.extend(rows.cloned());
                req.num_prompt_logprobs_sent = req
                    .num_prompt_logprobs_sent
                    .max(seq.start_pos + res.prompt_logprobs.len());
            }
            // Accepted drafts (their keys are computed), then the sampled token; a stop
            // condition met on the way ends the request there.
            let accepted = match res {
                Some(r) if sampled.is_some() => &r.accepted[..r.accepted.len().min(seq.num_drafts)],
                _ => &[],
            };
            self.spec.record(seq.num_drafts, accepted.len());
            if let Some(policy) = self.policy.as_mut().filter(|_| seq.num_drafts > 0) {
                policy.observe(seq.num_drafts, accepted.len());
            }
            let logprobs = res.map_or(&[][..], |r| &r.accepted_logprobs);
            let emitted = accepted
                .iter()
                .enumerate()
                .map(|(i, &t)| (t, logprobs.get(i).cloned(), true))
                .chain(sampled.map(|t| (t, res.and_then(|r| r.sampled_logprobs.clone()), false)));
            for (token, logprobs, computed) in emitted {
                req.push_output_token(token);
                if computed {
                    req.num_computed_tokens += 1;
                }
                ev.new_token_ids.push(token);
                ev.new_logprobs.extend(logprobs);
                if let Some(reason) = stop_reason(req, token, self.cfg.max_model_len) {
                    ev.finished = Some(finished(req, reason));
                    done.push(id);
                    break;
                }
            }
            req.drafts.clear();
            if let Some(r) = res.filter(|_| ev.finished.is_none() && sampled.is_some()) {
                req.drafts
                    .extend_from_slice(&r.drafts[..r.drafts.len().min(seq.propose)]);
            }
            if !ev.is_empty() {
                events.push(ev);
            }
        }
        for id in done {
            self.remove(id);
        }
        events
    }

    /// Looks up the cached prefix of waiting request `id` and allocates its first chunk.
    /// Returns the chunk's length, or `None` (nothing changed) when blocks are short.
    fn admit(&mut self, id: RequestId, budget: usize) -> Option<usize> {
        let req = self.requests.get_mut(&id)?;
        let tokens = Arc::clone(req.all_token_ids());
        // Prompt logprobs need every prompt row computed: no prefix cache for them.
        let computed = if req.sampling.prompt_logprobs.is_none() {
            self.kv.get_computed_blocks(id, &tokens)
        } else {
            self.kv.nothing_computed()
        };
        let start = computed.num_computed_tokens();
        let n = (tokens.len() - start).min(budget);
        if !self.kv.allocate_slots(id, start, n, Some(&computed)) {
            return None;
        }
        req.num_computed_tokens = start;
        req.num_cached_prompt_tokens
            .get_or_insert(start.min(req.num_prompt_tokens));
        Some(n)
    }

    /// Recompute-style preemption: free the blocks, forget the progress, and queue the
    /// request first in line. `id` must already be out of `running`.
    fn preempt(&mut self, id: RequestId) {
        self.kv.free(id);
        self.table_rows.release(id);
        if let Some(req) = self.requests.get_mut(&id) {
            req.num_computed_tokens = 0;
            req.drafts.clear();
            req.num_preemptions += 1;
        }
        self.waiting.push_front(id);
        self.num_preemptions += 1;
    }

    fn insert_running(&mut self, id: RequestId) {
        let key = |r: &RequestId| self.requests.get(r).map(|q| (q.arrival, q.id));
        let k = key(&id);
        let at = self.running.partition_point(|r| key(r) <= k);
        self.running.insert(at, id);
    }

    /// Takes a request out of every queue and frees its blocks.
    fn remove(&mut self, id: RequestId) -> Option<Request> {
        let req = self.requests.remove(&id)?;
        if let Some(at) = self.running.iter().position(|&r| r == id) {
            self.running.remove(at);
        } else if let Some(at) = self.waiting.iter().position(|&r| r == id) {
            self.waiting.remove(at);
        }
        self.kv.free(id);
        self.table_rows.release(id);
        self.left.push(id);
        Some(req)
    }

    /// Checks the scheduler's and the cache's invariants (for tests and debugging).
    pub fn check_invariants(&self) -> Result<(), String> {
        self.kv.check()?;
        if self.running.len() + self.waiting.len() != self.requests.len() {
            return Err(format!(
                "{} running + {} waiting != {} requests",
                self.running.len(),
                self.waiting.len(),
                self.requests.len()
            ));
        }
        let bs = self.kv.block_size();
        for id in &self.running {
            let r = self
                .requests
                .get(id)
                .ok_or(format!("running {id} unknown"))?;
            let held = self.kv.block_ids(*id).len();
            if self.kv.state_pool().is_some_and(|s| s.slot(*id).is_none()) {
                return Err(format!("running {id} holds no state slot"));
            }
            if held * bs < r.num_computed_tokens || r.num_computed_tokens >= r.num_tokens() {
                return Err(format!(
                    "running {id}: {held} blocks, {} of {} tokens computed",
                    r.num_computed_tokens,
                    r.num_tokens()
                ));
            }
        }
        for id in &self.waiting {
            let r = self
                .requests
                .get(id)
                .ok_or(format!("waiting {id} unknown"))?;
            if !self.kv.block_ids(*id).is_empty()
                || r.num_computed_tokens != 0
                || self.kv.state_pool().is_some_and(|s| s.slot(*id).is_some())
            {
                return Err(format!("waiting {id} holds blocks or computed tokens"));
            }
        }
        let keys: Vec<_> = self
            .running
            .iter()
            .filter_map(|r| self.requests.get(r))
            .map(|q| (q.arrival, q.id))
            .collect();
        if !keys.is_sorted() {
            return Err("running not in arrival order".into());
        }
        Ok(())
    }

    /// The KV cache manager (read-only: block tables, pool state).
    pub fn kv_cache(&self) -> &ServingKv {
        &self.kv
    }
}

/// The step's share for `req`: tokens `start..start + n` and its first `drafts` drafts, after
/// their slots are allocated.
fn scheduled_seq(
    req: &mut Request,
    kv: &mut ServingKv,
    start: usize,
    n: usize,
    drafts: usize,
    propose: usize,
) -> ScheduledSeq {
    let all = Arc::clone(req.all_token_ids());
    let mut token_ids = Vec::with_capacity(n + drafts);
    token_ids.extend_from_slice(&all[start..start + n]);
    token_ids.extend_from_slice(&req.drafts[..drafts]);
    ScheduledSeq {
        state: kv.state_plan(req.id, &all, start, n),
        num_drafts: drafts,
        propose,
        req_id: req.id,
        token_ids,
        start_pos: start,
        block_ids: kv.block_ids(req.id).to_vec(),
        table: Default::default(), // filled once the step's allocations are done
        group_tables: Vec::new(),  // likewise
        sample: start + n == all.len(),
        want_prompt_logprobs: req.wants_prompt_logprobs(start, n),
        all_token_ids: all,
        num_prompt_tokens: req.num_prompt_tokens,
        sampling: Arc::clone(&req.sampling),
    }
}

/// The runner's result for `out.seqs[k]`, found by position or else by id.
fn runner_result(runner: &RunnerOutput, k: usize, id: RequestId) -> Option<&SeqOutput> {
    match runner.seqs.get(k) {
        Some(r) if r.req_id == id => Some(r),
        _ => runner.seqs.iter().find(|r| r.req_id == id),
    }
}

/// Stop conditions after `token` was appended to `req`'s output.
fn stop_reason(req: &Request, token: u32, max_model_len: usize) -> Option<FinishReason> {
    let p = &req.sampling;
    let num_out = req.num_output_tokens();
    // A stop token counts only once `min_tokens` other tokens precede it.
    if num_out > p.min_tokens
        && ((!p.ignore_eos && p.eos_token_ids.contains(&token))
            || p.stop_token_ids.contains(&token))
    {
        return Some(FinishReason::Stop { token });
    }
    if num_out >= p.max_tokens || req.num_tokens() >= max_model_len {
        return Some(FinishReason::Length);
    }
    None
}

fn finished(req: &Request, reason: FinishReason) -> FinishedRequest {
    FinishedRequest {
        reason,
        num_prompt_tokens: req.num_prompt_tokens,
        num_generated_tokens: req.num_output_tokens(),
        num_cached_prompt_tokens: req.num_cached_prompt_tokens.unwrap_or(0),
        num_preemptions: req.num_preemptions,
    }
}

/// A decode row: the prompt is in the cache and one sampled token is left to compute (a
/// preempted request recomputing its tokens is a prefill again).
fn is_decode(r: &Request) -> bool {
    r.num_computed_tokens >= r.num_prompt_tokens && r.num_uncomputed_tokens() <= 1
}
