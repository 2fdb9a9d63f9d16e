//! L2 prefetch hints ([`Backend::prefetch`](crate::backend::Backend::prefetch)): gemv.cu's
//! `l2_prefetch` asks L2 for a weight the step reads soon and returns without waiting, so that
//! at small batches a layer's dense weights stream from HBM while the latency-bound kernels
//! before their GEMV (norms, QK-norm + RoPE, attention) leave it idle.
//!
//! Off by default until measured (docs/performance.md); `METRALE_PREFETCH=mode:mask[:tokens]`
//! or [`CudaBackend::set_prefetch`] turn it on: `mode` 0 a prefetch a 128-byte line, 1 the same
//! with L2's evict-last priority, 2 bulk prefetches of 32 KB runs; `mask` the
//! [`PrefetchPoint`] bits taken; `tokens` the largest step that prefetches (default 1).

use metrale_kernels::Module;

use super::CudaBackend;
use super::elementwise::cfg;
use super::tensor::CudaTensor;
use crate::backend::{BackendError, PrefetchPoint, Result};

/// Weights larger than this are never prefetched: the H200's L2 is 50 MB, and a hint that
/// evicts what the step is about to read costs more than it saves.
const MAX_BYTES: usize = 24 << 20;
/// Threads of an `l2_prefetch` block.
const THREADS: u32 = 256;

/// Which hints the backend takes and how it issues them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prefetch {
    /// 0: `prefetch.global.L2` a line; 1: with `evict_last`; 2: `cp.async.bulk.prefetch.L2`.
    pub mode: u8,
    /// [`PrefetchPoint::bit`]s taken; 0 is off.
    pub mask: u32,
    /// The largest step (tokens) that prefetches.
    pub max_tokens: usize,
    /// Blocks of a launch.
    pub blocks: u32,
}

impl Prefetch {
    pub const OFF: Prefetch = Prefetch {
        mode: 0,
        mask: 0,
        max_tokens: 1,
        blocks: 132,
    };

    /// `mode:mask[:tokens]`, as `METRALE_PREFETCH` spells it.
    pub fn parse(s: &str) -> std::result::Result<Self, String> {
        let bad = || {
            format!(
                "METRALE_PREFETCH={s:?}: expected mode:mask[:tokens] (mode 0, 1 or 2; mask a \
                 number of point bits; tokens at least 1), e.g. 0:5"
            )
        };
        let parts: Vec<&str> = s.split(':').collect();
        if !(2..=3).contains(&parts.len()) {
            return Err(bad());
        }
        let mode: u8 = parts[0].trim().parse().map_err(|_| bad())?;
        let mask: u32 = parts[1].trim().parse().map_err(|_| bad())?;
        let max_tokens: usize = match parts.get(2) {
            Some(t) => t.trim().parse().map_err(|_| bad())?,
            None => 1,
        };
        if mode > 2 || max_tokens == 0 {
            return Err(bad());
        }
        Ok(Prefetch {
            mode,
            mask,
            max_tokens,
            ..Prefetch::OFF
        })
    }

    /// From `METRALE_PREFETCH` (off where unset).
    pub(super) fn from_env() -> Result<Self> {
        match std::env::var("METRALE_PREFETCH") {
            Ok(v) if !v.trim().is_empty() => Self::parse(&v).map_err(BackendError::Device),
            _ => Ok(Prefetch::OFF),
        }
    }
}

impl CudaBackend {
    /// Which prefetch hints to take (see the module docs).
    pub fn set_prefetch(&self, p: Prefetch) {
        *self.prefetch.lock().unwrap_or_else(|e| e.into_inner()) = p;
    }

    pub fn prefetch_config(&self) -> Prefetch {
        *self.prefetch.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn prefetch_op(
        &self,
        w: &CudaTensor,
        point: PrefetchPoint,
        tokens: usize,
    ) -> Result<()> {
        let p = self.prefetch_config();
        let bytes = w.num_bytes();
        if p.mask & point.bit() == 0 || tokens > p.max_tokens || bytes == 0 || bytes > MAX_BYTES {
            return Ok(());
        }
        let f = self.func(Module::Gemv, "l2_prefetch")?;
        let (ptr, n, mode) = (w.ptr(&self.stream), bytes as u64, i32::from(p.mode));
        let mut a = self.launcher(&f);
        a.arg(&ptr).arg(&n).arg(&mode);
        // SAFETY: the kernel only asks L2 for the bytes [ptr, ptr + n) of w's buffer (which
        // holds num_bytes), reads and writes nothing; u64, u64 and int match its parameters.
        let r = unsafe { a.launch(cfg((p.blocks.max(1), 1), THREADS)) };
        self.launched("l2_prefetch", r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_setting_parses_and_bad_ones_say_what_is_expected() {
        let p = Prefetch::parse("2:5:8").expect("a valid setting");
        assert_eq!((p.mode, p.mask, p.max_tokens), (2, 5, 8));
        assert_eq!(Prefetch::parse("0:1").expect("a valid setting").max_tokens, 1);
        for bad in ["", "1", "3:1", "0:x", "0:1:0", "0:1:2:3"] {
            let e = Prefetch::parse(bad).expect_err("an invalid setting");
            assert!(e.contains("expected mode:mask"), "{bad}: {e}");
        }
    }
}
