//! Render tests: a scripted stream of protocol events through the reducer and the pure draw
//! into ratatui's `TestBackend`, compared with committed snapshots (CI runs with
//! `INSTA_UPDATE=no`, so a changed screen fails). Also the frame budget with 128 requests.

use std::time::{Duration, Instant};

use metrale_dashboard::{App, Input, Key, draw};
use metrale_protocol::metrics::{
    Event, Finished, FirstToken, Hello, Phase, PhaseEvent, Queued, RequestProgress, RequestState,
    Snapshot,
};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::style::Color;

fn screen(app: &App, w: u16, h: u16) -> Terminal<TestBackend> {
    let mut t = Terminal::new(TestBackend::new(w, h)).expect("terminal");
    t.draw(|f| draw(f, app)).expect("draw");
    t
}

fn hello() -> Event {
    Event::Hello(Hello {
        engine_version: "0.1.0".into(),
        model: "demo".into(),
        pid: 4242,
        started_unix_ms: 1_700_000_000_000,
        t_ms: 0,
        http_url: Some("http://127.0.0.1:8000".into()),
        device: "cpu".into(),
    })
}

fn phase(phase: Phase, t_ms: u64, done: u64, total: Option<u64>, unit: &str) -> Event {
    Event::Phase(PhaseEvent {
        phase,
        t_ms,
        done,
        total,
        unit: unit.into(),
        message: None,
    })
}

fn connected(app: &mut App) {
    app.apply(Input::Connected {
        target: "unix:/run/user/1000/metrale/met-8000.sock".into(),
    });
    app.apply(Input::Event(hello()));
}

/// A steady state: `n` requests, the first `n/2` finished, the rest running, and `points`
/// snapshots of throughput history.
fn busy(app: &mut App, n: u64, points: u64) {
    app.apply(Input::Event(phase(Phase::Ready, 900, 1, Some(1), "")));
    for id in 1..=n {
        app.apply(Input::Event(Event::Queued(Queued {
            id,
            t_ms: 1000 + id,
            prompt_tokens: 20 + id % 7,
            max_tokens: 64,
        })));
        app.apply(Input::Event(Event::FirstToken(FirstToken {
            id,
            t_ms: 1010 + id,
            ttft_ms: 8.0 + (id % 5) as f64,
        })));
    }
    for id in 1..=n / 2 {
        app.apply(Input::Event(Event::Finished(Finished {
            id,
            t_ms: 2000,
            reason: if id % 3 == 0 { "stop" } else { "length" }.into(),
            prompt_tokens: 20 + id % 7,
            generated_tokens: 64,
            cached_prompt_tokens: 0,
            preemptions: 0,
            e2e_ms: 400.0,
            ttft_ms: Some(8.0 + (id % 5) as f64),
            itl_p50_ms: Some(5.0 + (id % 4) as f64),
            itl_p95_ms: Some(7.0 + (id % 4) as f64 + if id == 3 { 30.0 } else { 0.0 }),
            generation_tokens_per_s: 150.0 - id as f64,
        })));
    }
    for k in 0..points {
        let running: Vec<RequestProgress> = (n / 2 + 1..=n)
            .map(|id| RequestProgress {
                id,
                state: RequestState::Running,
                prompt_tokens: 20 + id % 7,
                generated_tokens: 10 + k,
                ttft_ms: Some(8.0 + (id % 5) as f64),
                itl_p50_ms: Some(6.0),
                itl_p95_ms: Some(if id == n - 3 { 25.0 } else { 9.0 }),
                generation_tokens_per_s: 120.0,
            })
            .collect();
        app.apply(Input::Event(Event::Snapshot(Snapshot {
            t_ms: 2000 + k * 250,
            ready: true,
            running_seqs: running.len() as u64,
            waiting_seqs: 2,
            preemptions_total: 1,
            step_seqs: running.len() as u64,
            max_step_seqs: 16,
            step_tokens: running.len() as u64,
            max_step_tokens: 2048,
            batch_seqs_ratio: running.len() as f64 / 16.0,
            batch_tokens_ratio: running.len() as f64 / 2048.0,
            kv_blocks_used: 40 + k,
            kv_blocks_total: 128,
            kv_block_size_tokens: 16,
            max_model_len_tokens: 2048,
            prefix_cache_hit_ratio: 0.25,
            prompt_tokens_per_s: (k * 37 % 200) as f64,
            generation_tokens_per_s: 400.0 + (k * 53 % 300) as f64,
            steps_per_s: 50.0,
            ttft_p50_ms: Some(10.0),
            ttft_p95_ms: Some(12.0),
            itl_p50_ms: Some(6.0),
            itl_p95_ms: Some(9.5),
            requests: running,
            ..Default::default()
        })));
    }
}

