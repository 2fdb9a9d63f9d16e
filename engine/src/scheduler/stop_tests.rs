//! Stop conditions and the admission limits: lone requests, hand-made runner outputs.

use std::time::Instant;

use super::tests::{BS, EOS, add, config, params, prompt, run_to_finish, scheduler};
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
    // Admitted against looser limits than this scheduler's (admission refuses 10 + 100 under
    // a context of 12): the scheduler still never runs past its context.
    let loose = crate::admission::AdmissionLimits::new(1000, 1000, BS, 1000);
    let valid = loose
        .validate(prompt(10, 0), params(100), Instant::now())
        .expect("admitted");
    s.add_request(1, valid);
    let (out, f) = run_to_finish(&mut s, 1, |_| 5);
    assert_eq!(out.len(), 2);
    assert_eq!(f.reason, FinishReason::Length);
}

/// The scheduler's limits for admission are its own: a request that fills the whole cache is
/// admitted and runs to its end; one more token is refused.
#[test]
fn admission_limits_match_what_the_scheduler_can_run() {
    let mut s = scheduler(SchedulerConfig {
        num_blocks: 5, // 4 usable blocks: 16 tokens of KV
        max_model_len: 100,
        ..config()
    });
    let limits = s.admission_limits(1000);
    // 10 + 7 tokens: the 17th is sampled, never fed, so 16 slots suffice.
    assert_eq!(limits.context_limit(), 17);
    let now = Instant::now();
    assert!(matches!(
        limits.validate(prompt(10, 0), params(8), now),
        Err(crate::admission::AddRequestError::TooLong { needed: 18, .. })
    ));
    let ignore = SamplingParams {
        ignore_eos: true,
        ..params(7)
    };
    let valid = limits.validate(prompt(10, 0), ignore, now).expect("fits");
    s.add_request(1, valid);
    let (out, f) = run_to_finish(&mut s, 1, |_| 5);
    assert_eq!((out.len(), f.reason), (7, FinishReason::Length));
    assert_eq!(f.num_preemptions, 0);
    assert!(
        Scheduler::new(SchedulerConfig {
            max_num_batched_tokens: 0,
            max_prefill_with_decodes: None,
            ..config()
        })
        .is_err()
    );
}
