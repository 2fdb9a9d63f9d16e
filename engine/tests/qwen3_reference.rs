//! The CPU reference backend against transformers: the fixtures in `tests/fixtures/` hold tiny
//! random Qwen3 checkpoints and what transformers 5 computed for them in float32
//! (`tests/fixtures/make_fixtures.py`), and Qwen3-MoE ones, bf16 and FP8
//! (`tests/fixtures/make_moe_fixtures.py`). `qwen3-moe-fp8` is the CPU stand-in (quantized by
//! the script with transformers' arithmetic, partial edge blocks included); `qwen3-moe-fp8-hf`
//! was quantized and dequantized by transformers' own FineGrainedFP8 code. `qwen3-nvfp4`
//! (ModelOpt) and `qwen3-moe-nvfp4-ct` (compressed-tensors) are NVFP4, quantized and
//! dequantized by the formats' own packages (`tests/fixtures/make_nvfp4_fixtures.py`).

use metrale_engine::backend::{Backend, BatchInputs, CpuBackend, SeqChunk};
use metrale_engine::loader::{LoadFormat, ModelDir, Weights};
use metrale_engine::models::Model;
use metrale_engine::models::qwen3::Qwen3;
use metrale_engine::score::{score, top_k_of};
mod reference_support;

use reference_support::{Reference, Sequence, fixtures, model_dir, reference};

const FIXTURES: [&str; 9] = [
    "qwen3-gqa-tied",
    "qwen3-mha-untied",
    "qwen3-gqa4-yarn",
    "qwen3-moe-mixed",
    "qwen3-moe-step2",
    "qwen3-moe-fp8",
    "qwen3-moe-fp8-hf",
    "qwen3-nvfp4",
    "qwen3-moe-nvfp4-ct",
];
const TOLERANCE: f32 = 1e-3;

fn load(name: &str) -> (Qwen3<CpuBackend>, Reference) {
    let dir = ModelDir::open(&model_dir(name)).expect("fixture checkpoint");
    let cfg = dir.config().expect("config");
    let weights = Weights::open(&dir.root, LoadFormat::Auto).expect("weights");
    let model = Qwen3::load(&CpuBackend::default(), &cfg, &weights).expect("load");
    (model, reference(name))
}

fn assert_close(what: &str, got: f32, want: f32) {
    assert!(
        (got - want).abs() <= TOLERANCE,
        "{what}: got {got}, transformers {want}"
    );
}

#[test]
fn every_position_matches_transformers() {
    for name in FIXTURES {
        let (model, reference) = load(name);
        let mut max_diff = 0f32;
        for (s, seq) in reference.sequences.iter().enumerate() {
            // Odd chunk size: prefill in several pieces through the paged cache.
            let got = score(&CpuBackend::default(), &model, &seq.tokens, 5, 7).expect("score");
            assert_eq!(got.len(), seq.tokens.len());
            for (p, want) in seq.next_token_logprobs.iter().enumerate() {
                let lp = got[p].logprob.expect("has next");
                max_diff = max_diff.max((lp - want).abs());
                assert_close(&format!("{name} seq {s} pos {p}"), lp, *want);
            }
            for (p, want) in seq.top5.iter().enumerate() {
                assert_eq!(got[p].top[0].0, want[0].0, "{name} seq {s} pos {p}: top-1");
                for (i, (&(_, lp), &(_, want_lp))) in got[p].top.iter().zip(want).enumerate() {
                    assert_close(&format!("{name} seq {s} pos {p} top {i}"), lp, want_lp);
                }
            }
        }
        eprintln!("{name}: max |log-prob - transformers| = {max_diff:.2e}");
    }
}

