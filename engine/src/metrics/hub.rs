//! The metrics hub: one thread that turns what the engine reports into protocol-v1 events
//! (`metrale_protocol::metrics`) and fans them out to subscribers (the Unix socket, the SSE
//! route, `met serve`'s own dashboard).
//!
//! The engine never waits on an observer. Start-up code and the engine thread only send plain
//! records down an unbounded channel to the hub thread (a send never blocks); the hub thread
//! keeps the per-request bookkeeping, writes the JSON, and offers each line to every
//! subscriber's bounded queue with `try_send`. A subscriber whose queue is full is dropped on
//! the spot: its queue is closed and its writer told to hang up.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use metrale_protocol::metrics::{
    self as proto, Event, Hello, Phase, PhaseEvent, RequestProgress, RequestState, Snapshot,
};
use tokio::sync::{mpsc, oneshot};

use crate::engine_core::EngineStats;
use crate::scheduler::{FinishReason, FinishedRequest};

/// Snapshots this often.
pub const SNAPSHOT_INTERVAL: Duration = Duration::from_millis(250);
/// Lines a subscriber may fall behind before it is dropped (a minute of snapshots, or a
/// burst of a few hundred requests).
pub const SUBSCRIBER_QUEUE_LINES: usize = 512;
/// Latency percentiles look back this far.
const WINDOW: Duration = Duration::from_secs(60);
/// Inter-token gaps kept for the window (a cap on memory at very high rates).
const MAX_WINDOW_GAPS: usize = 200_000;
/// Requests listed in a snapshot.
const MAX_LISTED: usize = 256;

/// Static facts for `hello`.
#[derive(Debug, Clone)]
pub struct HubInfo {
    pub model: String,
    pub device: String,
}

/// Limits known once the engine is built.
#[derive(Debug, Clone, Copy, Default)]
pub struct Limits {
    pub block_size: usize,
    pub max_model_len: usize,
}

/// One engine step, as the engine thread reports it.
#[derive(Debug, Default)]
pub struct StepReport {
    pub stats: EngineStats,
    /// `(request, tokens generated this step)` for requests that got tokens.
    pub tokens: Vec<(u64, u32)>,
    pub preempted: Vec<u64>,
    pub finished: Vec<(u64, FinishedRequest)>,
}

enum Msg {
    Phase(PhaseEvent),
    HttpUrl(String),
    Limits(Limits),
    Queued {
        id: u64,
        arrival: Instant,
        prompt_tokens: u64,
        max_tokens: u64,
    },
    Step(Instant, Box<StepReport>),
    Aborted(u64, Instant),
    Subscribe(Subscriber),
}

struct Subscriber {
    lines: mpsc::Sender<Arc<str>>,
    /// Dropped (or fired) to tell the writer to hang up at once.
    _kick: oneshot::Sender<()>,
}

/// A subscription: lines in order (no newline); `kicked` resolves when the hub dropped this
/// subscriber for falling behind or the hub stopped.
#[derive(Debug)]
pub struct Subscription {
    pub lines: mpsc::Receiver<Arc<str>>,
    pub kicked: oneshot::Receiver<()>,
}

/// A cheap handle to the hub thread. Cloning shares the hub; when the last handle goes the
/// thread ends and every subscriber is hung up on.
#[derive(Debug, Clone)]
pub struct MetricsHub {
    tx: Sender<Msg>,
    start: Instant,
    queue_lines: usize,
}

impl std::fmt::Debug for Msg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Msg")
    }
}

impl MetricsHub {
    /// Start the hub thread. `start` is the engine process's start (for `t_ms`).
    pub fn start(info: HubInfo, start: Instant) -> std::io::Result<Self> {
        Self::start_with_queue(info, start, SUBSCRIBER_QUEUE_LINES)
    }

