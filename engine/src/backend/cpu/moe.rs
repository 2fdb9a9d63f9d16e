//! Mixture-of-experts on the CPU: route every token (softmax over the experts in f32, top-k,
//! optionally renormalised), group the tokens by expert, and run one GEMM pair per expert that
//! has any: gather its rows, gate|up, silu·mul, down, and add the rows back weighted. A decode
//! step therefore reads only the chosen experts' weights. Nemotron-H's experts are not gated
//! (up, relu², down: [`fused_moe_relu2`]); the same loop runs them.

use super::{CpuTensor, matmul, silu_mul_rows};
use crate::backend::{ClampedExperts, Result, SigmoidRouting, moe_dims};

/// Each token's `top_k` experts, best first, and their routing weights (`[T, k]` each).
pub(super) fn route(
    logits: &[f32],
    num_experts: usize,
    top_k: usize,
    norm_topk_prob: bool,
) -> (Vec<usize>, Vec<f32>) {
    let tokens = logits.len() / num_experts.max(1);
    let mut ids = Vec::with_capacity(tokens * top_k);
    let mut weights = Vec::with_capacity(tokens * top_k);
    let mut order: Vec<usize> = Vec::with_capacity(num_experts);
    for row in logits.chunks_exact(num_experts) {
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let exp: Vec<f32> = row.iter().map(|v| (v - max).exp()).collect();
        let sum: f32 = exp.iter().sum();
        order.clear();
        order.extend(0..num_experts);
        // Highest probability first, ranked by the logits (exp is monotonic, and comparing the
        // logits' bits leaves no tie to exp's rounding, so every backend picks these experts);
        // equal logits by expert index.
        order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
        let chosen = &order[..top_k];
        let probs: Vec<f32> = chosen.iter().map(|&e| exp[e] / sum).collect();
        let total: f32 = probs.iter().sum();
        ids.extend_from_slice(chosen);
        weights.extend(
            probs
                .iter()
                .map(|p| if norm_topk_prob { p / total } else { *p }),
        );
    }
    (ids, weights)
}

#[allow(clippy::too_many_arguments)]
pub(super) fn fused_moe(
    out: &mut CpuTensor,
    x: &CpuTensor,
    router_logits: &CpuTensor,
    gate_up: &CpuTensor,
    down: &CpuTensor,
    top_k: usize,
    norm_topk_prob: bool,
) -> Result<()> {
    let dims = moe_dims(
        &out.shape,
        &x.shape,
        &router_logits.shape,
        (&gate_up.shape, &down.shape),
        top_k,
        usize::MAX,
    )?;
    let routed = route(&router_logits.data, dims.2, top_k, norm_topk_prob);
    swiglu_grouped(out, x, routed, (gate_up, down), dims, top_k);
    Ok(())
}

/// [`fused_moe`] with only experts `first..first + e` here (`Backend::fused_moe_slice`):
/// routed over all the logits' experts, the others' shares dropped.
pub(super) fn fused_moe_slice(
    out: &mut CpuTensor,
    x: &CpuTensor,
    router_logits: &CpuTensor,
    (gate_up, down): (&CpuTensor, &CpuTensor),
    (top_k, norm_topk_prob): (usize, bool),
    first: usize,
) -> Result<()> {
    let all = router_logits.shape.get(1).copied().unwrap_or(0);
    let here = gate_up.shape.first().copied().unwrap_or(0);
    if first + here > all || top_k == 0 || top_k > all {
        return Err(crate::backend::BackendError::Shape {
            op: "fused_moe_slice",
            message: format!("experts {first}..{} of {all}, top_k {top_k}", first + here),
        });
    }
    // The shapes as fused_moe sees them: the local experts against their own logits' width.
    let local_logits = [router_logits.shape[0], here];
    let dims = moe_dims(
        &out.shape,
        &x.shape,
        &local_logits,
        (&gate_up.shape, &down.shape),
        top_k.min(here).max(1),
        usize::MAX,
    )?;
    let (ids, weights) = route(&router_logits.data, all, top_k, norm_topk_prob);
    // Another rank's expert becomes `here`, which `grouped` skips.
    let ids = ids
        .into_iter()
        .map(|id| match id.checked_sub(first) {
            Some(local) if local < here => local,
            _ => here,
        })
        .collect();
    swiglu_grouped(out, x, (ids, weights), (gate_up, down), dims, top_k);
    Ok(())
}

