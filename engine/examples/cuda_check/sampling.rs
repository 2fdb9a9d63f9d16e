//! `sample` on CUDA against the CPU backend's `sample`, token for token, over many seeds and
//! parameter mixes: greedy, temperatures, top-k 1/20/2000, top-p 0.5/0.95, min-p 0.1,
//! repetition/frequency/presence penalties, min_tokens with end-of-sequence and stop tokens, on
//! f32 and bf16 logits of Qwen3's vocabulary. Every mismatch is a failure: the device sampler
//! computes the host's values bit for bit (`kernels/src/sample.cu` says how). Also prints how
//! many rows took each route and the time of all batches on each backend (not pass/fail). Then
//! sequences over many steps whose penalties come from the device's per-sequence states. Then
//! grammar masks applied on the device (`sample_token_mask`) against the host's.

use std::time::Instant;

use anyhow::Result;
use metrale_engine::backend::cuda::{CudaBackend, DType};
use metrale_engine::backend::sampling::{SampleRow, Sampled, sample_row_with};
use metrale_engine::backend::{Backend, CpuBackend};
use metrale_engine::grammar::TokenMask;
use metrale_engine::sampling_params::SamplingParams;
use serde_json::json;

use crate::ops::{Rng, round_bf16};
use crate::report::Report;

const VOCAB: usize = 151_936;
const ROWS: usize = 48;
const BATCHES: usize = 8;

/// Logits like a language model's: a broad body, a few dozen strong candidates, one row in
/// four nearly flat (top-p then needs many tokens) and exact ties sprinkled in.
fn logits(rng: &mut Rng, rows: usize) -> Vec<f32> {
    let mut x = Vec::with_capacity(rows * VOCAB);
    for r in 0..rows {
        let flat = r % 4 == 3;
        let body = if flat { 0.5 } else { 4.0 };
        let start = x.len();
        x.extend((0..VOCAB).map(|_| rng.uniform() * body));
        if !flat {
            for _ in 0..40 {
                let at = start + rng.below(VOCAB);
                x[at] = 8.0 + 6.0 * rng.uniform();
            }
        }
        let a = start + rng.below(VOCAB);
        let b = start + rng.below(VOCAB);
        x[b] = x[a];
    }
    x
}

/// The parameter mix of row `i` of batch `batch`.
fn params(rng: &mut Rng, i: usize, batch: usize, top: u32) -> SamplingParams {
    let temperature = [0.0, 0.3, 0.7, 1.0, 1.5][i % 5];
    let (top_k, top_p, min_p) = [
        (0, 1.0, 0.0),
        (1, 1.0, 0.0),
        (20, 1.0, 0.0),
        (2000, 1.0, 0.0),
        (0, 0.5, 0.0),
        (0, 0.95, 0.0),
        (0, 1.0, 0.1),
        (40, 0.9, 0.05),
    ][(i / 5 + batch) % 8];
    let (repetition_penalty, frequency_penalty, presence_penalty) = [
        (1.0, 0.0, 0.0),
        (1.2, 0.0, 0.0),
        (1.0, 0.5, 0.3),
        (0.9, -0.2, 0.6),
    ][(i / 2 + batch) % 4];
    let masks = (i + batch).is_multiple_of(3);
    SamplingParams {
        // One row in eleven asks for logprobs (the host route, mixed into the same batch).
        logprobs: (i % 11 == 4).then_some(3),
        temperature,
        top_k,
        top_p,
        min_p,
        repetition_penalty,
        frequency_penalty,
        presence_penalty,
        seed: rng.next_u64(),
        min_tokens: if masks { 64 } else { 0 },
        // The row's best token as end-of-sequence: masking it changes the greedy answer.
        eos_token_ids: if masks { vec![top, 151_645] } else { vec![] },
        stop_token_ids: if masks { vec![7, 400_000] } else { vec![] },
        ..SamplingParams::default()
    }
}

