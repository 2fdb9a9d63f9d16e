//! The shape checks every backend runs on an expert-stack call ([`Backend::fused_moe`] and
//! [`HybridOps::fused_moe_relu2`]), so the CPU reference and CUDA refuse the same shapes with
//! the same sentence.

#[cfg(doc)]
use super::{Backend, HybridOps};
use super::{BackendError, Result};

/// The sizes of a [`Backend::fused_moe`] call, `(tokens, hidden, experts, intermediate)`,
/// once the shapes agree and `1 <= top_k <= min(experts, max_top_k)`; every backend checks
/// the same.
pub(crate) fn moe_dims(
    out: &[usize],
    x: &[usize],
    router_logits: &[usize],
    (gate_up, down): (&[usize], &[usize]),
    top_k: usize,
    max_top_k: usize,
) -> Result<(usize, usize, usize, usize)> {
    let stacks = (("gate_up", 2, gate_up), down);
    expert_dims(
        "fused_moe",
        (out, x, router_logits),
        stacks,
        top_k,
        max_top_k,
    )
}

/// [`moe_dims`] for Nemotron-H's un-gated experts (`HybridOps::fused_moe_relu2`): `up`
/// `[E, I, H]` in place of gate|up's `[E, 2·I, H]`.
pub(crate) fn moe_relu2_dims(
    out: &[usize],
    x: &[usize],
    router_logits: &[usize],
    (up, down): (&[usize], &[usize]),
    top_k: usize,
    max_top_k: usize,
) -> Result<(usize, usize, usize, usize)> {
    let stacks = (("up", 1, up), down);
    expert_dims(
        "fused_moe_relu2",
        (out, x, router_logits),
        stacks,
        top_k,
        max_top_k,
    )
}

/// The check behind [`moe_dims`] and [`moe_relu2_dims`]: the first stack (named `name`) holds
/// `fan` rows of I per expert output.
fn expert_dims(
    op: &'static str,
    (out, x, router_logits): (&[usize], &[usize], &[usize]),
    ((name, fan, first), down): ((&str, usize, &[usize]), &[usize]),
    top_k: usize,
    max_top_k: usize,
) -> Result<(usize, usize, usize, usize)> {
    let last = |s: &[usize]| s.last().copied().unwrap_or(1);
    let rows = |s: &[usize]| s.iter().product::<usize>() / last(s).max(1);
    let (t, h, e, i) = (rows(x), last(x), last(router_logits), last(down));
    let ok = out == x
        && rows(router_logits) == t
        && first == [e, fan * i, h]
        && down == [e, h, i]
        && (1..=e.min(max_top_k)).contains(&top_k);
    if ok {
        return Ok((t, h, e, i));
    }
    let rows_of = if fan == 1 {
        "I".to_string()
    } else {
        format!("{fan}·I")
    };
    let limit = if max_top_k == usize::MAX {
        "E".to_string()
    } else {
        format!("min(E, {max_top_k})")
    };
    Err(BackendError::Shape {
        op,
        message: format!(
            "out {out:?}, x {x:?}, router_logits {router_logits:?}, {name} {first:?}, down \
             {down:?}, top_k {top_k} (want x [T, H], router_logits [T, E], {name} [E, {rows_of}, \
             H], down [E, H, I], out like x, 1 <= top_k <= {limit})"
        ),
    })
}