/// [`grouped`] with SwiGLU experts and no biases (Qwen3-MoE's, MiniMax-M2's), given the
/// routing (`[T, k]` ids and weights).
fn swiglu_grouped(
    out: &mut CpuTensor,
    x: &CpuTensor,
    (ids, weights): (Vec<usize>, Vec<f32>),
    (gate_up, down): (&CpuTensor, &CpuTensor),
    dims: (usize, usize, usize, usize),
    top_k: usize,
) {
    let experts = Experts {
        gate_up: &gate_up.data,
        down: &down.data,
        fan: 2,
        biases: None,
        act: &|out, gu, i| silu_mul_rows(out, gu, i),
    };
    grouped(out, x, (&ids, &weights), &experts, dims, top_k);
}

/// Each token's experts by sigmoid score (`Backend::fused_moe_sigmoid`): the `top_k` of
/// highest `sigmoid(logit) + bias` (ties to the lower index) among the experts of the token's
/// `topk_group` best groups (a group's score the sum of its two highest; ties to the lower
/// group; every expert when there is one group), weighted by their sigmoid scores,
/// renormalised when asked, times the scaling (`[T, k]` each). transformers'
/// `DeepseekV3TopkRouter` masks the other groups' experts to −inf before its top-k, as here.
pub(super) fn route_sigmoid(
    logits: &[f32],
    bias: &[f32],
    routing: SigmoidRouting,
) -> (Vec<usize>, Vec<f32>) {
    let (e, k) = (bias.len(), routing.top_k);
    let (groups, keep) = (routing.n_group.max(1), routing.topk_group);
    let size = e / groups;
    let mut ids = Vec::with_capacity(logits.len() / e.max(1) * k);
    let mut weights = Vec::with_capacity(ids.capacity());
    let mut order: Vec<usize> = Vec::with_capacity(e);
    let mut group_order: Vec<usize> = Vec::with_capacity(groups);
    for row in logits.chunks_exact(e) {
        let scores: Vec<f32> = row.iter().map(|v| 1.0 / (1.0 + (-v).exp())).collect();
        let mut choice: Vec<f32> = scores.iter().zip(bias).map(|(s, b)| s + b).collect();
        if groups > 1 {
            let group_score: Vec<f32> = choice
                .chunks_exact(size)
                .map(|g| {
                    let (mut a, mut b) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
                    for &v in g {
                        if v > a {
                            (a, b) = (v, a);
                        } else if v > b {
                            b = v;
                        }
                    }
                    a + b
                })
                .collect();
            group_order.clear();
            group_order.extend(0..groups);
            group_order.sort_by(|&a, &b| group_score[b].total_cmp(&group_score[a]).then(a.cmp(&b)));
            for &dropped in &group_order[keep..] {
                choice[dropped * size..(dropped + 1) * size].fill(f32::NEG_INFINITY);
            }
        }
        order.clear();
        order.extend(0..e);
        order.sort_by(|&a, &b| choice[b].total_cmp(&choice[a]).then(a.cmp(&b)));
        let chosen = &order[..k];
        let total: f32 = chosen.iter().map(|&x| scores[x]).sum();
        ids.extend_from_slice(chosen);
        weights.extend(chosen.iter().map(|&x| {
            let w = if routing.norm_topk_prob {
                scores[x] / total
            } else {
                scores[x]
            };
            w * routing.scaling
        }));
    }
    (ids, weights)
}

/// MiniMax-M2's and DeepSeek-V3's experts: SwiGLU experts as [`fused_moe`]'s, routed by
/// [`route_sigmoid`].
pub(super) fn fused_moe_sigmoid(
    out: &mut CpuTensor,
    x: &CpuTensor,
    router_logits: &CpuTensor,
    bias: &CpuTensor,
    (gate_up, down): (&CpuTensor, &CpuTensor),
    routing: SigmoidRouting,
) -> Result<()> {
    let dims = moe_dims(
        &out.shape,
        &x.shape,
        &router_logits.shape,
        (&gate_up.shape, &down.shape),
        routing.top_k,
        usize::MAX,
    )?;
    check_sigmoid_routing("fused_moe_sigmoid", bias, dims.2, routing)?;
    let routed = route_sigmoid(&router_logits.data, &bias.data, routing);
    swiglu_grouped(out, x, routed, (gate_up, down), dims, routing.top_k);
    Ok(())
}