/// Prompt then output tokens, many of them among the row's strong candidates so penalties bite.
fn history(rng: &mut Rng, strong: &[u32]) -> (Vec<u32>, usize) {
    let prompt = 20 + rng.below(60);
    let output = rng.below(40);
    let tokens = (0..prompt + output)
        .map(|_| {
            if rng.below(3) == 0 && !strong.is_empty() {
                strong[rng.below(strong.len())]
            } else {
                rng.below(VOCAB) as u32
            }
        })
        .collect();
    (tokens, prompt)
}

fn ids(s: &[Sampled]) -> Vec<u32> {
    s.iter().map(|x| x.token_id).collect()
}

pub fn run(cuda: &CudaBackend, report: &mut Report) -> Result<()> {
    let cpu = CpuBackend::default();
    let mut rng = Rng::new(0x73_616d_706c_6531);
    let before = CudaBackend::sample_route_counts();
    let (mut rows_checked, mut mismatches) = (0usize, 0usize);
    let (mut cuda_ms, mut cpu_ms) = (0.0f64, 0.0f64);
    for batch in 0..BATCHES {
        let dtype = if batch % 4 == 3 {
            DType::BF16
        } else {
            DType::F32
        };
        let mut data = logits(&mut rng, ROWS);
        if dtype == DType::BF16 {
            data = round_bf16(&data);
        }
        let x_d = cuda.tensor_from_f32(&[ROWS, VOCAB], &data, dtype)?;
        let x_c = metrale_engine::backend::cpu::CpuTensor::new(vec![ROWS, VOCAB], data.clone());
        let mut all_params = Vec::with_capacity(ROWS);
        let mut histories = Vec::with_capacity(ROWS);
        for i in 0..ROWS {
            let row = &data[i * VOCAB..(i + 1) * VOCAB];
            let mut order: Vec<u32> = (0..VOCAB as u32).collect();
            order.select_nth_unstable_by(8, |&a, &b| row[b as usize].total_cmp(&row[a as usize]));
            let strong = order[..8].to_vec();
            all_params.push(params(&mut rng, i, batch, strong[0]));
            histories.push(history(&mut rng, &strong));
        }
        // Rows in a shuffled order, some logits rows sampled twice with other parameters.
        let mut which: Vec<usize> = (0..ROWS).collect();
        rng.shuffle(&mut which);
        let rows: Vec<SampleRow<'_>> = which
            .iter()
            .enumerate()
            .map(|(k, &i)| {
                let src = if k % 7 == 6 { which[0] } else { i };
                SampleRow {
                    logits_row: src,
                    params: &all_params[i],
                    all_token_ids: &histories[i].0,
                    num_prompt_tokens: histories[i].1,
                    seq: None,
                }
            })
            .collect();
        let t = Instant::now();
        let got = cuda.sample(&x_d, &rows)?;
        cuda_ms += t.elapsed().as_secs_f64() * 1e3;
        let t = Instant::now();
        let want = cpu.sample(&x_c, &rows)?;
        cpu_ms += t.elapsed().as_secs_f64() * 1e3;
        let (g, w) = (ids(&got), ids(&want));
        for (k, r) in rows.iter().enumerate() {
            if got.get(k) != want.get(k) {
                mismatches += 1;
                if mismatches <= 10 {
                    let p = r.params;
                    report.line(format!(
                        "sample mismatch: batch {batch} ({dtype:?}) row {} T {} top_k {} top_p {} min_p {} rep {} freq {} pres {} min_tokens {} outputs {}: cuda {} cpu {}",
                        r.logits_row,
                        p.temperature,
                        p.top_k,
                        p.top_p,
                        p.min_p,
                        p.repetition_penalty,
                        p.frequency_penalty,
                        p.presence_penalty,
                        p.min_tokens,
                        r.all_token_ids.len() - r.num_prompt_tokens,
                        g[k],
                        w[k]
                    ));
                }
            }
        }
        rows_checked += rows.len();
    }
    let after = CudaBackend::sample_route_counts();
    let d: Vec<u64> = after.iter().zip(before).map(|(a, b)| a - b).collect();
    report.line(format!(
        "{:<16} {:<60} {} mismatches",
        "sample mixes",
        format!("{rows_checked} rows × {VOCAB}, {BATCHES} batches (f32, bf16)"),
        mismatches
    ));
    report.summary_line(format!(
        "sampling: {rows_checked} rows, {mismatches} mismatches; routes argmax {} greedy {} gumbel {} candidates {} host {} (handed back {}); {BATCHES} batches of {ROWS}: cuda {cuda_ms:.1} ms, cpu {cpu_ms:.1} ms",
        d[0], d[1], d[2], d[3], d[4], d[5]
    ));
    report.record(json!({
        "op": "sample mixes",
        "rows": rows_checked,
        "mismatches": mismatches,
        "routes": {"argmax": d[0], "greedy": d[1], "gumbel": d[2], "candidates": d[3], "host": d[4], "handed_back": d[5]},
        "cuda_ms": cuda_ms,
        "cpu_ms": cpu_ms,
        "pass": mismatches == 0,
    }));
    if mismatches > 0 {
        report.fail(format!(
            "sample: {mismatches} of {rows_checked} rows drew another token than the CPU"
        ));
    }
    if d[2] == 0 || d[3] == 0 || d[1] == 0 {
        report.fail(format!(
            "sample: a device route was never taken (routes {d:?}): the check lost its reach"
        ));
    }
    sequences(cuda, report)?;
    grammar_masks(cuda, report)
}

