//! The prefill attention kernel alone (section `prefill-attn`, not pass/fail): one prompt of
//! n tokens from position 0, causal, at the Qwen3-8B shape (32 q / 8 kv heads of 128) and the
//! Qwen3.6-35B-A3B full-attention shape (16 / 2 of 256), as TFLOP/s of the causal products
//! (4 · heads · head_dim · n(n + 1)/2 FLOPs), with the flash kernel (its mma.sync build, and on
//! sm_90 its wgmma build) and, up to 8,192 tokens, with the decode kernels it replaces; then
//! the flash builds at 8,192 tokens on an FP8 cache (`cache fp8`: the keys and values widened
//! on their way to shared memory, by the wgmma build's producer warpgroup).

use anyhow::Result;
use metrale_engine::backend::Backend;
use metrale_engine::backend::cuda::{CudaBackend, DType};
use serde_json::json;

use crate::report::Report;
use crate::speed::{BLOCK, prefill_batch, time_op};

pub fn run(cuda: &CudaBackend, report: &mut Report) -> Result<()> {
    let before = cuda.tuning().attention;
    let kv8 = CudaBackend::new(0, cuda.tuning()).and_then(|c| c.with_fp8_kv_cache(true))?;
    for (shape, nh, nkv, hd) in [("qwen3-8b", 32, 8, 128), ("qwen3.6-35b-a3b", 16, 2, 256)] {
        let runs = [1024usize, 4096, 8192, 32768]
            .map(|n| (n, "bf16", cuda))
            .into_iter()
            .chain([(8192, "fp8", &kv8)]);
        for (n, cache, cuda) in runs {
            for kernel in ["flash", "wgmma", "decode"] {
                let flash = kernel != "decode";
                if !flash && (n > 8192 || cache == "fp8")
                    || kernel == "wgmma" && cuda.info().compute_capability != (9, 0)
                {
                    continue;
                }
                cuda.retune(|t| {
                    t.attention.flash_min_rows = if flash { Some(16) } else { None };
                    t.attention.flash_wgmma = kernel == "wgmma";
                });
                let host = prefill_batch(n);
                let batch = cuda.prepare_batch(&host)?;
                let blocks = n.div_ceil(BLOCK) + 1;
                let k_cache = cuda.kv_zeros(&[blocks, BLOCK, nkv, hd])?;
                let v_cache = cuda.kv_zeros(&[blocks, BLOCK, nkv, hd])?;
                let width = (nh + 2 * nkv) * hd;
                let qkv = cuda.tensor_from_f32(&[n, width], &vec![0.1; n * width], DType::F32)?;
                let mut attn = cuda.zeros(&[n, nh * hd])?;
                let scale = 1.0 / (hd as f32).sqrt();
                let ms = time_op(cuda, || {
                    Ok(cuda
                        .paged_attention(&mut attn, &qkv, &k_cache, &v_cache, &batch, nh, scale)?)
                })?;
                let flops = 4.0 * (nh * hd) as f64 * (n * (n + 1) / 2) as f64;
                let tflops = flops / (ms / 1e3) / 1e12;
                report.summary_line(format!(
                    "prefill attention {shape} n={n:<6} {kernel:<6} cache {cache:<4} {ms:>9.3} ms a layer, {tflops:6.1} TFLOP/s"
                ));
                report.record(json!({"profile": "prefill-attention", "shape": shape,
                    "tokens": n, "kernel": kernel, "cache": cache, "ms": ms, "tflops": tflops}));
            }
        }
    }
    cuda.retune(|t| t.attention = before);
    Ok(())
}
