//! The engine thread: the step loop and the routing of each step's events to request streams.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::{Duration, Instant};

use tokio::sync::mpsc::UnboundedSender;

use super::outbox::Outbox;
use super::step_profile::{Phase, StepProfile};
use super::{Command, Live, StepOutput, ValidRequest};
use crate::admission::Admission;
use crate::backend::{Backend, BackendError};
use crate::metrics::MetricsHub;
use crate::metrics::hub::StepReport;
use crate::models::Model;
use crate::runner::Runner;
use crate::scheduler::Scheduler;
use crate::scheduler::io::{RequestId, TokenLogprobs};
use crate::scheduler::{EngineEvent, FinishReason};

struct Client {
    outputs: UnboundedSender<StepOutput>,
    /// Its batch slot and queue place: dropped with the client, the place when it first runs.
    admission: Admission,
    /// Prompt logprobs gathered over prefill chunks, sent with the first token.
    prompt_logprobs: Option<Vec<TokenLogprobs>>,
}

pub(super) struct EngineLoop<B: Backend, M: Model<B>> {
    scheduler: Scheduler,
    runner: Runner<B, M>,
    commands: Receiver<Command>,
    live: Arc<Live>,
    clients: HashMap<RequestId, Client>,
    /// Outputs sent while the device runs the next step (outbox.rs).
    outbox: Outbox,
    prompt_tokens_total: u64,
    generation_tokens_total: u64,
    steps_total: u64,
    last_step_seqs: usize,
    /// Observers' view; reports are sends on an unbounded channel and never block.
    hub: MetricsHub,
    /// What happened since the last report to the hub.
    report: StepReport,
    /// The tuning's `debug.step_profile` (`METRALE_STEP_PROFILE`): where the step's time goes.
    profile: StepProfile,
    /// The tuning's `debug.step_delay_ms` (`METRALE_DEBUG_STEP_DELAY_MS`): a pause after every
    /// step, for tests that need a request
    /// to still be running when they act (timeouts, drains) however fast the machine is.
    step_delay: Option<Duration>,
}

/// The debug pause after each step (`ms` 0: none).
fn step_delay(ms: u64) -> Option<Duration> {
    if ms == 0 {
        return None;
    }
    tracing::warn!("METRALE_DEBUG_STEP_DELAY_MS={ms}: every engine step is slowed by {ms} ms");
    Some(Duration::from_millis(ms))
}

impl<B: Backend, M: Model<B>> EngineLoop<B, M> {
    pub(super) fn new(
        scheduler: Scheduler,
        runner: Runner<B, M>,
        commands: Receiver<Command>,
        live: Arc<Live>,
        hub: MetricsHub,
        tuning: &crate::tuning::Tuning,
    ) -> Self {
        Self {
            scheduler,
            runner,
            commands,
            live,
            clients: HashMap::new(),
            outbox: Outbox::default(),
            prompt_tokens_total: 0,
            generation_tokens_total: 0,
            steps_total: 0,
            last_step_seqs: 0,
            hub,
            report: StepReport::default(),
            profile: StepProfile::every(tuning.debug.step_profile),
            step_delay: step_delay(tuning.debug.step_delay_ms),
        }
    }

