//! Re-quantizing parts of a checkpoint while it loads (`met serve --requantize PART=FORMAT`,
//! what a recipe's `[checkpoint.requantize]` asks for): the LM head and the routed experts'
//! projections, from whatever the checkpoint stores them in (bf16, FP8, NVFP4) to NVFP4 with
//! ModelOpt's rounding (`nvfp4/quantize.rs`) or to bf16.
//!
//! [`super::Weights::get`] applies the plan by tensor name, so every model family gets it
//! without code of its own: `lm_head.weight` is the head (a tied head is the embedding,
//! fetched again through [`super::Weights::tied_head`]); the experts are the tensors under
//! `.mlp.experts.` (per expert `gate_proj`/`up_proj`/`down_proj`, or fused `gate_up_proj` /
//! `down_proj`); a shared expert (`mlp.shared_expert.`) is not a routed expert and is never
//! touched.

use std::borrow::Cow;
use std::fmt;

use half::bf16;

use super::LoadError;
use super::host_tensor::{DType, HostData, HostTensor};
use super::nvfp4::quantize::quantize_matrix;
use super::nvfp4::{GROUP, GlobalRule};

/// The format a part is re-quantized to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Bf16,
    Nvfp4,
}

impl Target {
    pub fn name(self) -> &'static str {
        match self {
            Self::Bf16 => "bf16",
            Self::Nvfp4 => "nvfp4",
        }
    }
}

/// What to re-quantize at load; the default re-quantizes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Requantize {
    pub lm_head: Option<Target>,
    /// The routed experts' gate and up projections (fused at load into one matrix).
    pub expert_gate_up: Option<Target>,
    /// The routed experts' down projections.
    pub expert_down: Option<Target>,
}

/// The parts `--requantize` names.
pub const PARTS: [&str; 4] = ["lm_head", "experts", "experts.gate_up", "experts.down"];

impl Requantize {
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// Parse `PART=FORMAT` items (each flag value may hold several, comma-separated): `PART`
    /// one of [`PARTS`] (`experts` is both expert parts), `FORMAT` `nvfp4` or `bf16`. A part
    /// named twice with different formats is an error.
    pub fn parse<'a>(items: impl IntoIterator<Item = &'a str>) -> Result<Self, String> {
        let mut plan = Self::default();
        for item in items.into_iter().flat_map(|i| i.split(',')) {
            let item = item.trim();
            if item.is_empty() {
                continue;
            }
            let (part, format) = item.split_once('=').ok_or_else(|| {
                format!("--requantize {item:?}: expected PART=FORMAT, e.g. lm_head=nvfp4")
            })?;
            let target = match format.trim() {
                "nvfp4" => Target::Nvfp4,
                "bf16" => Target::Bf16,
                other => {
                    return Err(format!(
                        "--requantize {item:?}: format {other:?} is not one met re-quantizes \
                         to (nvfp4, bf16)"
                    ));
                }
            };
            let slots: Vec<&mut Option<Target>> = match part.trim() {
                "lm_head" => vec![&mut plan.lm_head],
                "experts" => vec![&mut plan.expert_gate_up, &mut plan.expert_down],
                "experts.gate_up" => vec![&mut plan.expert_gate_up],
                "experts.down" => vec![&mut plan.expert_down],
                "experts.gate" | "experts.up" => {
                    return Err(format!(
                        "--requantize {item:?}: the experts' gate and up projections are one \
                         fused matrix in met; re-quantize both with experts.gate_up"
                    ));
                }
                other => {
                    return Err(format!(
                        "--requantize {item:?}: unknown part {other:?} (parts: {})",
                        PARTS.join(", ")
                    ));
                }
            };
            for slot in slots {
                if slot.is_some_and(|t| t != target) {
                    return Err(format!(
                        "--requantize {item:?} contradicts an earlier value for the same part"
                    ));
                }
                *slot = Some(target);
            }
        }
        Ok(plan)
    }

    /// What the plan does to the tensor `name`, if anything.
    pub fn target_of(&self, name: &str) -> Option<Target> {
        if name == "lm_head.weight" || name.ends_with(".lm_head.weight") {
            return self.lm_head;
        }
        if !name.contains(".mlp.experts.") {
            return None;
        }
        if name.ends_with("gate_proj.weight")
            || name.ends_with("up_proj.weight")
            || name.ends_with(".experts.gate_up_proj")
        {
            self.expert_gate_up
        } else if name.ends_with("down_proj.weight") || name.ends_with(".experts.down_proj") {
            self.expert_down
        } else {
            None
        }
    }

    /// `t` (the tensor `name`) in the plan's format for it.
    pub fn apply<'a>(&self, name: &str, t: HostTensor<'a>) -> Result<HostTensor<'a>, LoadError> {
        match self.target_of(name) {
            None => Ok(t),
            Some(target) => convert(name, t, target),
        }
    }
}

