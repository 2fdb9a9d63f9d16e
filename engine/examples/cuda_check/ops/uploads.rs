//! Uploads: dummy weights drawn on the device, checkpoint bytes, FP8 weights and constants must
//! read back as exactly what the host holds (rounded to bf16 on the bf16 path).

use super::*;

impl Ops<'_> {
    pub(super) fn uploads(&mut self) -> Result<()> {
        // What the device keeps of host values: bf16-rounded, or (float32 path) themselves.
        let fp32 = self.fp32();
        let kept = move |v: &[f32]| if fp32 { v.to_vec() } else { round_bf16(v) };
        let to = if fp32 { "f32" } else { "bf16" };
        for (shape, seed, std) in [
            (vec![300, 1000], 7u64, 0.02f32),
            (vec![65536 * 2 + 17], 99, 1.0),
            (vec![5], 3, 0.5),
        ] {
            let case = format!("random {shape:?} seed {seed}");
            self.run("upload", &case, |s| {
                let host = HostTensor {
                    shape: shape.clone(),
                    data: HostData::Random { seed, std },
                };
                let want = CpuTensor::new(shape.clone(), kept(&host.to_f32()));
                let got = s.cuda.upload(&host)?;
                s.check("upload", &case, Tol::EXACT, &got, &want)?;
                Ok(())
            })?;
        }
        let case = format!("raw f32 [37, 129] → {to}");
        self.run("upload", &case, |s| {
            let v = s.rng.vec(37 * 129, 3.0);
            let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
            let host = HostTensor {
                shape: vec![37, 129],
                data: HostData::Raw {
                    dtype: HostDType::F32,
                    bytes: bytes.into(),
                },
            };
            let got = s.cuda.upload(&host)?;
            let want = CpuTensor::new(vec![37, 129], kept(&v));
            s.check("upload", &case, Tol::EXACT, &got, &want)?;
            Ok(())
        })?;
        self.run("upload", "constant [1000] 1.0", |s| {
            let host = HostTensor {
                shape: vec![1000],
                data: HostData::Constant(1.0),
            };
            let got = s.cuda.upload(&host)?;
            let want = CpuTensor::new(vec![1000], vec![1.0; 1000]);
            s.check("upload", "constant [1000] 1.0", Tol::EXACT, &got, &want)?;
            Ok(())
        })?;
        // FP8: dummy weights drawn on the device, and checkpoint bytes + scales, must read back
        // as the host's values exactly (e4m3 · scale, one rounding, on both sides), as FP8
        // weights on the bf16 path and dequantized to f32 on the float32 path.
        for (shape, seed) in [(vec![300, 1000], 11u64), (vec![3, 65536 + 130], 12)] {
            let case = format!("random fp8 {shape:?} seed {seed}");
            self.run("upload", &case, |s| {
                let host = HostTensor {
                    shape: shape.clone(),
                    data: HostData::RandomFp8 { seed, std: 0.02 },
                };
                let want = CpuTensor::new(shape.clone(), host.to_f32());
                let got = s.cuda.upload(&host)?;
                s.check("upload", &case, Tol::EXACT, &got, &want)?;
                Ok(())
            })?;
        }
        self.run("upload", "fp8 [37, 300]", |s| {
            let host = s.fp8_host(&[37, 300]);
            let want = CpuTensor::new(vec![37, 300], host.to_f32());
            let got = s.cuda.upload(&host)?;
            s.check("upload", "fp8 [37, 300]", Tol::EXACT, &got, &want)?;
            Ok(())
        })?;
        self.uploads_nvfp4()
    }
}
