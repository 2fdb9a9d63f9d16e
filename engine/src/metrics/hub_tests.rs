//! Tests of the metrics hub (`hub.rs`): fan-out, slow readers, phases, latency figures.

use super::*;
use metrale_protocol::metrics::parse_line;

fn hub(queue: usize) -> MetricsHub {
    let info = HubInfo {
        model: "m".into(),
        device: "cpu".into(),
    };
    MetricsHub::start_with_queue(info, Instant::now(), queue).expect("hub thread")
}

fn next(sub: &mut Subscription) -> Event {
    let line = sub.lines.blocking_recv().expect("a line");
    parse_line(&line).expect("valid line").expect("known event")
}

fn finished(n: usize) -> FinishedRequest {
    FinishedRequest {
        reason: FinishReason::Length,
        num_prompt_tokens: 3,
        num_generated_tokens: n,
        num_cached_prompt_tokens: 0,
        num_preemptions: 0,
    }
}

#[test]
fn a_subscriber_gets_hello_the_phases_so_far_then_a_snapshot() {
    let h = hub(64);
    let p = h.phases();
    p.phase(Phase::Resolve, 0, None, "");
    p.phase(Phase::Load, 1, Some(4), "layers");
    p.phase(Phase::Load, 4, Some(4), "layers");
    let mut sub = h.subscribe();
    assert!(matches!(next(&mut sub), Event::Hello(h) if h.model == "m"));
    assert!(matches!(next(&mut sub), Event::Phase(p) if p.phase == Phase::Resolve));
    // Progress lines of one phase collapse to the latest.
    match next(&mut sub) {
        Event::Phase(p) => assert_eq!((p.phase, p.done, p.total), (Phase::Load, 4, Some(4))),
        e => panic!("expected load, got {e:?}"),
    }
    assert!(matches!(next(&mut sub), Event::Snapshot(s) if !s.ready));
}

#[test]
fn request_events_carry_ttft_and_itl_measured_at_the_engine() {
    let h = hub(64);
    let mut sub = h.subscribe();
    for _ in 0..2 {
        next(&mut sub); // hello, snapshot
    }
    let t0 = Instant::now();
    h.queued(7, t0, 3, 5);
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    let step = |ms: u64, fin: Option<usize>| {
        h.step(
            at(ms),
            StepReport {
                tokens: vec![(7, 1)],
                finished: fin.map(|n| vec![(7, finished(n))]).unwrap_or_default(),
                ..Default::default()
            },
        )
    };
    step(40, None);
    step(50, None);
    step(60, None);
    step(90, Some(4));
    assert!(matches!(next(&mut sub), Event::Queued(q) if q.id == 7 && q.prompt_tokens == 3));
    match next(&mut sub) {
        Event::FirstToken(f) => assert!((f.ttft_ms - 40.0).abs() < 0.5, "{f:?}"),
        e => panic!("expected first_token, got {e:?}"),
    }
    match next(&mut sub) {
        Event::Finished(f) => {
            assert_eq!(
                (f.id, f.generated_tokens, f.reason.as_str()),
                (7, 4, "length")
            );
            // Gaps 10, 10, 30 ms: the median is 10, the 95th percentile 30.
            assert!((f.itl_p50_ms.expect("p50") - 10.0).abs() < 0.5, "{f:?}");
            assert!((f.itl_p95_ms.expect("p95") - 30.0).abs() < 0.5, "{f:?}");
            assert!((f.e2e_ms - 90.0).abs() < 0.5);
            // 3 tokens after the first in 50 ms.
            assert!((f.generation_tokens_per_s - 60.0).abs() < 1.0, "{f:?}");
        }
        e => panic!("expected finished, got {e:?}"),
    }
}

#[test]
fn a_reader_that_stops_reading_is_dropped_and_never_waited_on() {
    // A queue of 4,096 lines: the 5,000 reports overflow the stuck reader's, while the
    // reading one may fall 80 ms of bursts behind (a busy CI machine deschedules threads)
    // before it would be dropped too.
    let h = hub(4096);
    let stuck = h.subscribe();
    let mut good = h.subscribe();
    // The good reader drains on its own thread; the stuck one never reads.
    let reader = std::thread::spawn(move || {
        let mut n = 0u64;
        let mut dropped = 0;
        while let Some(line) = good.lines.blocking_recv() {
            n += 1;
            if let Ok(Some(Event::Snapshot(s))) = parse_line(&line) {
                dropped = s.slow_subscribers_dropped_total;
                if dropped > 0 && n > 5_000 {
                    break;
                }
            }
        }
        (n, dropped)
    });
    // Bursts of 50 events a millisecond apart: a reader that reads keeps up.
    let mut sending = Duration::ZERO;
    for burst in 0..100u64 {
        let t = Instant::now();
        for i in 0..50 {
            h.queued(burst * 50 + i, Instant::now(), 1, 1);
        }
        sending += t.elapsed();
        std::thread::sleep(Duration::from_millis(1));
    }
    // 5,000 reports are sends on a channel: far under a millisecond each even on a busy
    // machine, whatever the stuck reader does.
    assert!(sending < Duration::from_secs(1), "{sending:?}");
    let mut kicked = stuck.kicked;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match kicked.try_recv() {
            Err(oneshot::error::TryRecvError::Closed) => break,
            _ => {
                assert!(
                    Instant::now() < deadline,
                    "the stuck reader was never dropped"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
    let (n, dropped) = reader.join().expect("reader");
    assert!(n > 5_000, "the good reader got {n} lines");
    assert_eq!(dropped, 1);
}

#[test]
fn percentiles_take_the_nearest_rank() {
    let mut v = vec![5.0, 1.0, 3.0, 2.0, 4.0];
    assert_eq!(percentile(&mut v, 0.5), Some(3.0));
    assert_eq!(percentile(&mut v, 0.95), Some(5.0));
    assert_eq!(percentile(&mut [], 0.5), None);
}