    /// [`MetricsHub::start`] with another subscriber queue length (tests).
    pub fn start_with_queue(
        info: HubInfo,
        start: Instant,
        queue_lines: usize,
    ) -> std::io::Result<Self> {
        let (tx, rx) = std::sync::mpsc::channel();
        let state = HubState::new(info, start);
        std::thread::Builder::new()
            .name("met-metrics".into())
            .spawn(move || state.run(rx))?;
        Ok(Self {
            tx,
            start,
            queue_lines: queue_lines.max(8),
        })
    }

    /// A hub that goes nowhere (engines started without observers, e.g. in tests).
    pub fn disabled() -> Self {
        let (tx, _) = std::sync::mpsc::channel();
        Self {
            tx,
            start: Instant::now(),
            queue_lines: 8,
        }
    }

    fn send(&self, m: Msg) {
        // A stopped hub (or a disabled one) drops reports; the engine does not care.
        let _ = self.tx.send(m);
    }

    /// Milliseconds since the engine started.
    pub fn t_ms(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.start).as_millis() as u64
    }

    /// The reporter start-up code (and a downloader) calls.
    pub fn phases(&self) -> PhaseReporter {
        PhaseReporter { hub: self.clone() }
    }

    pub fn set_http_url(&self, url: String) {
        self.send(Msg::HttpUrl(url));
    }

    pub fn set_limits(&self, limits: Limits) {
        self.send(Msg::Limits(limits));
    }

    pub fn queued(&self, id: u64, arrival: Instant, prompt_tokens: usize, max_tokens: usize) {
        self.send(Msg::Queued {
            id,
            arrival,
            prompt_tokens: prompt_tokens as u64,
            max_tokens: max_tokens as u64,
        });
    }

    pub fn step(&self, at: Instant, report: StepReport) {
        self.send(Msg::Step(at, Box::new(report)));
    }

    pub fn aborted(&self, id: u64, at: Instant) {
        self.send(Msg::Aborted(id, at));
    }

    /// Subscribe: the first lines are `hello`, the phases so far, and a snapshot.
    pub fn subscribe(&self) -> Subscription {
        let (lines_tx, lines) = mpsc::channel(self.queue_lines);
        let (kick, kicked) = oneshot::channel();
        self.send(Msg::Subscribe(Subscriber {
            lines: lines_tx,
            _kick: kick,
        }));
        Subscription { lines, kicked }
    }
}

/// Start-up progress, from anywhere: `phase(Phase::Download, bytes_done, Some(bytes_total),
/// "bytes")`. Cheap to clone; calls never block.
#[derive(Debug, Clone)]
pub struct PhaseReporter {
    hub: MetricsHub,
}

impl PhaseReporter {
    /// A reporter that goes nowhere.
    pub fn disabled() -> Self {
        MetricsHub::disabled().phases()
    }

    /// `phase` began or progressed: `done` of `total` `unit`s.
    pub fn phase(&self, phase: Phase, done: u64, total: Option<u64>, unit: &str) {
        self.report(phase, done, total, unit, None);
    }

    /// The same, with a line for people (a file name, an error).
    pub fn report(
        &self,
        phase: Phase,
        done: u64,
        total: Option<u64>,
        unit: &str,
        message: Option<String>,
    ) {
        let t_ms = self.hub.t_ms(Instant::now());
        self.hub.send(Msg::Phase(PhaseEvent {
            phase,
            t_ms,
            done,
            total,
            unit: unit.to_owned(),
            message,
        }));
    }

    /// Start-up failed with `error`.
    pub fn failed(&self, error: &str) {
        self.report(Phase::Failed, 0, None, "", Some(error.to_owned()));
    }
}

/// One request, as the hub follows it.
struct Tracked {
    arrival: Instant,
    prompt_tokens: u64,
    state: RequestState,
    first_token: Option<Instant>,
    last_token: Option<Instant>,
    generated: u64,
    /// Milliseconds between tokens (a step that yields n tokens counts n gaps of 1/n).
    gaps_ms: Vec<f32>,
}

