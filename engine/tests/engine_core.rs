//! The engine core end to end on a fixture model: the real scheduler, runner and CPU backend,
//! driven through `EngineHandle` as the HTTP server drives it.

use std::time::{Duration, Instant};

use metrale_engine::engine_core::{
    AddRequestError, EngineConfig, EngineHandle, FinishReason, RequestStream,
};
use metrale_engine::sampling_params::SamplingParams;
mod reference_support;

use reference_support::{fixtures, reference};

fn config(name: &str) -> EngineConfig {
    reference_support::cpu_engine_config(fixtures().join("models").join(name), name)
}

fn params(f: impl FnOnce(&mut SamplingParams)) -> SamplingParams {
    let mut p = SamplingParams {
        max_tokens: 16,
        ignore_eos: true,
        ..SamplingParams::default()
    };
    f(&mut p);
    p
}

/// Validate and submit a request, as the server does.
fn submit(
    engine: &EngineHandle,
    prompt: Vec<u32>,
    sampling: SamplingParams,
) -> Result<RequestStream, AddRequestError> {
    let valid = engine.limits().validate(prompt, sampling, Instant::now())?;
    engine.add_request(valid)
}

/// Run one request to completion: its tokens and finish reason.
async fn run(
    engine: &EngineHandle,
    prompt: Vec<u32>,
    sampling: SamplingParams,
) -> (Vec<u32>, FinishReason) {
    let mut stream = submit(engine, prompt, sampling).expect("admitted");
    let mut tokens = Vec::new();
    while let Some(out) = stream.next().await {
        tokens.extend(out.new_token_ids);
        if let Some(f) = out.finished {
            assert_eq!(f.num_generated_tokens, tokens.len());
            return (tokens, f.reason);
        }
    }
    panic!("stream ended without a finished output");
}