/// Running sequences over many steps, their penalties read from the device's per-sequence
/// states (`SampleRow::seq`): each step's rows (a committed row, on some steps two speculative
/// draft rows past it) against the CPU's tokens; one rollback (a shorter history) a sequence;
/// then every state freed by `end_sequences`.
fn sequences(cuda: &CudaBackend, report: &mut Report) -> Result<()> {
    const SEQS: usize = 12;
    const STEPS: usize = 40;
    let cpu = CpuBackend::default();
    let mut rng = Rng::new(0x7365_7173);
    let (base_seq, (_, rebuilds_before)) = (1u64 << 40, cuda.penalty_state_counts());
    let params: Vec<SamplingParams> = (0..SEQS)
        .map(|i| {
            let (repetition_penalty, frequency_penalty, presence_penalty) =
                [(1.2, 0.0, 0.0), (1.0, 0.5, 0.3), (0.9, -0.2, 0.6)][i % 3];
            SamplingParams {
                temperature: [0.0, 0.7, 1.0][i % 3],
                top_p: if i % 4 == 1 { 0.9 } else { 1.0 },
                repetition_penalty,
                frequency_penalty,
                presence_penalty,
                seed: rng.next_u64(),
                ..SamplingParams::default()
            }
        })
        .collect();
    let mut histories: Vec<(Vec<u32>, usize)> = (0..SEQS).map(|_| history(&mut rng, &[])).collect();
    let (mut rows_checked, mut mismatches) = (0usize, 0usize);
    for step in 0..STEPS {
        let drafts: Vec<Vec<u32>> = (0..SEQS)
            .map(|i| match (i + step) % 3 {
                0 => vec![rng.below(VOCAB) as u32, rng.below(VOCAB) as u32],
                _ => Vec::new(),
            })
            .collect();
        let contexts: Vec<Vec<Vec<u32>>> = histories
            .iter()
            .zip(&drafts)
            .map(|((h, _), d)| (1..=d.len()).map(|j| [&h[..], &d[..j]].concat()).collect())
            .collect();
        let mut rows = Vec::new();
        for i in 0..SEQS {
            let seq = Some(base_seq + i as u64);
            let (h, prompt) = (&histories[i].0, histories[i].1);
            for all in std::iter::once(h).chain(&contexts[i]) {
                rows.push(SampleRow {
                    logits_row: rows.len(),
                    params: &params[i],
                    all_token_ids: all,
                    num_prompt_tokens: prompt,
                    seq,
                });
            }
        }
        let n = rows.len();
        // Strong logits on recent tokens, so the penalties decide.
        let mut data = logits(&mut rng, n);
        for (r, row) in rows.iter().enumerate() {
            for &t in row.all_token_ids.iter().rev().take(20) {
                if (t as usize) < VOCAB {
                    data[r * VOCAB + t as usize] = 13.0;
                }
            }
        }
        let x_d = cuda.tensor_from_f32(&[n, VOCAB], &data, DType::F32)?;
        let x_c = metrale_engine::backend::cpu::CpuTensor::new(vec![n, VOCAB], data);
        let (got, want) = (cuda.sample(&x_d, &rows)?, cpu.sample(&x_c, &rows)?);
        rows_checked += n;
        let bad = got.iter().zip(&want).filter(|(g, w)| g != w).count();
        if bad > 0 && mismatches == 0 {
            report.line(format!("sample sequences: step {step}: {bad} rows differ"));
        }
        mismatches += bad;
        // Each sequence takes its first row's token; at step 20 every other one rolls back 3.
        let mut at = 0;
        for (i, (h, _)) in histories.iter_mut().enumerate() {
            h.push(want[at].token_id);
            at += 1 + contexts[i].len();
            if step == 20 && i % 2 == 0 {
                h.truncate(h.len() - 3);
            }
        }
    }
    let (live, rebuilds) = cuda.penalty_state_counts();
    let ids: Vec<u64> = (0..SEQS as u64).map(|i| base_seq + i).collect();
    cuda.end_sequences(&ids);
    let (after_end, _) = cuda.penalty_state_counts();
    let rebuilt = rebuilds - rebuilds_before;
    report.line(format!(
        "{:<16} {:<60} {} mismatches",
        "sample sequences",
        format!("{SEQS} sequences × {STEPS} steps, drafts, rollbacks ({rebuilt} rebuilds)"),
        mismatches
    ));
    report.record(json!({
        "op": "sample sequences",
        "rows": rows_checked,
        "mismatches": mismatches,
        "rebuilds": rebuilt,
        "states_live": live,
        "states_after_end": after_end,
        "pass": mismatches == 0 && rebuilt == (SEQS + SEQS / 2) as u64 && after_end == 0,
    }));
    if mismatches > 0 {
        report.fail(format!(
            "sample sequences: {mismatches} of {rows_checked} rows drew another token than the CPU"
        ));
    }
    // A state a sequence, built once and once more after its rollback; all freed at the end.
    if rebuilt != (SEQS + SEQS / 2) as u64 || live < SEQS || after_end != 0 {
        report.fail(format!(
            "sample sequences: {rebuilt} state rebuilds (want {}), {live} live, {after_end} after end_sequences",
            SEQS + SEQS / 2
        ));
    }
    Ok(())
}