impl Tracked {
    fn ttft_ms(&self) -> Option<f64> {
        self.first_token.map(|t| ms(t - self.arrival))
    }

    fn rate(&self) -> f64 {
        match (self.first_token, self.last_token) {
            (Some(a), Some(b)) if b > a => {
                (self.generated.saturating_sub(1)) as f64 / (b - a).as_secs_f64()
            }
            _ => 0.0,
        }
    }

    fn itl(&self, scratch: &mut Vec<f32>) -> (Option<f64>, Option<f64>) {
        scratch.clear();
        scratch.extend_from_slice(&self.gaps_ms);
        (percentile(scratch, 0.50), percentile(scratch, 0.95))
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The `q`-quantile (nearest rank) of `v`, reordering it; `None` when empty.
pub fn percentile(v: &mut [f32], q: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
    let (_, x, _) = v.select_nth_unstable_by(rank, f32::total_cmp);
    Some(f64::from(*x))
}

struct HubState {
    info: HubInfo,
    start: Instant,
    started_unix_ms: u64,
    http_url: Option<String>,
    limits: Limits,
    ready: bool,
    phases: Vec<(Phase, Arc<str>)>,
    subscribers: Vec<Subscriber>,
    dropped_total: u64,
    requests: HashMap<u64, Tracked>,
    /// Insertion order of `requests`, for the snapshot's listing.
    order: VecDeque<u64>,
    ttft_window: VecDeque<(Instant, f32)>,
    itl_window: VecDeque<(Instant, f32)>,
    stats: EngineStats,
    last_snapshot: Option<(Instant, EngineStats)>,
    scratch: Vec<f32>,
}

impl HubState {
    fn new(info: HubInfo, start: Instant) -> Self {
        let started_unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
            .saturating_sub(start.elapsed().as_millis() as u64);
        Self {
            info,
            start,
            started_unix_ms,
            http_url: None,
            limits: Limits::default(),
            ready: false,
            phases: Vec::new(),
            subscribers: Vec::new(),
            dropped_total: 0,
            requests: HashMap::new(),
            order: VecDeque::new(),
            ttft_window: VecDeque::new(),
            itl_window: VecDeque::new(),
            stats: EngineStats::default(),
            last_snapshot: None,
            scratch: Vec::new(),
        }
    }

    fn t_ms(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.start).as_millis() as u64
    }

    fn run(mut self, rx: Receiver<Msg>) {
        let mut next_snapshot = Instant::now() + SNAPSHOT_INTERVAL;
        loop {
            let wait = next_snapshot.saturating_duration_since(Instant::now());
            match rx.recv_timeout(wait) {
                Ok(m) => self.handle(m),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            let now = Instant::now();
            if now >= next_snapshot {
                if !self.subscribers.is_empty() {
                    let s = Event::Snapshot(self.snapshot(now));
                    self.broadcast(&s);
                } else {
                    self.last_snapshot = Some((now, self.stats.clone()));
                }
                self.prune(now);
                next_snapshot = now + SNAPSHOT_INTERVAL;
            }
        }
        // Dropping the subscribers closes their queues and kicks their writers.
    }

    fn handle(&mut self, m: Msg) {
        match m {
            Msg::Phase(p) => {
                if p.phase == Phase::Ready {
                    self.ready = true;
                }
                let phase = p.phase;
                let line: Arc<str> = proto::to_line(&Event::Phase(p)).into();
                // Progress within one phase replaces its previous line in the history.
                if self.phases.last().is_some_and(|(last, _)| *last == phase) {
                    self.phases.pop();
                }
                self.phases.push((phase, line.clone()));
                self.send_line(&line);
            }
            Msg::HttpUrl(u) => {
                // Subscribers that came before the bind learn the address from a new hello.
                self.http_url = Some(u);
                let hello = self.hello(Instant::now());
                self.broadcast(&hello);
            }
            Msg::Limits(l) => self.limits = l,
            Msg::Queued {
                id,
                arrival,
                prompt_tokens,
                max_tokens,
            } => {
                self.requests.insert(
                    id,
                    Tracked {
                        arrival,
                        prompt_tokens,
                        state: RequestState::Waiting,
                        first_token: None,
                        last_token: None,
                        generated: 0,
                        gaps_ms: Vec::new(),
                    },
                );
                self.order.push_back(id);
                let e = Event::Queued(proto::Queued {
                    id,
                    t_ms: self.t_ms(arrival),
                    prompt_tokens,
                    max_tokens,
                });
                self.broadcast(&e);
            }
            Msg::Step(at, report) => self.step(at, *report),
            Msg::Aborted(id, at) => self.end(id, at, None),
            Msg::Subscribe(s) => self.subscribe(s),
        }
    }

    fn step(&mut self, at: Instant, report: StepReport) {
        self.stats = report.stats;
        let t_ms = self.t_ms(at);
        for id in report.preempted {
            if let Some(r) = self.requests.get_mut(&id) {
                r.state = RequestState::Preempted;
                let e = Event::Preempted(proto::Preempted {
                    id,
                    t_ms,
                    generated_tokens: r.generated,
                });
                self.broadcast(&e);
            }
        }
        for (id, n) in report.tokens {
            let Some(r) = self.requests.get_mut(&id) else {
                continue;
            };
            r.state = RequestState::Running;
            if n == 0 {
                continue;
            }
            let first = match r.last_token {
                None => {
                    r.first_token = Some(at);
                    // The first token has no gap; the rest of a multi-token first step do.
                    let ttft = ms(at - r.arrival);
                    self.ttft_window.push_back((at, ttft as f32));
                    Some(ttft)
                }
                Some(prev) => {
                    let gap = (ms(at - prev) / f64::from(n)) as f32;
                    for _ in 0..n {
                        r.gaps_ms.push(gap);
                        self.itl_window.push_back((at, gap));
                    }
                    None
                }
            };
            r.last_token = Some(at);
            r.generated += u64::from(n);
            if let Some(ttft_ms) = first {
                let e = Event::FirstToken(proto::FirstToken { id, t_ms, ttft_ms });
                self.broadcast(&e);
            }
        }
        for (id, f) in report.finished {
            self.end(id, at, Some(f));
        }
        // Requests running this step that got no token (prefill chunks) are running too.
    }

    /// A request left: `finished` with its counts, or aborted (`None`, or reason Abort).
    fn end(&mut self, id: u64, at: Instant, finished: Option<FinishedRequest>) {
        let Some(mut r) = self.requests.remove(&id) else {
            return;
        };
        let t_ms = self.t_ms(at);
        let e2e_ms = ms(at - r.arrival);
        let event = match finished {
            Some(f) if f.reason != FinishReason::Abort => {
                let (itl_p50_ms, itl_p95_ms) = r.itl(&mut self.scratch);
                r.generated = f.num_generated_tokens as u64;
                Event::Finished(proto::Finished {
                    id,
                    t_ms,
                    reason: match f.reason {
                        FinishReason::Length => "length".into(),
                        _ => "stop".into(),
                    },
                    prompt_tokens: f.num_prompt_tokens as u64,
                    generated_tokens: f.num_generated_tokens as u64,
                    cached_prompt_tokens: f.num_cached_prompt_tokens as u64,
                    preemptions: u64::from(f.num_preemptions),
                    e2e_ms,
                    ttft_ms: r.ttft_ms(),
                    itl_p50_ms,
                    itl_p95_ms,
                    generation_tokens_per_s: r.rate(),
                })
            }
            _ => Event::Aborted(proto::Aborted {
                id,
                t_ms,
                prompt_tokens: r.prompt_tokens,
                generated_tokens: r.generated,
                e2e_ms,
            }),
        };
        self.broadcast(&event);
    }

    fn hello(&self, now: Instant) -> Event {
        Event::Hello(Hello {
            engine_version: env!("CARGO_PKG_VERSION").into(),
            model: self.info.model.clone(),
            pid: std::process::id(),
            started_unix_ms: self.started_unix_ms,
            t_ms: self.t_ms(now),
            http_url: self.http_url.clone(),
            device: self.info.device.clone(),
        })
    }

    fn subscribe(&mut self, s: Subscriber) {
        let now = Instant::now();
        let hello = self.hello(now);
        let snapshot = Event::Snapshot(self.snapshot_at(now, false));
        let mut first: Vec<Arc<str>> = vec![proto::to_line(&hello).into()];
        first.extend(self.phases.iter().map(|(_, l)| l.clone()));
        first.push(proto::to_line(&snapshot).into());
        // A new queue holds at least 8 lines; the history can be longer only with a tiny
        // queue, and then the subscriber is as good as slow.
        for line in first {
            if s.lines.try_send(line).is_err() {
                self.dropped_total += 1;
                return;
            }
        }
        self.subscribers.push(s);
    }

    fn broadcast(&mut self, e: &Event) {
        if self.subscribers.is_empty() {
            return;
        }
        let line: Arc<str> = proto::to_line(e).into();
        self.send_line(&line);
    }

    fn send_line(&mut self, line: &Arc<str>) {
        let mut slow = 0;
        self.subscribers
            .retain(|s| match s.lines.try_send(line.clone()) {
                Ok(()) => true,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    slow += 1;
                    false
                }
                // The reader left by itself.
                Err(mpsc::error::TrySendError::Closed(_)) => false,
            });
        self.dropped_total += slow;
    }

    fn snapshot(&mut self, now: Instant) -> Snapshot {
        self.snapshot_at(now, true)
    }

    /// The engine now. `advance`: this snapshot starts a new rate interval.
    fn snapshot_at(&mut self, now: Instant, advance: bool) -> Snapshot {
        let s = &self.stats;
        let (dt, prev) = match &self.last_snapshot {
            Some((t, prev)) => ((now - *t).as_secs_f64(), prev.clone()),
            None => (
                now.saturating_duration_since(self.start).as_secs_f64(),
                EngineStats::default(),
            ),
        };
        let rate = |a: u64, b: u64| {
            if dt > 0.0 {
                a.saturating_sub(b) as f64 / dt
            } else {
                0.0
            }
        };
        let stepped = s.steps_total > prev.steps_total;
        let (step_seqs, step_tokens) = if stepped {
            (s.last_step_seqs as u64, s.last_step_tokens as u64)
        } else {
            (0, 0)
        };
        let cutoff = now.checked_sub(WINDOW);
        let pick = |w: &VecDeque<(Instant, f32)>, scratch: &mut Vec<f32>| {
            scratch.clear();
            scratch.extend(
                w.iter()
                    .filter(|(t, _)| cutoff.is_none_or(|c| *t >= c))
                    .map(|(_, v)| *v),
            );
            (percentile(scratch, 0.50), percentile(scratch, 0.95))
        };
        let mut scratch = std::mem::take(&mut self.scratch);
        let (ttft_p50_ms, ttft_p95_ms) = pick(&self.ttft_window, &mut scratch);
        let (itl_p50_ms, itl_p95_ms) = pick(&self.itl_window, &mut scratch);
        let mut requests = Vec::new();
        for id in self
            .order
            .iter()
            .filter(|id| self.requests.contains_key(id))
        {
            if requests.len() >= MAX_LISTED {
                break;
            }
            let Some(r) = self.requests.get(id) else {
                continue;
            };
            let (p50, p95) = r.itl(&mut scratch);
            requests.push(RequestProgress {
                id: *id,
                state: r.state,
                prompt_tokens: r.prompt_tokens,
                generated_tokens: r.generated,
                ttft_ms: r.ttft_ms(),
                itl_p50_ms: p50,
                itl_p95_ms: p95,
                generation_tokens_per_s: r.rate(),
            });
        }
        self.scratch = scratch;
        let snap = Snapshot {
            t_ms: self.t_ms(now),
            ready: self.ready,
            running_seqs: s.num_running as u64,
            waiting_seqs: s.num_waiting as u64,
            preemptions_total: s.num_preemptions_total,
            step_seqs,
            max_step_seqs: s.max_num_seqs as u64,
            step_tokens,
            max_step_tokens: s.max_num_batched_tokens as u64,
            batch_seqs_ratio: ratio(step_seqs, s.max_num_seqs as u64),
            batch_tokens_ratio: ratio(step_tokens, s.max_num_batched_tokens as u64),
            kv_blocks_used: s.kv_blocks_used as u64,
            kv_blocks_total: s.kv_blocks_total as u64,
            kv_block_size_tokens: self.limits.block_size as u64,
            max_model_len_tokens: self.limits.max_model_len as u64,
            prefix_cache_queries_tokens_total: s.prefix_cache_queries_total,
            prefix_cache_hits_tokens_total: s.prefix_cache_hits_total,
            prefix_cache_hit_ratio: ratio(s.prefix_cache_hits_total, s.prefix_cache_queries_total),
            prompt_tokens_per_s: rate(s.prompt_tokens_total, prev.prompt_tokens_total),
            generation_tokens_per_s: rate(s.generation_tokens_total, prev.generation_tokens_total),
            prompt_tokens_total: s.prompt_tokens_total,
            generation_tokens_total: s.generation_tokens_total,
            steps_total: s.steps_total,
            steps_per_s: rate(s.steps_total, prev.steps_total),
            ttft_p50_ms,
            ttft_p95_ms,
            itl_p50_ms,
            itl_p95_ms,
            slow_subscribers_dropped_total: self.dropped_total,
            speculative: spec_decode(s),
            requests,
        };
        if advance {
            self.last_snapshot = Some((now, self.stats.clone()));
        }
        snap
    }

    fn prune(&mut self, now: Instant) {
        let Some(cutoff) = now.checked_sub(WINDOW) else {
            return;
        };
        while self.ttft_window.front().is_some_and(|(t, _)| *t < cutoff) {
            self.ttft_window.pop_front();
        }
        while self.itl_window.front().is_some_and(|(t, _)| *t < cutoff)
            || self.itl_window.len() > MAX_WINDOW_GAPS
        {
            self.itl_window.pop_front();
        }
        while self
            .order
            .front()
            .is_some_and(|id| !self.requests.contains_key(id))
        {
            self.order.pop_front();
        }
        if self.order.len() > 4 * self.requests.len() + 1024 {
            let requests = &self.requests;
            self.order.retain(|id| requests.contains_key(id));
        }
    }
}

#[cfg(test)]
#[path = "hub_tests.rs"]
mod tests;

/// The snapshot's speculative-decoding part (`None` when it is off).
fn spec_decode(s: &EngineStats) -> Option<Box<metrale_protocol::metrics::SpecDecode>> {
    if s.num_drafts == 0 {
        return None;
    }
    let sp = &s.spec;
    let n = s.num_drafts.min(sp.accepted_per_pos.len());
    Some(Box::new(metrale_protocol::metrics::SpecDecode {
        num_drafts: s.num_drafts as u64,
        verify_steps_total: sp.num_drafts,
        draft_tokens_total: sp.num_draft_tokens,
        accepted_tokens_total: sp.num_accepted_tokens,
        proposed_per_pos: sp.proposed_per_pos[..n].to_vec(),
        accepted_per_pos: sp.accepted_per_pos[..n].to_vec(),
        acceptance_per_pos: (0..n)
            .map(|p| ratio(sp.accepted_per_pos[p], sp.proposed_per_pos[p]))
            .collect(),
        mean_accepted: sp.mean_accepted(),
        paused_steps_total: sp.num_paused_steps,
        drafts_per_step: sp.drafts_per_step as u64,
    }))
}

/// `a / b`, 0 when `b` is.
fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}
