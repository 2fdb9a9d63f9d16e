//! The launcher of the flash prefill attention (`attention_flash.cu`): the rows of a batch's
//! [`FlashPlan`] (prefill chunks), a block a (tile of up to 128 rows, q head), on tensor cores.

use cudarc::driver::LaunchConfig;

use super::batch::{FLASH_TILE_ROWS, FlashPlan};
use super::elementwise::{dim, int};
use super::tensor::{CudaTensor, DType};
use super::{CudaBackend, CudaBatch, shape_err};
use crate::backend::Result;
use crate::backend::kernels::{self as k, Kernel};

/// Threads of a block at head_dim `hd`: FlashCfg<D>::THREADS (4 warps of 32 rows below 256, 8
/// of 16 at 256), or FwgCfg<D>::THREADS for the wgmma build (a producer warpgroup and two
/// consumers of 64 rows).
fn flash_threads(hd: usize, wg: bool) -> u32 {
    match (wg, hd) {
        (true, _) => 384,
        (false, 0..=128) => 128,
        (false, _) => 256,
    }
}

/// The flash kernel's parameters (every variant takes the same list, by type): out, qkv, the
/// caches, positions, row_seq, block tables, tiles, max_blocks, block_size, heads, kv heads,
/// scale, the FP8 scales, the sliding window (0: none) and the sinks (null: none).
#[rustfmt::skip]
type FlashArgs = (
    u64, u64, u64, u64, u64, u64, u64, u64,
    i32, i32, i32, i32,
    f32,
    u64, u64,
    i32, u64,
);

/// Dynamic shared memory of a block at head_dim `hd`: FlashCfg<D>::SMEM (Q and two stages of K
/// and V, bf16 rows of hd; 32-key stages at 256, 64 below), or FwgCfg<D>::SMEM for the wgmma
/// build (1024 bytes to align the swizzled tiles, Q, STAGES stages of K and V of BK keys: 2 of
/// 128 at head_dim 128, 2 of 64 at 256, 4 of 64 at 64; then two 16-byte mbarriers a stage).
fn flash_smem(hd: usize, wg: bool) -> u32 {
    if wg {
        let (keys, stages) = match hd {
            128 => (128, 2),
            64 => (64, 4),
            _ => (64, 2),
        };
        return (1024 + (FLASH_TILE_ROWS + 2 * stages * keys) * hd * 2 + 2 * stages * 16) as u32;
    }
    let keys = if hd <= 128 { 64 } else { 32 };
    ((FLASH_TILE_ROWS + 4 * keys) * hd * 2) as u32
}

type FlashKernel = &'static Kernel<FlashArgs>;

