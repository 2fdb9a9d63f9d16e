//! The dashboard's state and the one function that changes it, [`App::apply`]. Inputs are
//! protocol events, connection changes and keys; no I/O happens here, so a scripted list of
//! inputs reproduces any screen.

use std::collections::{BTreeMap, VecDeque};

use metrale_protocol::metrics::{Event, Hello, Phase, PhaseEvent, RequestState, Snapshot};

/// Throughput history kept for the sparklines (one point a snapshot: 30 s at 4 Hz).
pub const HISTORY: usize = 120;
/// Ended requests kept in the table.
pub const ENDED_ROWS: usize = 64;

/// Everything that reaches the event loop. (Events dominate the traffic, so boxing them to
/// shrink the rare key and connection inputs would add an allocation to the common case.)
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// An event from the engine.
    Event(Event),
    /// The connection to `target` is up.
    Connected {
        target: String,
    },
    /// The connection is gone; the source keeps retrying.
    Disconnected {
        reason: String,
    },
    Key(Key),
    /// Time passed (redraw the clock; nothing else).
    Tick,
}

/// The keys the dashboard knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    /// `q`: quits `top`; in `met serve`'s own dashboard it asks first (stop, or detach).
    Quit,
    /// Ctrl-C: quits at once (in `met serve`, stops the server as Ctrl-C would).
    Interrupt,
    /// `d`: in `met serve`, leaves the dashboard and keeps serving.
    Detach,
    Up,
    Down,
    PageUp,
    PageDown,
    Sort,
    Pause,
    Help,
}

/// Table order, cycled by `s`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SortKey {
    /// Arrival order.
    #[default]
    Id,
    /// Slowest first: highest ITL p95.
    Itl,
    /// Highest TTFT first.
    Ttft,
    /// Slowest generation first.
    TokensPerSecond,
    /// Most generated first.
    Generated,
}

impl SortKey {
    pub fn next(self) -> Self {
        match self {
            SortKey::Id => SortKey::Itl,
            SortKey::Itl => SortKey::Ttft,
            SortKey::Ttft => SortKey::TokensPerSecond,
            SortKey::TokensPerSecond => SortKey::Generated,
            SortKey::Generated => SortKey::Id,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            SortKey::Id => "arrival",
            SortKey::Itl => "ITL p95",
            SortKey::Ttft => "TTFT",
            SortKey::TokensPerSecond => "tok/s",
            SortKey::Generated => "generated",
        }
    }
}

/// One request as the table shows it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Row {
    pub id: u64,
    pub state: RequestState,
    pub prompt_tokens: u64,
    pub generated_tokens: u64,
    pub ttft_ms: Option<f64>,
    pub itl_p50_ms: Option<f64>,
    pub itl_p95_ms: Option<f64>,
    pub tokens_per_s: f64,
    /// `stop` / `length` once finished.
    pub reason: Option<String>,
}

/// What the engine has told us.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Model {
    pub hello: Option<Hello>,
    /// The latest report of each phase, in the order they came.
    pub phases: Vec<PhaseEvent>,
    pub snapshot: Option<Snapshot>,
    pub prompt_tps: VecDeque<u64>,
    pub generation_tps: VecDeque<u64>,
    pub rows: BTreeMap<u64, Row>,
    /// Ended requests, oldest first (to keep only the last [`ENDED_ROWS`]).
    pub ended: VecDeque<u64>,
    pub finished_total: u64,
    pub aborted_total: u64,
}

impl Model {
    pub fn ready(&self) -> bool {
        self.snapshot.as_ref().is_some_and(|s| s.ready)
            || self.phases.last().is_some_and(|p| p.phase == Phase::Ready)
    }

    /// The phase start-up is in, when not ready.
    pub fn current_phase(&self) -> Option<&PhaseEvent> {
        self.phases.last()
    }