/// That `bias` has one entry an expert and that `routing`'s groups fit the `e` experts: groups
/// that divide them, at least two experts a group (a group's score is its top two), and
/// `top_k` within the kept groups' experts.
fn check_sigmoid_routing(
    op: &'static str,
    bias: &CpuTensor,
    e: usize,
    routing: SigmoidRouting,
) -> Result<()> {
    if bias.data.len() != e {
        return Err(super::shape_err(
            op,
            format!("bias {:?} (want [{e}])", bias.shape),
        ));
    }
    let (g, kg) = (routing.n_group, routing.topk_group);
    let grouped_ok = g == 1
        || (g > 1
            && e.is_multiple_of(g)
            && e / g >= 2
            && (1..=g).contains(&kg)
            && routing.top_k <= kg * (e / g));
    if !grouped_ok {
        return Err(super::shape_err(
            op,
            format!(
                "{g} groups, {kg} kept, top {} of {e} experts (want groups that divide the \
                 experts, at least 2 experts a group, 1 <= kept <= groups and top_k within the \
                 kept groups' experts)",
                routing.top_k
            ),
        ));
    }
    Ok(())
}

/// Nemotron-H's routed experts (`HybridOps::fused_moe_relu2`): routed as
/// [`fused_moe_sigmoid`], each expert `down[e] · relu(up[e] · x)²` with `up` `[E, I, H]` and
/// `down` `[E, H, I]` (not gated: transformers' `NemotronHExperts`).
pub(super) fn fused_moe_relu2(
    out: &mut CpuTensor,
    x: &CpuTensor,
    router_logits: &CpuTensor,
    bias: &CpuTensor,
    (up, down): (&CpuTensor, &CpuTensor),
    routing: SigmoidRouting,
) -> Result<()> {
    let (t, h, e, i) = crate::backend::moe_relu2_dims(
        &out.shape,
        &x.shape,
        &router_logits.shape,
        (&up.shape, &down.shape),
        routing.top_k,
        usize::MAX,
    )?;
    check_sigmoid_routing("fused_moe_relu2", bias, e, routing)?;
    let (ids, weights) = route_sigmoid(&router_logits.data, &bias.data, routing);
    let act = |out: &mut [f32], up: &[f32], _: usize| {
        for (o, &u) in out.iter_mut().zip(up) {
            let r = u.max(0.0);
            *o = r * r;
        }
    };
    let experts = Experts {
        gate_up: &up.data,
        down: &down.data,
        fan: 1,
        biases: None,
        act: &act,
    };
    grouped(
        out,
        x,
        (&ids, &weights),
        &experts,
        (t, h, e, i),
        routing.top_k,
    );
    Ok(())
}

/// gpt-oss's experts (`Backend::fused_moe_clamped`): routed by the top-k logits with a softmax
/// over those k (the renormalised top-k of the full softmax, which is the same), biases after
/// both products, the clamped SwiGLU between them.
pub(super) fn fused_moe_clamped(
    out: &mut CpuTensor,
    x: &CpuTensor,
    router_logits: &CpuTensor,
    ex: &ClampedExperts<'_, CpuTensor>,
    top_k: usize,
) -> Result<()> {
    let dims = moe_dims(
        &out.shape,
        &x.shape,
        &router_logits.shape,
        (&ex.gate_up.shape, &ex.down.shape),
        top_k,
        usize::MAX,
    )?;
    let (_, h, e, i) = dims;
    if ex.gate_up_bias.shape != [e, 2 * i] || ex.down_bias.shape != [e, h] {
        return Err(super::shape_err(
            "fused_moe_clamped",
            format!(
                "gate_up_bias {:?}, down_bias {:?} (want [{e}, {}] and [{e}, {h}])",
                ex.gate_up_bias.shape,
                ex.down_bias.shape,
                2 * i
            ),
        ));
    }
    let (alpha, limit) = (ex.alpha, ex.limit);
    let act = move |out: &mut [f32], gu: &[f32], i: usize| {
        for (o, row) in out.chunks_mut(i).zip(gu.chunks(2 * i)) {
            let (g, u) = row.split_at(i);
            for ((o, &g), &u) in o.iter_mut().zip(g).zip(u) {
                *o = clamped_swiglu(g, u, alpha, limit);
            }
        }
    };
    let (ids, weights) = route(&router_logits.data, e, top_k, true);
    let experts = Experts {
        gate_up: &ex.gate_up.data,
        down: &ex.down.data,
        fan: 2,
        biases: Some((&ex.gate_up_bias.data, &ex.down_bias.data)),
        act: &act,
    };
    grouped(out, x, (&ids, &weights), &experts, dims, top_k);
    Ok(())
}