/// Step one token at a time through the cache, as serving decodes.
#[test]
fn greedy_continuation_is_identical() {
    for name in FIXTURES {
        let (model, reference) = load(name);
        let g = &reference.greedy;
        let bs = 4; // small blocks: the continuation crosses several
        let total = g.prompt.len() + g.continuation.len();
        let table: Vec<u32> = (1..=total.div_ceil(bs) as u32).rev().collect(); // non-contiguous order
        let mut kv = model
            .new_kv_storage(&CpuBackend::default(), table.len() + 1, bs)
            .expect("kv");
        let mut tokens = g.prompt.clone();
        let mut start = 0;
        for _ in 0..g.continuation.len() {
            let chunk = &tokens[start..];
            let host = BatchInputs::build(
                bs,
                &[SeqChunk {
                    tokens: chunk,
                    start_pos: start,
                    block_table: &table,
                    logits_rows: vec![chunk.len() - 1],
                }],
            );
            let logits = model
                .forward(&CpuBackend::default(), &host, &host.clone(), &mut kv)
                .expect("forward");
            let row = CpuBackend::default().to_host(&logits).expect("host");
            start = tokens.len();
            tokens.push(top_k_of(&row, 1)[0].0);
        }
        assert_eq!(
            &tokens[g.prompt.len()..],
            &g.continuation[..],
            "{name}: greedy continuation"
        );
    }
}

/// Several sequences of different lengths in one forward give the numbers each gives alone
/// (for MoE: tokens of all sequences grouped by expert together).
#[test]
fn batched_equals_one_at_a_time() {
    for name in ["qwen3-gqa-tied", "qwen3-moe-mixed"] {
        batched_equals_one_at_a_time_on(name);
    }
}

fn batched_equals_one_at_a_time_on(name: &str) {
    let (model, reference) = load(name);
    let bs = 8;
    let seqs: Vec<&Sequence> = reference.sequences.iter().collect();
    let mut tables = Vec::new();
    let mut next_block = 1u32;
    for s in &seqs {
        let n = s.tokens.len().div_ceil(bs) as u32;
        tables.push((next_block..next_block + n).collect::<Vec<u32>>());
        next_block += n;
    }
    let chunks: Vec<SeqChunk<'_>> = seqs
        .iter()
        .zip(&tables)
        .map(|(s, t)| SeqChunk {
            tokens: &s.tokens,
            start_pos: 0,
            block_table: t,
            logits_rows: (0..s.tokens.len()).collect(),
        })
        .collect();
    let host = BatchInputs::build(bs, &chunks);
    let mut kv = model
        .new_kv_storage(&CpuBackend::default(), next_block as usize, bs)
        .expect("kv");
    let mut logits = model
        .forward(&CpuBackend::default(), &host, &host.clone(), &mut kv)
        .expect("forward");
    CpuBackend::default()
        .log_softmax(&mut logits)
        .expect("log_softmax");
    let all = CpuBackend::default().to_host(&logits).expect("host");
    let vocab = model.vocab_size();
    let mut row = 0;
    for (i, s) in seqs.iter().enumerate() {
        let alone = score(&CpuBackend::default(), &model, &s.tokens, 1, 1024).expect("alone");
        for (p, a) in alone.iter().enumerate() {
            if let Some(t) = a.next_token {
                let batched = all[(row + p) * vocab + t as usize];
                let diff = (batched - a.logprob.expect("has next")).abs();
                assert!(
                    diff < 1e-5,
                    "seq {i} pos {p}: batched {batched} vs alone {:?}",
                    a.logprob
                );
            }
        }
        row += s.tokens.len();
    }
}

