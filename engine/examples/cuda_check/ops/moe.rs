//! The mixture-of-experts checks: fused_moe (bf16 and FP8 experts) against the CPU.

use super::*;

impl Ops<'_> {
    /// fused_moe against the CPU's: the same router logits on both sides, so the same experts
    /// (ties included: the rule is on the logits' bits); shapes from a decode step at
    /// Qwen3-30B-A3B's width (hidden 2048, experts of 768, top-8) to odd sizes that take the
    /// kernels' scalar loops (hidden 100, experts of 36), every expert taken (k = E), bf16 and
    /// f32 activations and router logits, and an empty batch; then the small-step launches
    /// against the six-launch path, bit for bit.
    pub(super) fn moe(&mut self) -> Result<()> {
        for (t, h, i, e, k, norm, xd, rd) in [
            (1, 2048, 768, 32, 8, true, DType::BF16, DType::F32),
            (8, 2048, 768, 32, 8, true, DType::BF16, DType::F32),
            (7, 64, 32, 8, 2, false, DType::F32, DType::BF16),
            (130, 100, 36, 16, 4, true, DType::BF16, DType::F32),
            (33, 192, 144, 8, 8, false, DType::BF16, DType::F32),
            (300, 256, 96, 64, 6, true, DType::BF16, DType::F32),
            (0, 64, 32, 8, 2, true, DType::BF16, DType::F32),
        ] {
            let case = format!(
                "T {t} H {h} I {i} E {e} top-{k}{} x {} logits {}",
                if norm { " norm" } else { "" },
                dt(xd),
                dt(rd)
            );
            self.run("fused_moe", &case, |s| {
                let (x_d, x_c) = s.random(&[t, h], 1.0, xd)?;
                let (l_d, l_c) = s.random(&[t, e], 3.0, rd)?;
                let (w13_d, w13_c) = s.random(&[e, 2 * i, h], 0.05, DType::BF16)?;
                let (w2_d, w2_c) = s.random(&[e, h, i], 0.05, DType::BF16)?;
                let mut out_d = s.cuda.zeros(&[t, h])?;
                let mut out_c = s.cpu.zeros(&[t, h])?;
                s.cuda
                    .fused_moe(&mut out_d, &x_d, &l_d, &w13_d, &w2_d, k, norm)?;
                s.cpu
                    .fused_moe(&mut out_c, &x_c, &l_c, &w13_c, &w2_c, k, norm)?;
                s.check("fused_moe", &case, MOE, &out_d, &out_c)?;
                Ok(())
            })?;
        }
        // FP8 experts (the 30B-A3B-FP8 layout: 128-column scale blocks, rows of 16 bytes, and
        // an odd width taking the scalar loop).
        for (t, h, i, e, k) in [
            (1, 2048, 768, 32, 8),
            (5, 2048, 768, 16, 8),
            (9, 200, 72, 8, 2),
        ] {
            let case = format!("T {t} H {h} I {i} E {e} top-{k} fp8 experts");
            self.run("fused_moe", &case, |s| {
                let (x_d, x_c) = s.random(&[t, h], 1.0, DType::BF16)?;
                let (l_d, l_c) = s.random(&[t, e], 3.0, DType::F32)?;
                let (w13_d, w13_c) = s.fp8_pair(&[e, 2 * i, h])?;
                let (w2_d, w2_c) = s.fp8_pair(&[e, h, i])?;
                let mut out_d = s.cuda.zeros(&[t, h])?;
                let mut out_c = s.cpu.zeros(&[t, h])?;
                s.cuda
                    .fused_moe(&mut out_d, &x_d, &l_d, &w13_d, &w2_d, k, true)?;
                s.cpu
                    .fused_moe(&mut out_c, &x_c, &l_c, &w13_c, &w2_c, k, true)?;
                s.check("fused_moe", &case, MOE, &out_d, &out_c)?;
                Ok(())
            })?;
        }
        // The small-step launches (moe_plan: routing in one block up to 1024 pairs;
        // moe_down_combine: down + weighted sum in one launch up to 8 tokens) against the six
        // launches, bit for bit, on both sides of each switch and with both expert types.
        for (t, e, k, fp8) in [
            (1, 128, 8, false),
            (1, 128, 8, true),
            (8, 128, 8, false),
            (8, 128, 8, true),
            (9, 128, 8, false),
            (128, 128, 8, true),
            (129, 128, 8, false),
        ] {
            let (h, i) = (2048, 768);
            let case = format!(
                "T {t} E {e} top-{k}{} small-step launches = six launches",
                if fp8 { " fp8 experts" } else { "" }
            );
            self.run("fused_moe", &case, |s| {
                let (x_d, _) = s.random(&[t, h], 1.0, DType::BF16)?;
                let (l_d, _) = s.random(&[t, e], 3.0, DType::F32)?;
                // Drawn on the device: the CPU side is not needed here.
                let (w13_d, w2_d) = if fp8 {
                    (
                        s.cuda.random_fp8(&[e, 2 * i, h], 11, 0.05)?,
                        s.cuda.random_fp8(&[e, h, i], 12, 0.05)?,
                    )
                } else {
                    (
                        s.cuda.random_bf16(&[e, 2 * i, h], 11, 0.05)?,
                        s.cuda.random_bf16(&[e, h, i], 12, 0.05)?,
                    )
                };
                let mut outs = Vec::new();
                for small in [true, false] {
                    s.cuda.set_moe_small_paths(small);
                    let mut out = s.cuda.zeros(&[t, h])?;
                    let r = s
                        .cuda
                        .fused_moe(&mut out, &x_d, &l_d, &w13_d, &w2_d, k, true);
                    s.cuda.set_moe_small_paths(true);
                    r?;
                    outs.push(s.cuda.to_host(&out)?);
                }
                let differ = outs[0]
                    .iter()
                    .zip(&outs[1])
                    .filter(|(a, b)| a.to_bits() != b.to_bits())
                    .count();
                s.report.line(format!(
                    "fused_moe {case}: {}",
                    if differ == 0 { "ok" } else { "FAIL" }
                ));
                if differ != 0 {
                    s.report.fail(format!(
                        "fused_moe {case}: {differ} of {} outputs differ",
                        t * h
                    ));
                }
                Ok(())
            })?;
        }
        // Bad shapes are errors that name the op, not faults.
        let x = self.cuda.zeros(&[2, 64])?;
        let l = self.cuda.zeros(&[2, 8])?;
        let w13 = self.cuda.zeros(&[8, 64, 64])?;
        let w2 = self.cuda.zeros(&[8, 64, 32])?;
        let mut out = self.cuda.zeros(&[2, 64])?;
        for (k, what) in [(0, "top-0"), (9, "top-9 of 8"), (17, "top-17")] {
            let e = self
                .cuda
                .fused_moe(&mut out, &x, &l, &w13, &w2, k, true)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            let ok = e.contains("fused_moe");
            self.report.line(format!(
                "fused_moe refuses {what}: {}",
                if ok { "ok" } else { "FAIL" }
            ));
            if !ok {
                self.report
                    .fail(format!("fused_moe accepted {what} ({e:?})"));
            }
        }
        Ok(())
    }
}
