//! `paged_attention`'s kernels by typed key (attention.rs picks the family and variant): the
//! q and cache types, the head-dim variant, the q heads a block serves (attention.cu) or the
//! wide GQA build (attention_mma.cu), and plain or split-K. All take the same parameters.

use super::shape_err;
use crate::backend::kernels::{self as k, Kernel};
use crate::backend::{BackendError, Result};

/// The parameters of every `paged_attention*` kernel: out, partial, qkv, k and v caches,
/// positions, row_seq, block tables, max_blocks, block_size, heads, kv heads, head_dim, scale,
/// the FP8 caches' k and v scales, the sliding window (0: none) and the sinks (null: none).
#[rustfmt::skip]
pub(super) type AttnArgs = (
    u64, u64, u64, u64, u64, u64, u64, u64,
    i32, i32, i32, i32, i32,
    f32,
    u64, u64,
    i32, u64,
);
type AttnKernel = Kernel<AttnArgs>;

/// The q activations' and the cache's types of an attention kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AttnTypes {
    /// f32 q, bf16 cache (`_f32`).
    F32,
    /// bf16 q, bf16 cache (`_bf16`).
    Bf16,
    /// The float32 path: f32 q, cache and output (`_fp32`, attention.cu only).
    Fp32,
    /// f32 q, FP8 cache (`_f32_kv8`).
    F32Kv8,
    /// bf16 q, FP8 cache (`_bf16_kv8`).
    Bf16Kv8,
}

fn no_kernel(what: String) -> BackendError {
    shape_err("paged_attention", format!("no attention kernel for {what}"))
}

/// attention.cu's kernel for `ty` at head-dim variant `d` (32, 64, 128, 256) with `g` q heads a
/// block (1, 2, 4), the 16-byte-load build (`vec`: f32 or bf16 q over a bf16 cache, d ≥ 64) or
/// not, split-K or not.
pub(super) fn simt(
    ty: AttnTypes,
    vec: bool,
    d: usize,
    g: usize,
    split: bool,
) -> Result<&'static AttnKernel> {
    let key = || format!("{ty:?}, vec {vec}, d{d}, g{g}");
    let di = match d {
        32 => 0,
        64 => 1,
        128 => 2,
        256 => 3,
        _ => return Err(no_kernel(key())),
    };
    let gi = match g {
        1 => 0,
        2 => 1,
        4 => 2,
        _ => return Err(no_kernel(key())),
    };
    let by_group: &[[AttnKernel; 2]; 3] = match (ty, vec) {
        (AttnTypes::F32, false) => &SIMT[0][di],
        (AttnTypes::Bf16, false) => &SIMT[1][di],
        (AttnTypes::Fp32, false) => &SIMT[2][di],
        (AttnTypes::F32Kv8, false) => &SIMT[3][di],
        (AttnTypes::Bf16Kv8, false) => &SIMT[4][di],
        (AttnTypes::F32, true) if di > 0 => &VEC[0][di - 1],
        (AttnTypes::Bf16, true) if di > 0 => &VEC[1][di - 1],
        _ => return Err(no_kernel(key())),
    };
    Ok(&by_group[gi][usize::from(split)])
}

/// attention_mma.cu's kernel for `ty` (not the float32 path) at head_dim `d` (64, 128), the
/// build for GQA groups of up to 16 (`wide`) or 8, split-K or not.
pub(super) fn mma(ty: AttnTypes, d: usize, wide: bool, split: bool) -> Result<&'static AttnKernel> {
    let key = || format!("{ty:?} on tensor cores, d{d}, wide {wide}");
    let di = match d {
        64 => 0,
        128 => 1,
        _ => return Err(no_kernel(key())),
    };
    let ti = match ty {
        AttnTypes::F32 => 0,
        AttnTypes::Bf16 => 1,
        AttnTypes::F32Kv8 => 2,
        AttnTypes::Bf16Kv8 => 3,
        AttnTypes::Fp32 => return Err(no_kernel(key())),
    };
    Ok(&MMA[ti][di][usize::from(wide)][usize::from(split)])
}