async fn wait_idle(engine: &EngineHandle) {
    let t0 = Instant::now();
    while !(engine.is_idle() && engine.stats().kv_blocks_used == 0) {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "engine never went idle: {:?}",
            engine.stats()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn greedy_through_the_engine_matches_transformers() {
    for name in ["qwen3-gqa-tied", "qwen3-moe-mixed", "qwen3-moe-fp8-hf"] {
        let (engine, _) = EngineHandle::start(config(name)).expect("start");
        let r = reference(name);
        let (tokens, reason) = run(
            &engine,
            r.greedy.prompt.clone(),
            params(|p| p.temperature = 0.0),
        )
        .await;
        assert_eq!(tokens, r.greedy.continuation, "{name}");
        assert_eq!(reason, FinishReason::Length);
        engine.shutdown();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_equal_one_at_a_time() {
    let (engine, _) = EngineHandle::start(config("qwen3-mha-untied")).expect("start");
    let r = reference("qwen3-mha-untied");
    // Prompts of many lengths (chunked prefill: the budget is 64 tokens a step), sampled with
    // seeds, some sharing a prefix (prefix cache hits), more requests than batch slots.
    let jobs: Vec<(Vec<u32>, SamplingParams)> = (0..24)
        .map(|i| {
            let base = &r.sequences[i % r.sequences.len()].tokens;
            let mut prompt = base.clone();
            prompt.extend((0..(i % 5) as u32).map(|k| 100 + k));
            let p = params(|p| {
                p.temperature = 0.9;
                p.top_p = 0.95;
                p.seed = 1000 + i as u64;
                p.max_tokens = 3 + (i * 7) % 20;
            });
            (prompt, p)
        })
        .collect();
    let mut alone = Vec::new();
    for (prompt, p) in &jobs {
        alone.push(run(&engine, prompt.clone(), p.clone()).await.0);
    }
    let together = futures_join(
        jobs.iter()
            .map(|(prompt, p)| {
                let (engine, prompt, p) = (engine.clone(), prompt.clone(), p.clone());
                async move { run(&engine, prompt, p).await }
            })
            .collect(),
    )
    .await;
    for (i, (a, t)) in alone.iter().zip(&together).enumerate() {
        assert_eq!(a, &t.0, "request {i}: batched output differs from alone");
        assert_eq!(a.len(), jobs[i].1.max_tokens);
    }
    assert!(
        engine.stats().prefix_cache_hits_total > 0,
        "shared prefixes should hit the cache"
    );
    wait_idle(&engine).await;
    engine.shutdown();
}

async fn futures_join<F: std::future::Future<Output = T> + Send + 'static, T: Send + 'static>(
    futs: Vec<F>,
) -> Vec<T> {
    let handles: Vec<_> = futs.into_iter().map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.expect("task"));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_stream_frees_its_blocks() {
    let (engine, _) = EngineHandle::start(config("qwen3-gqa-tied")).expect("start");
    let prompt: Vec<u32> = (1..100).collect();
    let mut stream = submit(&engine, prompt, params(|p| p.max_tokens = 150)).expect("admitted");
    let first = stream.next().await.expect("a token");
    assert_eq!(first.new_token_ids.len(), 1);
    assert!(engine.stats().kv_blocks_used > 0);
    drop(stream); // the client went away
    wait_idle(&engine).await;
    assert_eq!(engine.stats().num_running, 0);
    engine.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_refuses_what_cannot_fit_and_what_overflows_the_queue() {
    let mut cfg = config("qwen3-gqa-tied");
    cfg.max_queued_requests = 2;
    let (engine, _) = EngineHandle::start(cfg).expect("start");
    let too_long = submit(&engine, vec![1; 200], params(|p| p.max_tokens = 100));
    assert!(
        matches!(
            too_long,
            Err(AddRequestError::TooLong {
                prompt_tokens: 200,
                needed: 300,
                limit: 256
            })
        ),
        "{too_long:?}"
    );
    let mut held = Vec::new();
    let mut refused = None;
    for _ in 0..50 {
        match submit(&engine, vec![5; 60], params(|p| p.max_tokens = 100)) {
            Ok(s) => held.push(s),
            Err(e) => {
                refused = Some(e);
                break;
            }
        }
    }
    assert!(
        matches!(refused, Some(AddRequestError::QueueFull { .. })),
        "{refused:?}"
    );
    drop(held);
    wait_idle(&engine).await;
    engine.drain();
    let late = submit(&engine, vec![1], params(|_| {}));
    assert!(matches!(late, Err(AddRequestError::ShuttingDown)));
    assert!(!engine.is_ready());
    engine.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompt_logprobs_match_transformers() {
    let (engine, _) = EngineHandle::start(config("qwen3-gqa4-yarn")).expect("start");
    let r = reference("qwen3-gqa4-yarn");
    let seq = r
        .sequences
        .iter()
        .max_by_key(|s| s.tokens.len())
        .expect("seqs"); // 130 tokens: 3 chunks
    let mut stream = submit(
        &engine,
        seq.tokens.clone(),
        params(|p| {
            p.max_tokens = 1;
            p.prompt_logprobs = Some(2);
        }),
    )
    .expect("admitted");
    let out = stream.next().await.expect("output");
    let lps = out.prompt_logprobs.expect("prompt logprobs");
    assert_eq!(lps.len(), seq.tokens.len() - 1);
    for (k, (got, want)) in lps.iter().zip(&seq.next_token_logprobs).enumerate() {
        assert_eq!(got.token_id, seq.tokens[k + 1]);
        assert!(
            (got.logprob - want).abs() < 1e-3,
            "prompt token {}: {} vs {want}",
            k + 1,
            got.logprob
        );
        assert_eq!(got.top.len(), 2);
    }
    engine.shutdown();
}

/// Issue 31's race: admission decided the queue limit on the handle (a check, then an add)
/// and again on the engine thread (the scheduler's own limit). Handles racing past the check
/// together overflowed the scheduler's queue, and the engine thread turned its refusal into
/// an aborted stream: a client that was admitted got an abort instead of a 429. Many threads
/// add at once against a queue of one; every request must be refused up front or run to
/// its end.
#[test]
fn racing_adds_are_refused_up_front_never_aborted() {
    let mut cfg = config("qwen3-gqa-tied");
    cfg.max_queued_requests = 1;
    cfg.max_num_seqs = 2;
    let (engine, _) = EngineHandle::start(cfg).expect("start");
    let threads = 16;
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(threads));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let (engine, barrier) = (engine.clone(), barrier.clone());
            std::thread::spawn(move || {
                let mut streams = Vec::new();
                let mut refused = 0usize;
                barrier.wait();
                for _ in 0..200 {
                    match submit(&engine, vec![3; 4], params(|p| p.max_tokens = 2)) {
                        Ok(s) => streams.push(s),
                        Err(AddRequestError::QueueFull { .. }) => refused += 1,
                        Err(e) => panic!("unexpected refusal: {e}"),
                    }
                }
                (streams, refused)
            })
        })
        .collect();
    let (mut admitted, mut refused) = (0, 0);
    for w in workers {
        let (streams, r) = w.join().expect("worker");
        refused += r;
        for mut s in streams {
            admitted += 1;
            let reason = runtime.block_on(async {
                while let Some(out) = s.next().await {
                    if let Some(f) = out.finished {
                        return f.reason;
                    }
                }
                panic!("stream ended without a finished output")
            });
            assert_eq!(
                reason,
                FinishReason::Length,
                "an admitted request was aborted ({admitted} admitted, {refused} refused so far)"
            );
        }
    }
    assert!(
        admitted > 0 && refused > 0,
        "{admitted} admitted, {refused} refused"
    );
    engine.shutdown();
}