/// transformers' `GptOssExperts._apply_gate` for one gate `g` and up `u`:
/// `(clamp(u, −limit, limit) + 1) · g' · sigmoid(alpha · g')`, `g' = min(g, limit)`.
pub(super) fn clamped_swiglu(g: f32, u: f32, alpha: f32, limit: f32) -> f32 {
    let g = g.min(limit);
    let u = u.clamp(-limit, limit);
    (u + 1.0) * (g / (1.0 + (-g * alpha).exp()))
}

/// `act(out [n, I], gate_up [n, fan·I], I)`: what runs between an expert's two products.
type Activation = dyn Fn(&mut [f32], &[f32], usize) + Sync;

/// The expert weights and what runs between their two products.
struct Experts<'a> {
    gate_up: &'a [f32], // [E, fan·I, H]
    down: &'a [f32],    // [E, H, I]
    /// Rows of the first product per intermediate channel: 2 for gate|up (SwiGLU), 1 for a
    /// plain up (Nemotron-H's relu² experts).
    fan: usize,
    /// `[E, 2·I]` and `[E, H]`, added after each product (gpt-oss).
    biases: Option<(&'a [f32], &'a [f32])>,
    act: &'a Activation,
}

/// Run every expert over the tokens routed to it and sum the weighted outputs into `out`.
fn grouped(
    out: &mut CpuTensor,
    x: &CpuTensor,
    (ids, weights): (&[usize], &[f32]),
    ex: &Experts<'_>,
    (_, h, e, i): (usize, usize, usize, usize),
    top_k: usize,
) {
    // The (token, weight) pairs each expert serves, tokens in order.
    let mut served: Vec<Vec<(usize, f32)>> = vec![Vec::new(); e];
    for (slot, (&expert, &w)) in ids.iter().zip(weights).enumerate() {
        // An id past the experts here is another rank's (expert parallelism).
        if let Some(rows) = served.get_mut(expert) {
            rows.push((slot / top_k, w));
        }
    }
    out.data.fill(0.0);
    let f = ex.fan * i; // the first product's width
    for (expert, rows) in served.iter().enumerate() {
        let n = rows.len();
        if n == 0 {
            continue;
        }
        let mut xs = Vec::with_capacity(n * h); // [n, H]
        for &(tok, _) in rows {
            xs.extend_from_slice(&x.data[tok * h..(tok + 1) * h]);
        }
        let w13 = &ex.gate_up[expert * f * h..(expert + 1) * f * h]; // [fan·I, H]
        let w2 = &ex.down[expert * h * i..(expert + 1) * h * i]; // [H, I]
        let mut gu = vec![0f32; n * f]; // [n, fan·I]
        matmul::matmul_nt(&mut gu, &xs, w13, n, f, h);
        if let Some((b13, _)) = ex.biases {
            add_rows(&mut gu, &b13[expert * f..(expert + 1) * f]);
        }
        let mut act = vec![0f32; n * i]; // [n, I]
        (ex.act)(&mut act, &gu, i);
        let mut ys = vec![0f32; n * h]; // [n, H]
        matmul::matmul_nt(&mut ys, &act, w2, n, h, i);
        if let Some((_, b2)) = ex.biases {
            add_rows(&mut ys, &b2[expert * h..(expert + 1) * h]);
        }
        for (&(tok, w), y) in rows.iter().zip(ys.chunks_exact(h)) {
            for (o, v) in out.data[tok * h..(tok + 1) * h].iter_mut().zip(y) {
                *o += w * v;
            }
        }
    }
}