// The tables, [type][head-dim variant][head group or wide][plain, split].
#[rustfmt::skip]
static SIMT: [[[[AttnKernel; 2]; 3]; 4]; 5] = [
    // f32
    [
        [
            [k::paged_attention_f32_d32_g1, k::paged_attention_split_f32_d32_g1],
            [k::paged_attention_f32_d32_g2, k::paged_attention_split_f32_d32_g2],
            [k::paged_attention_f32_d32_g4, k::paged_attention_split_f32_d32_g4],
        ],
        [
            [k::paged_attention_f32_d64_g1, k::paged_attention_split_f32_d64_g1],
            [k::paged_attention_f32_d64_g2, k::paged_attention_split_f32_d64_g2],
            [k::paged_attention_f32_d64_g4, k::paged_attention_split_f32_d64_g4],
        ],
        [
            [k::paged_attention_f32_d128_g1, k::paged_attention_split_f32_d128_g1],
            [k::paged_attention_f32_d128_g2, k::paged_attention_split_f32_d128_g2],
            [k::paged_attention_f32_d128_g4, k::paged_attention_split_f32_d128_g4],
        ],
        [
            [k::paged_attention_f32_d256_g1, k::paged_attention_split_f32_d256_g1],
            [k::paged_attention_f32_d256_g2, k::paged_attention_split_f32_d256_g2],
            [k::paged_attention_f32_d256_g4, k::paged_attention_split_f32_d256_g4],
        ],
    ],
    // bf16
    [
        [
            [k::paged_attention_bf16_d32_g1, k::paged_attention_split_bf16_d32_g1],
            [k::paged_attention_bf16_d32_g2, k::paged_attention_split_bf16_d32_g2],
            [k::paged_attention_bf16_d32_g4, k::paged_attention_split_bf16_d32_g4],
        ],
        [
            [k::paged_attention_bf16_d64_g1, k::paged_attention_split_bf16_d64_g1],
            [k::paged_attention_bf16_d64_g2, k::paged_attention_split_bf16_d64_g2],
            [k::paged_attention_bf16_d64_g4, k::paged_attention_split_bf16_d64_g4],
        ],
        [
            [k::paged_attention_bf16_d128_g1, k::paged_attention_split_bf16_d128_g1],
            [k::paged_attention_bf16_d128_g2, k::paged_attention_split_bf16_d128_g2],
            [k::paged_attention_bf16_d128_g4, k::paged_attention_split_bf16_d128_g4],
        ],
        [
            [k::paged_attention_bf16_d256_g1, k::paged_attention_split_bf16_d256_g1],
            [k::paged_attention_bf16_d256_g2, k::paged_attention_split_bf16_d256_g2],
            [k::paged_attention_bf16_d256_g4, k::paged_attention_split_bf16_d256_g4],
        ],
    ],
    // fp32
    [
        [
            [k::paged_attention_fp32_d32_g1, k::paged_attention_split_fp32_d32_g1],
            [k::paged_attention_fp32_d32_g2, k::paged_attention_split_fp32_d32_g2],
            [k::paged_attention_fp32_d32_g4, k::paged_attention_split_fp32_d32_g4],
        ],
        [
            [k::paged_attention_fp32_d64_g1, k::paged_attention_split_fp32_d64_g1],
            [k::paged_attention_fp32_d64_g2, k::paged_attention_split_fp32_d64_g2],
            [k::paged_attention_fp32_d64_g4, k::paged_attention_split_fp32_d64_g4],
        ],
        [
            [k::paged_attention_fp32_d128_g1, k::paged_attention_split_fp32_d128_g1],
            [k::paged_attention_fp32_d128_g2, k::paged_attention_split_fp32_d128_g2],
            [k::paged_attention_fp32_d128_g4, k::paged_attention_split_fp32_d128_g4],
        ],
        [
            [k::paged_attention_fp32_d256_g1, k::paged_attention_split_fp32_d256_g1],
            [k::paged_attention_fp32_d256_g2, k::paged_attention_split_fp32_d256_g2],
            [k::paged_attention_fp32_d256_g4, k::paged_attention_split_fp32_d256_g4],
        ],
    ],
    // f32_kv8
    [
        [
            [k::paged_attention_f32_kv8_d32_g1, k::paged_attention_split_f32_kv8_d32_g1],
            [k::paged_attention_f32_kv8_d32_g2, k::paged_attention_split_f32_kv8_d32_g2],
            [k::paged_attention_f32_kv8_d32_g4, k::paged_attention_split_f32_kv8_d32_g4],
        ],
        [
            [k::paged_attention_f32_kv8_d64_g1, k::paged_attention_split_f32_kv8_d64_g1],
            [k::paged_attention_f32_kv8_d64_g2, k::paged_attention_split_f32_kv8_d64_g2],
            [k::paged_attention_f32_kv8_d64_g4, k::paged_attention_split_f32_kv8_d64_g4],
        ],
        [
            [k::paged_attention_f32_kv8_d128_g1, k::paged_attention_split_f32_kv8_d128_g1],
            [k::paged_attention_f32_kv8_d128_g2, k::paged_attention_split_f32_kv8_d128_g2],
            [k::paged_attention_f32_kv8_d128_g4, k::paged_attention_split_f32_kv8_d128_g4],
        ],
        [
            [k::paged_attention_f32_kv8_d256_g1, k::paged_attention_split_f32_kv8_d256_g1],
            [k::paged_attention_f32_kv8_d256_g2, k::paged_attention_split_f32_kv8_d256_g2],
            [k::paged_attention_f32_kv8_d256_g4, k::paged_attention_split_f32_kv8_d256_g4],
        ],
    ],
    // bf16_kv8
    [
        [
            [k::paged_attention_bf16_kv8_d32_g1, k::paged_attention_split_bf16_kv8_d32_g1],
            [k::paged_attention_bf16_kv8_d32_g2, k::paged_attention_split_bf16_kv8_d32_g2],
            [k::paged_attention_bf16_kv8_d32_g4, k::paged_attention_split_bf16_kv8_d32_g4],
        ],
        [
            [k::paged_attention_bf16_kv8_d64_g1, k::paged_attention_split_bf16_kv8_d64_g1],
            [k::paged_attention_bf16_kv8_d64_g2, k::paged_attention_split_bf16_kv8_d64_g2],
            [k::paged_attention_bf16_kv8_d64_g4, k::paged_attention_split_bf16_kv8_d64_g4],
        ],
        [
            [k::paged_attention_bf16_kv8_d128_g1, k::paged_attention_split_bf16_kv8_d128_g1],
            [k::paged_attention_bf16_kv8_d128_g2, k::paged_attention_split_bf16_kv8_d128_g2],
            [k::paged_attention_bf16_kv8_d128_g4, k::paged_attention_split_bf16_kv8_d128_g4],
        ],
        [
            [k::paged_attention_bf16_kv8_d256_g1, k::paged_attention_split_bf16_kv8_d256_g1],
            [k::paged_attention_bf16_kv8_d256_g2, k::paged_attention_split_bf16_kv8_d256_g2],
            [k::paged_attention_bf16_kv8_d256_g4, k::paged_attention_split_bf16_kv8_d256_g4],
        ],
    ],
];
#[rustfmt::skip]
static VEC: [[[[AttnKernel; 2]; 3]; 3]; 2] = [
    // f32
    [
        [
            [k::paged_attention_vec_f32_d64_g1, k::paged_attention_vec_split_f32_d64_g1],
            [k::paged_attention_vec_f32_d64_g2, k::paged_attention_vec_split_f32_d64_g2],
            [k::paged_attention_vec_f32_d64_g4, k::paged_attention_vec_split_f32_d64_g4],
        ],
        [
            [k::paged_attention_vec_f32_d128_g1, k::paged_attention_vec_split_f32_d128_g1],
            [k::paged_attention_vec_f32_d128_g2, k::paged_attention_vec_split_f32_d128_g2],
            [k::paged_attention_vec_f32_d128_g4, k::paged_attention_vec_split_f32_d128_g4],
        ],
        [
            [k::paged_attention_vec_f32_d256_g1, k::paged_attention_vec_split_f32_d256_g1],
            [k::paged_attention_vec_f32_d256_g2, k::paged_attention_vec_split_f32_d256_g2],
            [k::paged_attention_vec_f32_d256_g4, k::paged_attention_vec_split_f32_d256_g4],
        ],
    ],
    // bf16
    [
        [
            [k::paged_attention_vec_bf16_d64_g1, k::paged_attention_vec_split_bf16_d64_g1],
            [k::paged_attention_vec_bf16_d64_g2, k::paged_attention_vec_split_bf16_d64_g2],
            [k::paged_attention_vec_bf16_d64_g4, k::paged_attention_vec_split_bf16_d64_g4],
        ],
        [
            [k::paged_attention_vec_bf16_d128_g1, k::paged_attention_vec_split_bf16_d128_g1],
            [k::paged_attention_vec_bf16_d128_g2, k::paged_attention_vec_split_bf16_d128_g2],
            [k::paged_attention_vec_bf16_d128_g4, k::paged_attention_vec_split_bf16_d128_g4],
        ],
        [
            [k::paged_attention_vec_bf16_d256_g1, k::paged_attention_vec_split_bf16_d256_g1],
            [k::paged_attention_vec_bf16_d256_g2, k::paged_attention_vec_split_bf16_d256_g2],
            [k::paged_attention_vec_bf16_d256_g4, k::paged_attention_vec_split_bf16_d256_g4],
        ],
    ],
];
#[rustfmt::skip]
static MMA: [[[[AttnKernel; 2]; 2]; 2]; 4] = [
    // f32
    [
        [
            [k::paged_attention_mma_f32_d64, k::paged_attention_mma_split_f32_d64],
            [k::paged_attention_mma_f32_d64_wide, k::paged_attention_mma_split_f32_d64_wide],
        ],
        [
            [k::paged_attention_mma_f32_d128, k::paged_attention_mma_split_f32_d128],
            [k::paged_attention_mma_f32_d128_wide, k::paged_attention_mma_split_f32_d128_wide],
        ],
    ],
    // bf16
    [
        [
            [k::paged_attention_mma_bf16_d64, k::paged_attention_mma_split_bf16_d64],
            [k::paged_attention_mma_bf16_d64_wide, k::paged_attention_mma_split_bf16_d64_wide],
        ],
        [
            [k::paged_attention_mma_bf16_d128, k::paged_attention_mma_split_bf16_d128],
            [k::paged_attention_mma_bf16_d128_wide, k::paged_attention_mma_split_bf16_d128_wide],
        ],
    ],
    // f32_kv8
    [
        [
            [k::paged_attention_mma_f32_kv8_d64, k::paged_attention_mma_split_f32_kv8_d64],
            [
                k::paged_attention_mma_f32_kv8_d64_wide,
                k::paged_attention_mma_split_f32_kv8_d64_wide,
            ],
        ],
        [
            [k::paged_attention_mma_f32_kv8_d128, k::paged_attention_mma_split_f32_kv8_d128],
            [
                k::paged_attention_mma_f32_kv8_d128_wide,
                k::paged_attention_mma_split_f32_kv8_d128_wide,
            ],
        ],
    ],
    // bf16_kv8
    [
        [
            [k::paged_attention_mma_bf16_kv8_d64, k::paged_attention_mma_split_bf16_kv8_d64],
            [
                k::paged_attention_mma_bf16_kv8_d64_wide,
                k::paged_attention_mma_split_bf16_kv8_d64_wide,
            ],
        ],
        [
            [k::paged_attention_mma_bf16_kv8_d128, k::paged_attention_mma_split_bf16_kv8_d128],
            [
                k::paged_attention_mma_bf16_kv8_d128_wide,
                k::paged_attention_mma_split_bf16_kv8_d128_wide,
            ],
        ],
    ],
];