/// A prefix computed once and reused through the KV cache gives the numbers of recomputing it.
#[test]
fn cached_prefix_equals_recompute() {
    let (model, reference) = load("qwen3-gqa4-yarn");
    let seq = reference
        .sequences
        .iter()
        .max_by_key(|s| s.tokens.len())
        .expect("sequences");
    let bs = 16;
    let n = seq.tokens.len();
    let prefix = 4 * bs; // whole blocks, as the prefix cache shares them
    let table: Vec<u32> = (1..=n.div_ceil(bs) as u32).collect();
    let mut kv = model
        .new_kv_storage(&CpuBackend::default(), table.len() + 1, bs)
        .expect("kv");
    let first = BatchInputs::build(
        bs,
        &[SeqChunk {
            tokens: &seq.tokens[..prefix],
            start_pos: 0,
            block_table: &table,
            logits_rows: vec![],
        }],
    );
    model
        .forward(&CpuBackend::default(), &first, &first.clone(), &mut kv)
        .expect("prefix");
    // A second request with the same prefix reuses the blocks and computes only its suffix.
    let rest = BatchInputs::build(
        bs,
        &[SeqChunk {
            tokens: &seq.tokens[prefix..],
            start_pos: prefix,
            block_table: &table,
            logits_rows: (0..n - prefix).collect(),
        }],
    );
    let mut logits = model
        .forward(&CpuBackend::default(), &rest, &rest.clone(), &mut kv)
        .expect("suffix");
    CpuBackend::default()
        .log_softmax(&mut logits)
        .expect("log_softmax");
    let got = CpuBackend::default().to_host(&logits).expect("host");
    let full = score(&CpuBackend::default(), &model, &seq.tokens, 1, 1024).expect("full");
    let vocab = model.vocab_size();
    for p in prefix..n - 1 {
        let t = seq.tokens[p + 1] as usize;
        let cached = got[(p - prefix) * vocab + t];
        let recomputed = full[p].logprob.expect("has next");
        assert!(
            (cached - recomputed).abs() < 1e-5,
            "pos {p}: cached {cached} vs recomputed {recomputed}"
        );
        assert_close(
            &format!("pos {p} vs transformers"),
            cached,
            seq.next_token_logprobs[p],
        );
    }
}

#[test]
fn missing_and_misshaped_tensors_are_named() {
    let src = fixtures().join("models/qwen3-mha-untied");
    let tmp = std::env::temp_dir().join(format!("metrale-misshaped-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).expect("tmp");
    for f in ["model.safetensors", "tokenizer.json"] {
        std::fs::copy(src.join(f), tmp.join(f)).expect("copy");
    }
    let cfg_text = std::fs::read_to_string(src.join("config.json")).expect("config");
    // A config that disagrees with the weights: the error names the tensor and both shapes.
    std::fs::write(
        tmp.join("config.json"),
        cfg_text.replace("\"intermediate_size\": 192", "\"intermediate_size\": 200"),
    )
    .expect("write");
    let dir = ModelDir::open(&tmp).expect("dir");
    let weights = Weights::open(&tmp, LoadFormat::Auto).expect("weights");
    let err = Qwen3::load(
        &CpuBackend::default(),
        &dir.config().expect("cfg"),
        &weights,
    )
    .err()
    .expect("shape mismatch")
    .to_string();
    assert!(
        err.contains("model.layers.0.mlp.gate_proj.weight")
            && err.contains("[200, 96]")
            && err.contains("[192, 96]"),
        "{err}"
    );
    // A config with more layers than the weights: the missing tensor is named.
    std::fs::write(
        tmp.join("config.json"),
        cfg_text.replace("\"num_hidden_layers\": 2", "\"num_hidden_layers\": 3"),
    )
    .expect("write");
    let err = Qwen3::load(
        &CpuBackend::default(),
        &dir.config().expect("cfg"),
        &weights,
    )
    .err()
    .expect("missing")
    .to_string();
    assert!(
        err.contains("model.layers.2.") && err.contains("missing"),
        "{err}"
    );
    std::fs::remove_dir_all(&tmp).ok();
}

#[test]
fn dummy_weights_need_only_the_config() {
    for name in ["qwen3-gqa-tied", "qwen3-moe-mixed", "qwen3-moe-fp8"] {
        let dir = ModelDir::open(&fixtures().join("models").join(name)).expect("dir");
        let weights = Weights::open(&dir.root, LoadFormat::Dummy).expect("dummy");
        let model = Qwen3::load(
            &CpuBackend::default(),
            &dir.config().expect("cfg"),
            &weights,
        )
        .expect("load");
        let got = score(&CpuBackend::default(), &model, &[1, 2, 3, 4], 3, 512).expect("score");
        assert!(
            got.iter()
                .all(|p| p.top.iter().all(|(_, lp)| lp.is_finite() && *lp <= 0.0)),
            "{name}"
        );
    }
}