    fn apply(&mut self, e: Event) {
        match e {
            Event::Hello(h) => self.hello = Some(h),
            Event::Phase(p) => {
                if let Some(last) = self.phases.iter_mut().find(|q| q.phase == p.phase) {
                    *last = p;
                } else {
                    self.phases.push(p);
                }
            }
            Event::Snapshot(s) => self.snapshot_in(s),
            Event::Queued(q) => {
                self.rows.insert(
                    q.id,
                    Row {
                        id: q.id,
                        prompt_tokens: q.prompt_tokens,
                        ..Default::default()
                    },
                );
            }
            Event::FirstToken(f) => {
                let row = self.row(f.id);
                row.state = RequestState::Running;
                row.ttft_ms = Some(f.ttft_ms);
                row.generated_tokens = row.generated_tokens.max(1);
            }
            Event::Preempted(p) => {
                let row = self.row(p.id);
                row.state = RequestState::Preempted;
                row.generated_tokens = p.generated_tokens;
            }
            Event::Finished(f) => {
                let row = self.row(f.id);
                row.state = RequestState::Finished;
                row.prompt_tokens = f.prompt_tokens;
                row.generated_tokens = f.generated_tokens;
                row.ttft_ms = f.ttft_ms;
                row.itl_p50_ms = f.itl_p50_ms;
                row.itl_p95_ms = f.itl_p95_ms;
                row.tokens_per_s = f.generation_tokens_per_s;
                row.reason = Some(f.reason);
                self.finished_total += 1;
                self.ended_row(f.id);
            }
            Event::Aborted(a) => {
                let row = self.row(a.id);
                row.state = RequestState::Aborted;
                row.prompt_tokens = a.prompt_tokens;
                row.generated_tokens = a.generated_tokens;
                row.reason = Some("aborted".into());
                self.aborted_total += 1;
                self.ended_row(a.id);
            }
        }
    }

    fn row(&mut self, id: u64) -> &mut Row {
        self.rows.entry(id).or_insert_with(|| Row {
            id,
            ..Default::default()
        })
    }

    fn ended_row(&mut self, id: u64) {
        self.ended.push_back(id);
        while self.ended.len() > ENDED_ROWS {
            if let Some(old) = self.ended.pop_front() {
                self.rows.remove(&old);
            }
        }
    }

    fn snapshot_in(&mut self, s: Snapshot) {
        push_capped(&mut self.prompt_tps, s.prompt_tokens_per_s.round() as u64);
        push_capped(
            &mut self.generation_tps,
            s.generation_tokens_per_s.round() as u64,
        );
        // The snapshot is the truth about requests still in the engine.
        let complete = s.requests.len() < 256;
        let listed: std::collections::HashSet<u64> = s.requests.iter().map(|r| r.id).collect();
        for p in &s.requests {
            let row = self.row(p.id);
            row.state = p.state;
            row.prompt_tokens = p.prompt_tokens;
            row.generated_tokens = p.generated_tokens;
            row.ttft_ms = p.ttft_ms;
            row.itl_p50_ms = p.itl_p50_ms;
            row.itl_p95_ms = p.itl_p95_ms;
            row.tokens_per_s = p.generation_tokens_per_s;
        }
        if complete {
            // An active row the engine no longer lists ended while we were not looking.
            self.rows.retain(|id, r| {
                listed.contains(id)
                    || matches!(r.state, RequestState::Finished | RequestState::Aborted)
            });
        }
        self.snapshot = Some(s);
    }
}

fn push_capped(v: &mut VecDeque<u64>, x: u64) {
    v.push_back(x);
    while v.len() > HISTORY {
        v.pop_front();
    }
}

/// The connection as the status line says it.
#[derive(Debug, Clone, PartialEq)]
pub enum Conn {
    Connecting,
    Live,
    Lost { reason: String, attempts: u32 },
}

/// The whole dashboard: what the engine said, the connection, and the view.
#[derive(Debug, Clone, PartialEq)]
pub struct App {
    /// Where we read from (`unix:/run/…`, `http://…`, `in-process`).
    pub target: String,
    pub live: Model,
    /// The view while paused (`p`); `live` keeps updating underneath.
    pub frozen: Option<Model>,
    pub conn: Conn,
    /// Something worth a line: a restart, a reconnect.
    pub notice: Option<String>,
    pub sort: SortKey,
    pub scroll: usize,
    pub help: bool,
    pub quit: bool,
    /// The dashboard is the server's own (`met serve`): `q` asks before stopping it, `d` leaves
    /// the server running.
    pub serving: bool,
    /// `q` was pressed in a server's dashboard: the next key decides.
    pub confirm_quit: bool,
    /// The dashboard ended with `d`: the server keeps running.
    pub detach: bool,
    /// Ticks seen (the clock while disconnected).
    pub ticks: u64,
}