#[cfg(test)]
mod tests {
    use super::*;

    /// Each key names the kernel the launch named before the typed table (by format!).
    #[test]
    fn every_key_picks_its_kernel() {
        let names = [
            (AttnTypes::F32, "f32"),
            (AttnTypes::Bf16, "bf16"),
            (AttnTypes::Fp32, "fp32"),
            (AttnTypes::F32Kv8, "f32_kv8"),
            (AttnTypes::Bf16Kv8, "bf16_kv8"),
        ];
        for (ty, t) in names {
            for split in [false, true] {
                let sp = if split { "split_" } else { "" };
                for d in [32, 64, 128, 256] {
                    for g in [1, 2, 4] {
                        let k = simt(ty, false, d, g, split).expect("a kernel");
                        assert_eq!(k.name(), format!("paged_attention_{sp}{t}_d{d}_g{g}"));
                        let vec = simt(ty, true, d, g, split);
                        if d >= 64 && matches!(ty, AttnTypes::F32 | AttnTypes::Bf16) {
                            let name = format!("paged_attention_vec_{sp}{t}_d{d}_g{g}");
                            assert_eq!(vec.expect("a kernel").name(), name);
                        } else {
                            assert!(vec.is_err());
                        }
                    }
                    assert!(simt(ty, false, d, 3, split).is_err());
                }
                assert!(simt(ty, false, 96, 1, split).is_err());
                for d in [64, 128] {
                    for wide in [false, true] {
                        let w = if wide { "_wide" } else { "" };
                        let k = mma(ty, d, wide, split);
                        if ty == AttnTypes::Fp32 {
                            assert!(k.is_err());
                        } else {
                            let name = format!("paged_attention_mma_{sp}{t}_d{d}{w}");
                            assert_eq!(k.expect("a kernel").name(), name);
                        }
                    }
                }
                assert!(mma(ty, 256, false, split).is_err());
            }
        }
    }
}