/// Every build, [wgmma][window][FP8 cache][q bf16][head_dim 64, 128, 256].
#[rustfmt::skip]
static FLASH_KERNELS: [[[[[FlashKernel; 3]; 2]; 2]; 2]; 2] = [
    [
        [
            [[&k::attention_flash_f32_d64, &k::attention_flash_f32_d128, &k::attention_flash_f32_d256],
             [&k::attention_flash_bf16_d64, &k::attention_flash_bf16_d128, &k::attention_flash_bf16_d256]],
            [[&k::attention_flash_f32_kv8_d64, &k::attention_flash_f32_kv8_d128, &k::attention_flash_f32_kv8_d256],
             [&k::attention_flash_bf16_kv8_d64, &k::attention_flash_bf16_kv8_d128, &k::attention_flash_bf16_kv8_d256]],
        ],
        [
            [[&k::attention_flash_win_f32_d64, &k::attention_flash_win_f32_d128, &k::attention_flash_win_f32_d256],
             [&k::attention_flash_win_bf16_d64, &k::attention_flash_win_bf16_d128, &k::attention_flash_win_bf16_d256]],
            [[&k::attention_flash_win_f32_kv8_d64, &k::attention_flash_win_f32_kv8_d128, &k::attention_flash_win_f32_kv8_d256],
             [&k::attention_flash_win_bf16_kv8_d64, &k::attention_flash_win_bf16_kv8_d128, &k::attention_flash_win_bf16_kv8_d256]],
        ],
    ],
    [
        [
            [[&k::attention_flash_wg_f32_d64, &k::attention_flash_wg_f32_d128, &k::attention_flash_wg_f32_d256],
             [&k::attention_flash_wg_bf16_d64, &k::attention_flash_wg_bf16_d128, &k::attention_flash_wg_bf16_d256]],
            [[&k::attention_flash_wg_f32_kv8_d64, &k::attention_flash_wg_f32_kv8_d128, &k::attention_flash_wg_f32_kv8_d256],
             [&k::attention_flash_wg_bf16_kv8_d64, &k::attention_flash_wg_bf16_kv8_d128, &k::attention_flash_wg_bf16_kv8_d256]],
        ],
        [
            [[&k::attention_flash_wg_win_f32_d64, &k::attention_flash_wg_win_f32_d128, &k::attention_flash_wg_win_f32_d256],
             [&k::attention_flash_wg_win_bf16_d64, &k::attention_flash_wg_win_bf16_d128, &k::attention_flash_wg_win_bf16_d256]],
            [[&k::attention_flash_wg_win_f32_kv8_d64, &k::attention_flash_wg_win_f32_kv8_d128, &k::attention_flash_wg_win_f32_kv8_d256],
             [&k::attention_flash_wg_win_bf16_kv8_d64, &k::attention_flash_wg_win_bf16_kv8_d128, &k::attention_flash_wg_win_bf16_kv8_d256]],
        ],
    ],
];

/// The variant for a q of `q` type, an FP8 cache or not, and head_dim `hd`, the sliding-window
/// build (`_win`) or not, the wgmma build (`_wg`) or not; `None` where the kernel has none (the
/// float32 path, other head dims). The sliding-window builds are builds of their own so the
/// plain mma.sync one keeps every register it had (its D = 128 build uses all 255).
pub(super) fn flash_kernel(
    q: DType,
    kv8: bool,
    hd: usize,
    win: bool,
    wg: bool,
) -> Option<FlashKernel> {
    let bf16_q = match q {
        DType::F32 => false,
        DType::BF16 => true,
        _ => return None,
    };
    let d = match hd {
        64 => 0,
        128 => 1,
        256 => 2,
        _ => return None,
    };
    Some(FLASH_KERNELS[wg as usize][win as usize][kv8 as usize][bf16_q as usize][d])
}

impl CudaBackend {
    /// The flash plan `paged_attention` follows for this batch and shape: the batch's plan where
    /// the kernel has a variant (bf16 or FP8 cache, head_dim 64/128/256, sm_80 and newer).
    pub(super) fn flash_plan(
        &self,
        batch: &CudaBatch,
        q: DType,
        cache: DType,
        hd: usize,
    ) -> Option<FlashPlan> {
        let cc_ok = self.info.compute_capability
            >= metrale_kernels::Module::AttentionFlash.min_compute_capability();
        let cache_ok = matches!(cache, DType::BF16 | DType::F8);
        batch.flash.filter(|_| {
            cc_ok && cache_ok && flash_kernel(q, cache == DType::F8, hd, false, false).is_some()
        })
    }