impl App {
    pub fn new(target: impl Into<String>) -> Self {
        Self {
            target: target.into(),
            live: Model::default(),
            frozen: None,
            conn: Conn::Connecting,
            notice: None,
            sort: SortKey::default(),
            scroll: 0,
            help: false,
            quit: false,
            serving: false,
            confirm_quit: false,
            detach: false,
            ticks: 0,
        }
    }

    /// The dashboard of `met serve` itself: `q` asks before it stops the server.
    pub fn for_server(target: impl Into<String>) -> Self {
        Self {
            serving: true,
            ..Self::new(target)
        }
    }

    /// What to draw: the frozen view while paused, else the live one.
    pub fn view(&self) -> &Model {
        self.frozen.as_ref().unwrap_or(&self.live)
    }

    pub fn paused(&self) -> bool {
        self.frozen.is_some()
    }

    /// The one place state changes.
    pub fn apply(&mut self, input: Input) {
        match input {
            Input::Event(e) => {
                if let Event::Hello(h) = &e {
                    let restarted = self.live.hello.as_ref().is_some_and(|old| {
                        old.pid != h.pid || old.started_unix_ms != h.started_unix_ms
                    });
                    if restarted {
                        let old = self.live.hello.as_ref().map_or(0, |o| o.pid);
                        self.notice = Some(format!(
                            "engine restarted (pid {old} → {}); showing the new one",
                            h.pid
                        ));
                        self.live = Model::default();
                    }
                }
                self.live.apply(e);
            }
            Input::Connected { target } => {
                if matches!(self.conn, Conn::Lost { .. }) {
                    self.notice = Some(format!("reconnected to {target}"));
                }
                self.target = target;
                self.conn = Conn::Live;
            }
            Input::Disconnected { reason } => {
                let attempts = match &self.conn {
                    Conn::Lost { attempts, .. } => attempts + 1,
                    _ => 1,
                };
                self.conn = Conn::Lost { reason, attempts };
            }
            Input::Key(k) => self.key(k),
            Input::Tick => self.ticks += 1,
        }
    }

    fn key(&mut self, k: Key) {
        if self.confirm_quit {
            self.confirm_quit = false;
            match k {
                Key::Quit | Key::Interrupt => self.quit = true,
                Key::Detach => (self.detach, self.quit) = (true, true),
                _ => {} // stay
            }
            return;
        }
        if self.help && !matches!(k, Key::Quit | Key::Interrupt) {
            self.help = false;
            return;
        }
        match k {
            Key::Interrupt => self.quit = true,
            Key::Quit if self.serving => self.confirm_quit = true,
            Key::Quit => self.quit = true,
            Key::Detach if self.serving => (self.detach, self.quit) = (true, true),
            Key::Detach => {}
            Key::Up => self.scroll = self.scroll.saturating_sub(1),
            Key::Down => {
                self.scroll = (self.scroll + 1).min(self.view().rows.len().saturating_sub(1))
            }
            Key::PageUp => self.scroll = self.scroll.saturating_sub(10),
            Key::PageDown => {
                self.scroll = (self.scroll + 10).min(self.view().rows.len().saturating_sub(1))
            }
            Key::Sort => self.sort = self.sort.next(),
            Key::Pause => {
                self.frozen = match self.frozen {
                    Some(_) => None,
                    None => Some(self.live.clone()),
                }
            }
            Key::Help => self.help = true,
        }
    }