impl fmt::Display for Requantize {
    /// `lm_head=nvfp4,experts.gate_up=nvfp4` (`none` for the empty plan): the flag's syntax.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(t) = self.lm_head {
            parts.push(format!("lm_head={}", t.name()));
        }
        match (self.expert_gate_up, self.expert_down) {
            (Some(a), Some(b)) if a == b => parts.push(format!("experts={}", a.name())),
            (a, b) => {
                if let Some(a) = a {
                    parts.push(format!("experts.gate_up={}", a.name()));
                }
                if let Some(b) = b {
                    parts.push(format!("experts.down={}", b.name()));
                }
            }
        }
        if parts.is_empty() {
            f.write_str("none")
        } else {
            f.write_str(&parts.join(","))
        }
    }
}

/// `t` converted to `target`; a tensor already in it is returned as it is.
fn convert<'a>(name: &str, t: HostTensor<'a>, target: Target) -> Result<HostTensor<'a>, LoadError> {
    let err = |message: String| LoadError::Requantize {
        name: name.to_string(),
        target: target.name(),
        message,
    };
    match target {
        Target::Bf16 => {
            if matches!(
                t.data,
                HostData::Raw {
                    dtype: DType::BF16,
                    ..
                } | HostData::Random { .. }
            ) {
                return Ok(t);
            }
            let bytes = t
                .to_f32()
                .iter()
                .flat_map(|v| bf16::from_f32(*v).to_le_bytes())
                .collect();
            Ok(HostTensor {
                shape: t.shape,
                data: HostData::Raw {
                    dtype: DType::BF16,
                    bytes: Cow::Owned(bytes),
                },
            })
        }
        Target::Nvfp4 => {
            if t.is_nvfp4() {
                return Ok(t);
            }
            let cols = t.cols();
            if t.shape.len() < 2 || cols == 0 || !cols.is_multiple_of(GROUP) {
                return Err(err(format!(
                    "its shape {:?} has rows of {cols} values, not a positive multiple of the \
                     {GROUP} an NVFP4 scale covers",
                    t.shape
                )));
            }
            let rows = t.shape[t.shape.len() - 2];
            let values = t.to_f32();
            let (mut packed, mut scales, mut globals) = (
                Vec::with_capacity(values.len() / 2),
                Vec::with_capacity(values.len() / GROUP),
                Vec::with_capacity(values.len() / cols),
            );
            // One matrix (one expert of a stacked tensor) at a time, each its own global scale.
            for m in values.chunks(rows * cols) {
                let q = quantize_matrix(m)
                    .ok_or_else(|| err("it holds a value that is not finite".into()))?;
                packed.extend_from_slice(&q.packed);
                scales.extend_from_slice(&q.scales);
                globals.extend(std::iter::repeat_n(q.scale_2, rows));
            }
            Ok(HostTensor {
                shape: t.shape,
                data: HostData::Nvfp4 {
                    packed: Cow::Owned(packed),
                    scales: Cow::Owned(scales),
                    globals,
                    rule: GlobalRule::Multiply,
                },
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_parses_every_part_and_refuses_what_met_cannot_honour() {
        let p = Requantize::parse(["lm_head=nvfp4", "experts.gate_up=nvfp4"]).expect("ok");
        assert_eq!(p.lm_head, Some(Target::Nvfp4));
        assert_eq!(p.expert_gate_up, Some(Target::Nvfp4));
        assert_eq!(p.expert_down, None);
        assert_eq!(p.to_string(), "lm_head=nvfp4,experts.gate_up=nvfp4");
        let all = Requantize::parse(["lm_head=bf16,experts=nvfp4"]).expect("ok");
        assert_eq!(all.to_string(), "lm_head=bf16,experts=nvfp4");
        assert_eq!(Requantize::default().to_string(), "none");
        for (bad, needle) in [
            ("experts.gate=nvfp4", "experts.gate_up"),
            ("lm_head=int4", "\"int4\""),
            ("router=nvfp4", "unknown part"),
            ("lm_head", "PART=FORMAT"),
        ] {
            let e = Requantize::parse([bad]).expect_err(bad);
            assert!(e.contains(needle), "{bad}: {e}");
        }
        let e = Requantize::parse(["experts=nvfp4", "experts.down=bf16"]).expect_err("both");
        assert!(e.contains("contradicts"), "{e}");
    }

    #[test]
    fn names_select_the_head_and_the_routed_experts_only() {
        let p = Requantize::parse(["lm_head=nvfp4,experts.down=nvfp4"]).expect("ok");
        assert_eq!(p.target_of("lm_head.weight"), Some(Target::Nvfp4));
        assert_eq!(
            p.target_of("model.layers.3.mlp.experts.7.down_proj.weight"),
            Some(Target::Nvfp4)
        );
        assert_eq!(
            p.target_of("model.layers.3.mlp.experts.down_proj"),
            Some(Target::Nvfp4)
        );
        assert_eq!(
            p.target_of("model.layers.3.mlp.experts.7.up_proj.weight"),
            None
        );
        assert_eq!(
            p.target_of("model.layers.3.mlp.shared_expert.down_proj.weight"),
            None
        );
        assert_eq!(p.target_of("model.layers.3.mlp.down_proj.weight"), None);
        assert_eq!(p.target_of("model.embed_tokens.weight"), None);
    }

    #[test]
    fn nvfp4_conversion_keeps_each_experts_own_global_scale() {
        // Two "experts" of 2×16, the second ten times the first.
        let a: Vec<f32> = (0..32).map(|i| (i as f32 - 15.5) / 8.0).collect();
        let b: Vec<f32> = a.iter().map(|v| v * 10.0).collect();
        let bytes: Vec<u8> = a.iter().chain(&b).flat_map(|v| v.to_le_bytes()).collect();
        let t = HostTensor {
            shape: vec![2, 2, 16],
            data: HostData::Raw {
                dtype: DType::F32,
                bytes: Cow::Owned(bytes),
            },
        };
        let q = convert("x.mlp.experts.down_proj", t, Target::Nvfp4).expect("quantized");
        let HostData::Nvfp4 { globals, .. } = &q.data else {
            panic!("not nvfp4")
        };
        assert_eq!(globals.len(), 4);
        assert!((globals[2] / globals[0] - 10.0).abs() < 1e-5, "{globals:?}");
        let back = q.to_f32();
        for (x, y) in a.iter().chain(&b).zip(&back) {
            // NVFP4 keeps about one significant bit and a half: within a quarter of the block max.
            assert!((x - y).abs() <= 0.25 * 19.375_f32.max(x.abs()), "{x} {y}");
        }
        let odd = HostTensor {
            shape: vec![2, 10],
            data: HostData::Constant(1.0),
        };
        let e = convert("lm_head.weight", odd, Target::Nvfp4).expect_err("10 columns");
        assert!(
            e.to_string().contains("lm_head.weight") && e.to_string().contains("16"),
            "{e}"
        );
    }
}
