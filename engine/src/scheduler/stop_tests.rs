//! Stop conditions and what `add_request` refuses: lone requests, hand-made runner outputs.

use std::sync::Arc;
use std::time::Instant;

use super::tests::{EOS, add, config, params, prompt, run_to_finish, scheduler};
use super::*;
use crate::sampling_params::SamplingParams;

/// Output tokens and finish reason of a lone request whose runner samples `tokens` in turn.
fn generate(p: SamplingParams, tokens: &[u32]) -> (Vec<u32>, FinishReason) {
    let mut s = scheduler(config());
    add(&mut s, 1, prompt(3, 0), p);
    let tokens = tokens.to_vec();
    let (out, f) = run_to_finish(&mut s, 1, move |len| {
        tokens[(len - 3).min(tokens.len() - 1)]
    });
    (out, f.reason)
}

#[test]
fn stop_conditions() {
    let (out, why) = generate(params(10), &[5, 6, EOS, 8]);
    assert_eq!(
        (out, why),
        (vec![5, 6, EOS], FinishReason::Stop { token: EOS })
    );

    let ignore = SamplingParams {
        ignore_eos: true,
        ..params(4)
    };
    let (out, why) = generate(ignore, &[EOS]);
    assert_eq!((out, why), (vec![EOS; 4], FinishReason::Length));

    let min = SamplingParams {
        min_tokens: 2,
        ..params(10)
    };
    let (out, why) = generate(min, &[EOS]);
    assert_eq!(out, vec![EOS; 3], "EOS counts once 2 tokens precede it");
    assert_eq!(why, FinishReason::Stop { token: EOS });

    let stop = SamplingParams {
        stop_token_ids: vec![9],
        ..params(10)
    };
    let (out, why) = generate(stop, &[5, 9]);
    assert_eq!((out, why), (vec![5, 9], FinishReason::Stop { token: 9 }));

    let (out, why) = generate(params(3), &[5]);
    assert_eq!((out, why), (vec![5, 5, 5], FinishReason::Length));

    // EOS as the last allowed token is still a stop.
    let (_, why) = generate(params(2), &[5, EOS]);
    assert_eq!(why, FinishReason::Stop { token: EOS });
}

#[test]
fn max_model_len_ends_generation() {
    let mut s = scheduler(SchedulerConfig {
        max_model_len: 12,
        ..config()
    });
    add(&mut s, 1, prompt(10, 0), params(100));
    let (out, f) = run_to_finish(&mut s, 1, |_| 5);
    assert_eq!(out.len(), 2);
    assert_eq!(f.reason, FinishReason::Length);
}

#[test]
fn add_request_refuses_what_can_never_run() {
    let mut s = scheduler(SchedulerConfig {
        num_blocks: 5, // 4 usable blocks: 16 tokens of KV
        max_queued_requests: 2,
        max_model_len: 100,
        ..config()
    });
    let p = |max_tokens| Arc::new(params(max_tokens));
    let now = Instant::now();
    // 10 + 7 tokens: the 17th is sampled, never fed, so 16 slots suffice.
    assert_eq!(s.add_request(1, prompt(10, 0), p(7), now), Ok(()));
    assert!(matches!(
        s.add_request(2, prompt(10, 0), p(8), now),
        Err(AddRequestError::ExceedsKvCache {
            blocks_needed: 5,
            blocks_total: 4,
            ..
        })
    ));
    assert_eq!(
        s.add_request(1, prompt(1, 0), p(1), now),
        Err(AddRequestError::DuplicateId(1))
    );
    assert_eq!(
        s.add_request(3, vec![], p(1), now),
        Err(AddRequestError::EmptyPrompt(3))
    );
    assert_eq!(
        s.add_request(3, prompt(1, 0), p(0), now),
        Err(AddRequestError::ZeroMaxTokens(3))
    );
    assert!(matches!(
        s.add_request(3, prompt(100, 0), p(1), now),
        Err(AddRequestError::PromptTooLong { .. })
    ));
    assert_eq!(s.add_request(3, prompt(1, 0), p(1), now), Ok(()));
    assert_eq!(
        s.add_request(4, prompt(1, 0), p(1), now),
        Err(AddRequestError::QueueFull { id: 4, max: 2 })
    );
    let msg = s
        .add_request(4, prompt(1, 0), p(1), now)
        .err()
        .map(|e| e.to_string());
    assert!(msg.is_some_and(|m| m.contains("retry later")));
    assert!(
        Scheduler::new(SchedulerConfig {
            max_num_batched_tokens: 0,
            ..config()
        })
        .is_err()
    );
}