/// `rows[r, :] += bias` for every row.
fn add_rows(rows: &mut [f32], bias: &[f32]) {
    for row in rows.chunks_mut(bias.len()) {
        row.iter_mut().zip(bias).for_each(|(v, b)| *v += b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routing_picks_the_top_k_and_renormalises_when_asked() {
        // Probabilities of softmax([0, ln 2, ln 4, ln 1]) = [1, 2, 4, 1] / 8.
        let logits = [0.0, 2f32.ln(), 4f32.ln(), 0.0];
        let (ids, w) = route(&logits, 4, 2, false);
        assert_eq!(ids, vec![2, 1]);
        assert!(
            (w[0] - 0.5).abs() < 1e-6 && (w[1] - 0.25).abs() < 1e-6,
            "{w:?}"
        );
        let (ids, w) = route(&logits, 4, 3, true);
        assert_eq!(ids, vec![2, 1, 0], "ties go to the lower expert");
        assert!((w.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert!((w[0] - 4.0 / 7.0).abs() < 1e-6, "{w:?}");
    }

    #[test]
    fn sigmoid_routing_chooses_by_the_biased_score_and_weights_by_the_plain_one() {
        // Scores sigmoid([2, 0, 1, -1]) ≈ [0.881, 0.5, 0.731, 0.269]; the bias lifts expert 3
        // over expert 2, so the choice is 0 then 3, weighted by their unbiased scores.
        let logits = [2.0, 0.0, 1.0, -1.0];
        let bias = [0.0, 0.0, 0.0, 0.5];
        let routing = SigmoidRouting::ungrouped(2, true, 1.0);
        let (ids, w) = route_sigmoid(&logits, &bias, routing);
        assert_eq!(ids, vec![0, 3]);
        let (s0, s3) = (1.0 / (1.0 + (-2f32).exp()), 1.0 / (1.0 + 1f32.exp()));
        assert!((w[0] - s0 / (s0 + s3)).abs() < 1e-6, "{w:?}");
        let raw = SigmoidRouting {
            norm_topk_prob: false,
            scaling: 2.5,
            ..routing
        };
        let (_, w) = route_sigmoid(&logits, &bias, raw);
        assert!((w[1] - 2.5 * s3).abs() < 1e-6, "{w:?}");
        // Equal biased scores go to the lower expert.
        let (ids, _) = route_sigmoid(&[0.0; 4], &[0.0; 4], routing);
        assert_eq!(ids, vec![0, 1]);
    }

    /// DeepSeek-V3's groups: a token picks its experts only inside its best groups, a group
    /// scored by the sum of its two best biased scores (not its single best).
    #[test]
    fn group_limited_routing_keeps_the_best_groups_by_their_top_two() {
        // Four groups of two. Group 0 holds the single best expert (3.0) but a poor second
        // (-3.0); group 1's pair (1.0, 1.0) and group 2's (0.9, 0.9) sum higher.
        let logits = [3.0, -3.0, 1.0, 1.0, 0.9, 0.9, -1.0, -1.0];
        let bias = [0.0; 8];
        let grouped = SigmoidRouting {
            n_group: 4,
            topk_group: 2,
            ..SigmoidRouting::ungrouped(3, true, 2.5)
        };
        let (ids, w) = route_sigmoid(&logits, &bias, grouped);
        assert_eq!(ids, vec![2, 3, 4], "expert 0 is outside the kept groups");
        let s = |x: f32| 1.0 / (1.0 + (-x).exp());
        let total = 2.0 * s(1.0) + s(0.9);
        assert!((w[2] - 2.5 * s(0.9) / total).abs() < 1e-6, "{w:?}");
        // Without groups expert 0 leads.
        let (ids, _) = route_sigmoid(&logits, &bias, SigmoidRouting::ungrouped(3, true, 1.0));
        assert_eq!(ids, vec![0, 2, 3]);
        // The bias moves the groups too: lifting expert 7 lifts group 3 over group 2.
        let mut lifted = bias;
        lifted[7] = 1.0;
        let (ids, _) = route_sigmoid(&logits, &lifted, grouped);
        assert_eq!(ids, vec![7, 2, 3]);
    }

    /// Nemotron-H's ungated relu² experts against a token-by-token loop: the routed share
    /// `Σ w · down(relu(up · x)²)` over each token's sigmoid-routed experts.
    #[test]
    fn relu2_experts_equal_a_plain_loop() {
        let (t, h, i, e) = (5, 6, 4, 8);
        let mut s = 11u32;
        let mut rnd = |n: usize| -> Vec<f32> {
            (0..n)
                .map(|_| {
                    s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                    (s >> 8) as f32 / (1 << 24) as f32 - 0.5
                })
                .collect()
        };
        let x = CpuTensor::new(vec![t, h], rnd(t * h));
        let logits = CpuTensor::new(vec![t, e], rnd(t * e));
        let bias = CpuTensor::new(vec![e], rnd(e));
        let up = CpuTensor::new(vec![e, i, h], rnd(e * i * h));
        let down = CpuTensor::new(vec![e, h, i], rnd(e * h * i));
        let routing = SigmoidRouting {
            n_group: 2,
            topk_group: 1,
            ..SigmoidRouting::ungrouped(2, true, 2.5)
        };
        let mut out = CpuTensor::new(vec![t, h], vec![f32::NAN; t * h]);
        fused_moe_relu2(&mut out, &x, &logits, &bias, (&up, &down), routing).expect("moe");
        let (ids, weights) = route_sigmoid(&logits.data, &bias.data, routing);
        for tok in 0..t {
            let xr = &x.data[tok * h..(tok + 1) * h];
            let mut want = vec![0f32; h];
            for slot in tok * 2..(tok + 1) * 2 {
                let ex = ids[slot];
                let act: Vec<f32> = (0..i)
                    .map(|r| {
                        let row = &up.data[(ex * i + r) * h..][..h];
                        let u: f32 = row.iter().zip(xr).map(|(a, b)| a * b).sum();
                        u.max(0.0).powi(2)
                    })
                    .collect();
                for (c, w) in want.iter_mut().enumerate() {
                    let d = &down.data[(ex * h + c) * i..][..i];
                    *w += weights[slot] * d.iter().zip(&act).map(|(a, b)| a * b).sum::<f32>();
                }
            }
            for (c, w) in want.iter().enumerate() {
                let got = out.data[tok * h + c];
                assert!((got - w).abs() < 1e-5, "token {tok} col {c}: {got} vs {w}");
            }
        }
        // An up of the SwiGLU shape is refused, naming the shapes.
        let gated = CpuTensor::new(vec![e, 2 * i, h], vec![0.0; e * 2 * i * h]);
        let err = fused_moe_relu2(&mut out, &x, &logits, &bias, (&gated, &down), routing)
            .expect_err("shape");
        assert!(err.to_string().contains("up [E, I, H]"), "{err}");
    }

    /// The grouped computation against a token-by-token, expert-by-expert loop.
    #[test]
    fn grouped_experts_equal_a_plain_loop() {
        let (t, h, i, e, k) = (7, 6, 5, 4, 2);
        let mut s = 7u32;
        let mut rnd = |n: usize| -> Vec<f32> {
            (0..n)
                .map(|_| {
                    s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                    (s >> 8) as f32 / (1 << 24) as f32 - 0.5
                })
                .collect()
        };
        let x = CpuTensor::new(vec![t, h], rnd(t * h));
        let logits = CpuTensor::new(vec![t, e], rnd(t * e));
        let gate_up = CpuTensor::new(vec![e, 2 * i, h], rnd(e * 2 * i * h));
        let down = CpuTensor::new(vec![e, h, i], rnd(e * h * i));
        let mut out = CpuTensor::new(vec![t, h], vec![f32::NAN; t * h]);
        fused_moe(&mut out, &x, &logits, &gate_up, &down, k, true).expect("moe");
        let (ids, weights) = route(&logits.data, e, k, true);
        for tok in 0..t {
            let mut want = vec![0f32; h];
            for slot in tok * k..(tok + 1) * k {
                let ex = ids[slot];
                let xr = &x.data[tok * h..(tok + 1) * h];
                let act: Vec<f32> = (0..i)
                    .map(|r| {
                        let row = |r: usize| &gate_up.data[(ex * 2 * i + r) * h..][..h];
                        let g: f32 = row(r).iter().zip(xr).map(|(a, b)| a * b).sum();
                        let u: f32 = row(i + r).iter().zip(xr).map(|(a, b)| a * b).sum();
                        g / (1.0 + (-g).exp()) * u
                    })
                    .collect();
                for (c, w) in want.iter_mut().enumerate() {
                    let d = &down.data[(ex * h + c) * i..][..i];
                    *w += weights[slot] * d.iter().zip(&act).map(|(a, b)| a * b).sum::<f32>();
                }
            }
            for (c, w) in want.iter().enumerate() {
                let got = out.data[tok * h + c];
                assert!((got - w).abs() < 1e-5, "token {tok} col {c}: {got} vs {w}");
            }
        }
    }
}