/// Grammar masks on the device (`sample_with_masks`: the bitmask uploaded in the plan,
/// `sample_token_mask` on the scratch) against the host sampler with the same masks
/// (`sample_row_with`: `TokenMask::apply`), token for token: random logits and random masks over
/// a vocabulary that is not a multiple of 32 (its last word partly used), rows with every token
/// masked but one (sometimes the last id, sometimes one the row rates low), masks that remove the
/// row's best tokens, unconstrained rows in the same batch; greedy, Gumbel and filtered rows,
/// some with penalties.
fn grammar_masks(cuda: &CudaBackend, report: &mut Report) -> Result<()> {
    const V: usize = 151_931; // 151_931 % 32 = 27
    const N: usize = 40;
    const BATCHES: usize = 4;
    let mut rng = Rng::new(0x006d_6173_6b73);
    let (mut rows_checked, mut mismatches, mut forced_wrong) = (0usize, 0usize, 0usize);
    for batch in 0..BATCHES {
        let mut data: Vec<f32> = Vec::with_capacity(N * V);
        for _ in 0..N {
            let start = data.len();
            data.extend((0..V).map(|_| rng.uniform() * 4.0));
            for _ in 0..20 {
                let at = start + rng.below(V);
                data[at] = 9.0 + 4.0 * rng.uniform();
            }
        }
        let params: Vec<SamplingParams> = (0..N)
            .map(|i| SamplingParams {
                temperature: [0.0, 0.8, 1.0, 0.0, 1.2][i % 5],
                top_k: [0, 0, 20, 0, 0][(i + batch) % 5],
                top_p: [1.0, 0.9, 1.0, 1.0, 0.95][(i / 2 + batch) % 5],
                repetition_penalty: if i % 4 == 1 { 1.3 } else { 1.0 },
                seed: rng.next_u64(),
                ..SamplingParams::default()
            })
            .collect();
        let histories: Vec<Vec<u32>> = (0..N)
            .map(|_| (0..30).map(|_| rng.below(V) as u32).collect())
            .collect();
        // Masks by kind: none, about a third of the vocabulary, one token, all but the row's
        // strong tokens, about 150 tokens.
        let mut single = vec![None; N];
        let masks: Vec<Option<TokenMask>> = (0..N)
            .map(|i| {
                let row = &data[i * V..(i + 1) * V];
                match (i + batch) % 5 {
                    0 => None,
                    1 => Some(TokenMask::from_words(
                        (0..V.div_ceil(32))
                            .map(|_| (rng.next_u64() & rng.next_u64()) as u32)
                            .collect(),
                        V,
                    )),
                    2 => {
                        let t = match rng.below(3) {
                            0 => V as u32 - 1,
                            _ => rng.below(V) as u32,
                        };
                        single[i] = Some(t);
                        Some(TokenMask::allowing(V, [t]))
                    }
                    3 => Some(TokenMask::allowing(
                        V,
                        (0..V as u32).filter(|&t| row[t as usize] < 9.0),
                    )),
                    _ => Some(TokenMask::allowing(
                        V,
                        (0..150).map(|_| rng.below(V) as u32),
                    )),
                }
            })
            .collect();
        let rows: Vec<SampleRow<'_>> = (0..N)
            .map(|i| SampleRow {
                logits_row: i,
                params: &params[i],
                all_token_ids: &histories[i],
                num_prompt_tokens: 20,
                seq: None,
            })
            .collect();
        let refs: Vec<Option<&TokenMask>> = masks.iter().map(Option::as_ref).collect();
        let x_d = cuda.tensor_from_f32(&[N, V], &data, DType::F32)?;
        let got = cuda.sample_with_masks(&x_d, &rows, &refs)?;
        for (i, r) in rows.iter().enumerate() {
            let want = sample_row_with(&data[i * V..(i + 1) * V], r, refs[i]);
            if got[i] != want {
                mismatches += 1;
                if mismatches <= 10 {
                    report.line(format!(
                        "grammar mask mismatch: batch {batch} row {i} kind {} T {}: cuda {} cpu {}",
                        (i + batch) % 5,
                        r.params.temperature,
                        got[i].token_id,
                        want.token_id
                    ));
                }
            }
            if let Some(t) = single[i]
                && got[i].token_id != t
            {
                forced_wrong += 1;
            }
            if let Some(m) = refs[i]
                && !m.allows(got[i].token_id)
            {
                forced_wrong += 1;
            }
        }
        rows_checked += N;
    }
    report.line(format!(
        "{:<16} {:<60} {} mismatches",
        "sample masks",
        format!("{rows_checked} rows × {V}, {BATCHES} batches, 4 mask kinds + free rows"),
        mismatches
    ));
    report.record(json!({
        "op": "sample masks",
        "rows": rows_checked,
        "mismatches": mismatches,
        "outside_mask": forced_wrong,
        "pass": mismatches == 0 && forced_wrong == 0,
    }));
    if mismatches > 0 || forced_wrong > 0 {
        report.fail(format!(
            "sample masks: {mismatches} of {rows_checked} rows drew another token than the CPU, {forced_wrong} drew a token their mask forbids"
        ));
    }
    Ok(())
}