    pub(super) fn run(mut self) {
        loop {
            // Idle: block until something arrives. Busy: take what is there and step.
            if !self.scheduler.has_unfinished_requests() {
                match self.commands.recv() {
                    Ok(c) => {
                        if !self.handle(c) {
                            break;
                        }
                    }
                    Err(_) => break,
                }
            }
            let mut keep_going = true;
            loop {
                match self.commands.try_recv() {
                    Ok(c) => {
                        if !self.handle(c) {
                            keep_going = false;
                            break;
                        }
                    }
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        keep_going = false;
                        break;
                    }
                }
            }
            if !keep_going || self.failed() {
                break;
            }
            if self.scheduler.has_unfinished_requests() {
                self.profile.start();
                self.step();
                if self.failed() {
                    self.flush();
                    break;
                }
                if let Some(d) = self.step_delay {
                    std::thread::sleep(d);
                }
            }
            if !self.scheduler.has_unfinished_requests() {
                // No step follows to carry the outputs: send them now.
                self.flush();
            }
            self.publish();
            self.profile.lap(Phase::Update);
            self.profile.finish(self.last_step_seqs);
        }
        self.abort_all();
        self.live.stopped.store(true, Ordering::SeqCst);
        self.publish();
    }

    fn failed(&self) -> bool {
        self.live.failure.lock().map_or(true, |f| f.is_some())
    }

    /// Apply one command; false means stop the thread.
    fn handle(&mut self, c: Command) -> bool {
        self.flush();
        match c {
            Command::Add {
                id,
                request,
                outputs,
                admission,
            } => self.add(id, *request, outputs, admission),
            Command::Abort(id) => {
                self.scheduler.abort_request(id);
                if self.clients.remove(&id).is_some() {
                    self.hub.aborted(id, Instant::now());
                }
            }
            Command::Drain => {}
            Command::Shutdown => return false,
        }
        true
    }

    /// Queue an admitted request. Admission was decided before it was sent (`admission.rs`);
    /// the scheduler takes it as it is.
    fn add(
        &mut self,
        id: RequestId,
        request: ValidRequest,
        outputs: UnboundedSender<StepOutput>,
        admission: Admission,
    ) {
        let sampling = request.sampling();
        let want_prompt = sampling.prompt_logprobs.is_some();
        let (arrival, max_tokens) = (request.arrival(), sampling.max_tokens);
        let n_prompt = request.prompt().len();
        self.scheduler.add_request(id, request);
        self.hub.queued(id, arrival, n_prompt, max_tokens);
        self.clients.insert(
            id,
            Client {
                outputs,
                admission,
                prompt_logprobs: want_prompt.then(Vec::new),
            },
        );
    }

    fn step(&mut self) {
        let began = std::time::Instant::now();
        let out = self.scheduler.schedule();
        self.profile.lap(Phase::Schedule);
        self.last_step_seqs = out.seqs.len();
        self.report.preempted.extend(out.preempted.iter().copied());
        if out.seqs.is_empty() {
            // The runner hears of requests that left even on a step with nothing to run.
            self.runner.end_sequences(&out.finished);
            self.flush();
            return;
        }
        for s in &out.seqs {
            if let Some(c) = self.clients.get_mut(&s.req_id) {
                c.admission.started();
            }
            self.report.tokens.push((s.req_id, 0));
            let prompt_part = s
                .num_prompt_tokens
                .saturating_sub(s.start_pos)
                .min(s.token_ids.len());
            self.prompt_tokens_total += prompt_part as u64;
        }
        let (profile, outbox) = (&mut self.profile, &mut self.outbox);
        // The previous step's outputs go out while the device runs this one.
        let result = self.runner.execute_with(&out, &mut || {
            profile.lap(Phase::Launch);
            outbox.flush();
        });
        self.profile.lap(Phase::Device);
        self.steps_total += 1;
        match result {
            Ok(ro) => {
                let events = self.scheduler.update_from_output(&out, &ro);
                self.scheduler
                    .record_step_time(&out, began.elapsed().as_secs_f64());
                for e in events {
                    self.deliver(e);
                }
                self.settle_hang_ups();
            }
            Err(BackendError::GroupLost(why)) => {
                // No step can run again: fail everything and stop; the server exits.
                tracing::error!("the tensor-parallel group is lost: {why}");
                if let Ok(mut f) = self.live.failure.lock() {
                    *f = Some(why);
                }
                self.abort_all();
            }
            Err(e) => {
                // A backend error is a bug, not the client's doing: fail this step's requests
                // rather than the whole server.
                tracing::error!("step failed, aborting its {} requests: {e}", out.seqs.len());
                for s in &out.seqs {
                    self.fail(s.req_id);
                }
            }
        }
    }

    fn deliver(&mut self, e: EngineEvent) {
        let Some(client) = self.clients.get_mut(&e.req_id) else {
            return;
        };
        self.generation_tokens_total += e.new_token_ids.len() as u64;
        if !e.new_token_ids.is_empty() {
            self.report
                .tokens
                .push((e.req_id, e.new_token_ids.len() as u32));
        }
        if let Some(f) = &e.finished {
            self.report.finished.push((e.req_id, f.clone()));
        }
        if let Some(buf) = client.prompt_logprobs.as_mut() {
            buf.extend(e.prompt_logprobs);
        }
        if e.new_token_ids.is_empty() && e.finished.is_none() {
            return; // a prefill chunk: nothing to say yet
        }
        let out = StepOutput {
            new_token_ids: e.new_token_ids,
            logprobs: e.new_logprobs,
            prompt_logprobs: client.prompt_logprobs.take(),
            finished: e.finished,
        };
        if out.finished.is_some() {
            if let Some(c) = self.clients.remove(&e.req_id) {
                self.outbox.push(e.req_id, c.outputs, out);
            }
        } else {
            self.outbox.push(e.req_id, client.outputs.clone(), out);
        }
    }

    /// Sends the queued outputs now, then aborts the requests whose client has gone.
    fn flush(&mut self) {
        self.outbox.flush();
        self.settle_hang_ups();
    }

    /// A stream that was dropped has its abort on the way; free its blocks now.
    fn settle_hang_ups(&mut self) {
        for id in self.outbox.take_hung_up() {
            self.scheduler.abort_request(id);
            if self.clients.remove(&id).is_some() {
                self.hub.aborted(id, Instant::now());
            }
        }
    }

    fn fail(&mut self, id: RequestId) {
        self.flush();
        if let Some(f) = self.scheduler.finish_request(id, FinishReason::Abort)
            && let Some(c) = self.clients.remove(&id)
        {
            self.report.finished.push((id, f.clone()));
            let _ = c.outputs.send(StepOutput {
                new_token_ids: Vec::new(),
                logprobs: Vec::new(),
                prompt_logprobs: None,
                finished: Some(f),
            });
        }
    }

    fn abort_all(&mut self) {
        let ids: Vec<RequestId> = self.clients.keys().copied().collect();
        for id in ids {
            self.fail(id);
        }
    }

    fn publish(&mut self) {
        let st = self.scheduler.stats();
        if let Ok(mut s) = self.live.stats.lock() {
            s.num_running = st.num_running;
            s.num_waiting = st.num_waiting;
            s.kv_cache_usage = f64::from(st.kv_cache_usage);
            s.kv_blocks_used =
                (f64::from(st.kv_cache_usage) * s.kv_blocks_total as f64).round() as usize;
            s.prompt_tokens_total = self.prompt_tokens_total;
            s.generation_tokens_total = self.generation_tokens_total;
            s.prefix_cache_queries_total = st.prefix_cache.queries;
            s.prefix_cache_hits_total = st.prefix_cache.hits;
            s.num_preemptions_total = st.num_preemptions;
            s.steps_total = self.steps_total;
            s.last_step_tokens = st.num_batched_tokens;
            s.last_step_seqs = self.last_step_seqs;
            s.spec = st.spec;
            let mut report = std::mem::take(&mut self.report);
            report.stats = s.clone();
            self.hub.step(Instant::now(), report);
        }
    }
}