#[test]
fn start_up_shows_each_phase_and_the_current_one_s_progress() {
    let mut app = App::new("unix:/run/user/1000/metrale/met-8000.sock");
    connected(&mut app);
    app.apply(Input::Event(phase(Phase::Resolve, 3, 0, None, "")));
    app.apply(Input::Event(phase(
        Phase::Download,
        120,
        1_500_000_000,
        Some(4_000_000_000),
        "bytes",
    )));
    insta::assert_snapshot!("start_up_downloading", screen(&app, 100, 20).backend());
    app.apply(Input::Event(phase(
        Phase::Download,
        9000,
        4_000_000_000,
        Some(4_000_000_000),
        "bytes",
    )));
    app.apply(Input::Event(phase(
        Phase::Load,
        9100,
        14,
        Some(28),
        "layers",
    )));
    insta::assert_snapshot!("start_up_loading", screen(&app, 100, 20).backend());
}

#[test]
fn a_busy_engine_shows_throughput_gauges_and_the_request_table() {
    let mut app = App::new("x");
    connected(&mut app);
    busy(&mut app, 12, 60);
    let t = screen(&app, 110, 36);
    insta::assert_snapshot!("busy", t.backend());
    // The slowest request still running (id 9, ITL p95 25 ms; a finished one had 40 ms) is
    // drawn in red: find its row.
    let buf = t.backend().buffer();
    let row = (0..buf.area.height)
        .find(|&y| {
            let line: String = (0..buf.area.width).map(|x| buf[(x, y)].symbol()).collect();
            line.starts_with("│9 ") && line.contains("25.0ms")
        })
        .expect("request 9 is on screen");
    assert_eq!(buf[(2, row)].fg, Color::Red);
}

#[test]
fn sorting_pausing_help_and_a_lost_connection_are_visible() {
    let mut app = App::new("x");
    connected(&mut app);
    busy(&mut app, 12, 10);
    app.apply(Input::Key(Key::Sort)); // ITL p95: id 3 first
    app.apply(Input::Key(Key::Pause));
    app.apply(Input::Disconnected {
        reason: "connection refused (the engine stopped?)".into(),
    });
    insta::assert_snapshot!(
        "sorted_paused_disconnected",
        screen(&app, 110, 36).backend()
    );
    app.apply(Input::Key(Key::Help));
    insta::assert_snapshot!("help", screen(&app, 110, 36).backend());
}

#[test]
fn a_frame_with_128_concurrent_streams_takes_well_under_100_ms() {
    // 128 requests streaming at once: each frame applies a snapshot listing all of them plus
    // a first-token and a finished event for some, then draws. 10 frames a second needs
    // under 100 ms a frame; measure the worst of 50 frames.
    let mut app = App::new("x");
    connected(&mut app);
    busy(&mut app, 128, 1);
    let mut terminal = Terminal::new(TestBackend::new(200, 60)).expect("terminal");
    let mut worst = Duration::ZERO;
    for frame in 0..50u64 {
        let t = Instant::now();
        let requests: Vec<RequestProgress> = (0..128)
            .map(|i| RequestProgress {
                id: 1000 + i,
                state: RequestState::Running,
                prompt_tokens: 100,
                generated_tokens: frame * 4 + i % 7,
                ttft_ms: Some(20.0),
                itl_p50_ms: Some(5.0 + (i % 9) as f64),
                itl_p95_ms: Some(8.0 + (i % 13) as f64),
                generation_tokens_per_s: 100.0,
            })
            .collect();
        for i in 0..16 {
            app.apply(Input::Event(Event::Queued(Queued {
                id: 10_000 + frame * 16 + i,
                t_ms: frame,
                prompt_tokens: 5,
                max_tokens: 5,
            })));
        }
        app.apply(Input::Event(Event::Snapshot(Snapshot {
            ready: true,
            requests,
            ..Default::default()
        })));
        terminal.draw(|f| draw(f, &app)).expect("draw");
        worst = worst.max(t.elapsed());
    }
    eprintln!("128 streams: worst frame {worst:?}");
    assert!(worst < Duration::from_millis(100), "worst frame {worst:?}");
}