    /// Causal attention of the plan's rows (`plan.first_row..`) into `out`, in a sliding window
    /// when `window` > 0, with sinks when `sinks` is not null; the caller checked the shapes
    /// (`attention_op`) and that the plan is `flash_plan`'s.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn attention_flash_op(
        &self,
        plan: FlashPlan,
        out: &mut CudaTensor,
        qkv: &CudaTensor,
        k_cache: &CudaTensor,
        v_cache: &CudaTensor,
        batch: &CudaBatch,
        (num_heads, nkv, hd): (usize, usize, usize),
        scale: f32,
        (window, sinks): (i32, u64),
    ) -> Result<()> {
        let kv8 = k_cache.dtype == DType::F8;
        // The wgmma build where asked for and the GPU is an sm_90 (the loader's sm_90a).
        let wg = self.tuning().attention.flash_wgmma && self.info.compute_capability == (9, 0);
        let Some(kernel) = flash_kernel(qkv.dtype, kv8, hd, window > 0, wg) else {
            return Err(shape_err(
                "paged_attention",
                format!("no flash kernel for q {:?} at head_dim {hd}", qkv.dtype),
            ));
        };
        if plan.tiles == 0 || num_heads == 0 {
            return Ok(());
        }
        let smem = flash_smem(hd, wg);
        // Past 48 KB of shared memory a block, a kernel must opt in.
        kernel.allow_shared_memory(self, smem)?;
        let s = &self.stream;
        let op = "attention_flash";
        let args = (
            out.ptr(s),
            qkv.ptr(s),
            k_cache.ptr(s),
            v_cache.ptr(s),
            batch.positions(s),
            batch.row_table(s),
            batch.block_tables(s),
            batch.flash_tiles(s),
            int(batch.table_stride, op)?,
            int(batch.block_size, op)?,
            int(num_heads, op)?,
            int(nkv, op)?,
            scale,
            k_cache.scales_ptr(s),
            v_cache.scales_ptr(s),
            window,
            sinks,
        );
        let cfg = LaunchConfig {
            grid_dim: (dim(plan.tiles * num_heads, op)?, 1, 1),
            block_dim: (flash_threads(hd, wg), 1, 1),
            shared_mem_bytes: smem,
        };
        // SAFETY: out is [T, nh·hd] bf16 and qkv [T, (nh + 2·nkv)·hd] of the variant's q type;
        // the caches are [blocks, bs, nkv, hd] (bf16, or e4m3 bytes with ceil(hd / 128) scales a
        // (slot, kv head) at the scale pointers); every tile is (first row, end row) of one
        // sequence's rows below T, every row's position is inside its table and every entry
        // below `blocks` (paged_attention_op and prepare_batch checked them), so each key read
        // is in the cache; the grid is tiles · nh blocks of flash_threads(hd) with the variant's
        // dynamic shared memory; a window (> 0) only narrows the keys read, and sinks is null or
        // [nh] f32.
        unsafe { kernel.launch(self, cfg, args) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_memory_fits_the_blocks_a_multiprocessor_runs() {
        // The launch's threads are the kernel's FlashCfg<D>::THREADS: 128 rows a block.
        assert_eq!(
            (flash_threads(128, false), flash_threads(256, false)),
            (128, 256)
        );
        assert_eq!(
            (flash_threads(64, true), flash_threads(128, true)),
            (384, 384)
        );
        for hd in [64, 128, 256] {
            // Two blocks a multiprocessor at 64 and 128, one at 256; the wgmma build one.
            let blocks = if hd <= 128 { 2 } else { 1 };
            assert!(
                flash_smem(hd, false) as usize * blocks <= 227 * 1024,
                "{hd}"
            );
            assert!(flash_smem(hd, true) as usize <= 227 * 1024, "{hd}");
            for wg in [false, true] {
                assert!(flash_kernel(DType::BF16, true, hd, false, wg).is_some());
                assert!(flash_kernel(DType::F32, false, hd, true, wg).is_some());
            }
        }
        // FwgCfg<D>::SMEM: 1024 + Q (128 rows) + the stages of K and V + their barriers.
        assert_eq!(flash_smem(128, true), 1024 + (128 + 4 * 128) * 128 * 2 + 64);
        assert_eq!(flash_smem(64, true), 1024 + (128 + 8 * 64) * 64 * 2 + 128);
        assert_eq!(flash_smem(256, true), 1024 + (128 + 4 * 64) * 256 * 2 + 64);
        assert!(flash_kernel(DType::F32, false, 96, false, false).is_none());
        assert!(flash_kernel(DType::F8, false, 128, false, false).is_none());
        assert!(flash_kernel(DType::F8, false, 128, true, true).is_none());
    }
}