    /// Rows in table order (active before ended, each part in the sort order), and the
    /// slowest row's id: the highest ITL p95 (else TTFT) among requests still in the engine,
    /// else among those that ended.
    pub fn table(&self) -> (Vec<&Row>, Option<u64>) {
        let m = self.view();
        let mut rows: Vec<&Row> = m.rows.values().collect();
        let desc = |a: Option<f64>, b: Option<f64>| {
            b.unwrap_or(f64::NEG_INFINITY)
                .total_cmp(&a.unwrap_or(f64::NEG_INFINITY))
        };
        // Requests still in the engine come first, then ended ones, newest first.
        let ended = |r: &Row| matches!(r.state, RequestState::Finished | RequestState::Aborted);
        rows.sort_by(|a, b| {
            let by_key = match self.sort {
                SortKey::Id if ended(a) => b.id.cmp(&a.id),
                SortKey::Id => a.id.cmp(&b.id),
                SortKey::Itl => desc(a.itl_p95_ms, b.itl_p95_ms),
                SortKey::Ttft => desc(a.ttft_ms, b.ttft_ms),
                SortKey::TokensPerSecond => a.tokens_per_s.total_cmp(&b.tokens_per_s),
                SortKey::Generated => b.generated_tokens.cmp(&a.generated_tokens),
            };
            ended(a).cmp(&ended(b)).then(by_key).then(a.id.cmp(&b.id))
        });
        // The slowest request still in the engine, else the slowest that ended.
        let pick = |active: bool| {
            let candidates = || m.rows.values().filter(move |r| ended(r) != active);
            candidates()
                .filter(|r| r.itl_p95_ms.is_some())
                .max_by(|a, b| desc(b.itl_p95_ms, a.itl_p95_ms))
                .or_else(|| {
                    candidates()
                        .filter(|r| r.ttft_ms.is_some())
                        .max_by(|a, b| desc(b.ttft_ms, a.ttft_ms))
                })
                .map(|r| r.id)
        };
        let slowest = pick(true).or_else(|| pick(false));
        (rows, slowest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use metrale_protocol::metrics::{Finished, FirstToken, Queued, RequestProgress};

    fn hello(pid: u32) -> Input {
        Input::Event(Event::Hello(Hello {
            engine_version: "0.1.0".into(),
            model: "demo".into(),
            pid,
            started_unix_ms: u64::from(pid),
            t_ms: 0,
            http_url: None,
            device: "cpu".into(),
        }))
    }

    fn queued(id: u64) -> Input {
        Input::Event(Event::Queued(Queued {
            id,
            t_ms: 0,
            prompt_tokens: 10,
            max_tokens: 20,
        }))
    }

    fn finished(id: u64, itl_p95: f64) -> Input {
        Input::Event(Event::Finished(Finished {
            id,
            t_ms: 9,
            reason: "stop".into(),
            prompt_tokens: 10,
            generated_tokens: 5,
            cached_prompt_tokens: 0,
            preemptions: 0,
            e2e_ms: 50.0,
            ttft_ms: Some(10.0),
            itl_p50_ms: Some(itl_p95 / 2.0),
            itl_p95_ms: Some(itl_p95),
            generation_tokens_per_s: 100.0,
        }))
    }

    #[test]
    fn a_request_goes_from_queued_to_running_to_finished() {
        let mut app = App::new("unix:/x");
        app.apply(hello(1));
        app.apply(queued(3));
        assert_eq!(app.live.rows[&3].state, RequestState::Waiting);
        app.apply(Input::Event(Event::FirstToken(FirstToken {
            id: 3,
            t_ms: 5,
            ttft_ms: 12.5,
        })));
        assert_eq!(app.live.rows[&3].state, RequestState::Running);
        assert_eq!(app.live.rows[&3].ttft_ms, Some(12.5));
        app.apply(finished(3, 4.0));
        let r = &app.live.rows[&3];
        assert_eq!((r.state, r.generated_tokens), (RequestState::Finished, 5));
        assert_eq!(app.live.finished_total, 1);
    }

    #[test]
    fn a_snapshot_updates_active_rows_and_forgets_ones_it_no_longer_lists() {
        let mut app = App::new("t");
        app.apply(queued(1));
        app.apply(queued(2));
        app.apply(Input::Event(Event::Snapshot(Snapshot {
            ready: true,
            generation_tokens_per_s: 41.6,
            requests: vec![RequestProgress {
                id: 2,
                state: RequestState::Running,
                generated_tokens: 7,
                ..Default::default()
            }],
            ..Default::default()
        })));
        assert!(!app.live.rows.contains_key(&1));
        assert_eq!(app.live.rows[&2].generated_tokens, 7);
        assert_eq!(app.live.generation_tps.back(), Some(&42));
        assert!(app.live.ready());
    }

    #[test]
    fn ended_rows_are_capped_and_the_slowest_is_found() {
        let mut app = App::new("t");
        for id in 0..(ENDED_ROWS as u64 + 10) {
            app.apply(queued(id));
            app.apply(finished(id, id as f64));
        }
        assert_eq!(app.live.rows.len(), ENDED_ROWS);
        assert!(!app.live.rows.contains_key(&0));
        let (_, slowest) = app.table();
        assert_eq!(slowest, Some(ENDED_ROWS as u64 + 9));
        app.apply(Input::Key(Key::Sort));
        assert_eq!(app.sort, SortKey::Itl);
        let (rows, _) = app.table();
        assert_eq!(rows[0].id, ENDED_ROWS as u64 + 9);
        // A request still running comes before every ended one, whatever the sort.
        app.apply(queued(1000));
        let (rows, _) = app.table();
        assert_eq!(rows[0].id, 1000);
    }

    #[test]
    fn pause_freezes_the_view_while_the_state_moves_on() {
        let mut app = App::new("t");
        app.apply(queued(1));
        app.apply(Input::Key(Key::Pause));
        app.apply(queued(2));
        assert_eq!(app.view().rows.len(), 1);
        assert_eq!(app.live.rows.len(), 2);
        app.apply(Input::Key(Key::Pause));
        assert_eq!(app.view().rows.len(), 2);
    }

    #[test]
    fn a_restart_resets_the_model_and_says_so() {
        let mut app = App::new("unix:/s");
        app.apply(Input::Connected {
            target: "unix:/s".into(),
        });
        app.apply(hello(100));
        app.apply(queued(1));
        app.apply(Input::Disconnected {
            reason: "connection refused".into(),
        });
        app.apply(Input::Disconnected {
            reason: "connection refused".into(),
        });
        assert_eq!(
            app.conn,
            Conn::Lost {
                reason: "connection refused".into(),
                attempts: 2
            }
        );
        app.apply(Input::Connected {
            target: "unix:/s".into(),
        });
        assert_eq!(app.notice.as_deref(), Some("reconnected to unix:/s"));
        app.apply(hello(200));
        assert!(app.live.rows.is_empty());
        assert!(
            app.notice
                .as_deref()
                .is_some_and(|n| n.contains("restarted"))
        );
    }

    #[test]
    fn a_server_s_dashboard_asks_before_q_stops_it_and_d_detaches() {
        let mut app = App::for_server("met serve (this process)");
        app.apply(Input::Key(Key::Quit));
        assert!(app.confirm_quit && !app.quit, "q asks first");
        app.apply(Input::Key(Key::Sort));
        assert!(!app.confirm_quit && !app.quit, "any other key stays");
        app.apply(Input::Key(Key::Quit));
        app.apply(Input::Key(Key::Detach));
        assert!(app.quit && app.detach, "d leaves the server running");
        let mut app = App::for_server("x");
        app.apply(Input::Key(Key::Quit));
        app.apply(Input::Key(Key::Quit));
        assert!(app.quit && !app.detach, "q twice stops it");
        let mut app = App::for_server("x");
        app.apply(Input::Key(Key::Interrupt));
        assert!(app.quit && !app.detach, "Ctrl-C stops at once");
        let mut top = App::new("x");
        top.apply(Input::Key(Key::Detach));
        assert!(!top.quit, "d means nothing to top");
        top.apply(Input::Key(Key::Quit));
        assert!(top.quit, "q quits top at once");
    }

    #[test]
    fn help_takes_one_key_to_close_and_q_quits() {
        let mut app = App::new("t");
        app.apply(Input::Key(Key::Help));
        assert!(app.help);
        app.apply(Input::Key(Key::Sort));
        assert!(!app.help);
        assert_eq!(app.sort, SortKey::Id);
        app.apply(Input::Key(Key::Quit));
        assert!(app.quit);
    }
}
