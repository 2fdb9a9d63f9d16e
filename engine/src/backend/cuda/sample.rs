//! `sample`: greedy rows without penalties or logprobs take a device argmax (4 bytes a row come
//! back); every other row is copied to the host and goes through the host sampler
//! (`sampling::sample_row`), so the CUDA backend draws exactly the CPU backend's tokens.

use cudarc::driver::PushKernelArg;
use metrale_kernels::Module;
use rayon::prelude::*;

use super::elementwise::{cfg, dim, int};
use super::tensor::{self, CudaTensor, DType};
use super::{CudaBackend, check, dev_err};
use crate::backend::Result;
use crate::backend::sampling::{self, SampleRow, Sampled};

/// Threads of an argmax block (ARGMAX_THREADS in softmax.cu).
const ARGMAX_THREADS: u32 = 1024;

/// Does the host sampler reduce to a plain argmax for this row?
fn plain_greedy(r: &SampleRow<'_>) -> bool {
    let p = r.params;
    let output_len = r
        .all_token_ids
        .len()
        .saturating_sub(r.num_prompt_tokens.min(r.all_token_ids.len()));
    let masks_stop =
        output_len < p.min_tokens && !(p.eos_token_ids.is_empty() && p.stop_token_ids.is_empty());
    p.is_greedy()
        && p.repetition_penalty == 1.0
        && p.frequency_penalty == 0.0
        && p.presence_penalty == 0.0
        && p.logprobs.is_none()
        && !masks_stop
}

impl CudaBackend {
    pub(super) fn sample_op(
        &self,
        logits: &CudaTensor,
        rows: &[SampleRow<'_>],
    ) -> Result<Vec<Sampled>> {
        check(
            "sample",
            rows.iter().all(|r| r.logits_row < logits.rows()),
            || {
                format!(
                    "logits {:?} for rows {:?}",
                    logits.shape,
                    rows.iter().map(|r| r.logits_row).collect::<Vec<_>>()
                )
            },
        )?;
        let (on_device, on_host): (Vec<usize>, Vec<usize>) =
            (0..rows.len()).partition(|&i| logits.dtype == DType::F32 && plain_greedy(&rows[i]));
        let mut out: Vec<Option<Sampled>> = vec![None; rows.len()];
        if !on_device.is_empty() {
            let which: Vec<u32> = on_device
                .iter()
                .map(|&i| rows[i].logits_row as u32)
                .collect();
            for (&i, token_id) in on_device.iter().zip(self.argmax(logits, &which)?) {
                out[i] = Some(Sampled {
                    token_id,
                    logprobs: None,
                });
            }
        }
        let host_rows: Vec<Vec<f32>> = on_host
            .iter()
            .map(|&i| self.download_row(logits, rows[i].logits_row))
            .collect::<Result<_>>()?;
        let drawn: Vec<Sampled> = on_host
            .par_iter()
            .zip(&host_rows)
            .map(|(&i, row)| sampling::sample_row(row, &rows[i]))
            .collect();
        for (&i, s) in on_host.iter().zip(drawn) {
            out[i] = Some(s);
        }
        Ok(out.into_iter().flatten().collect())
    }

    /// The index of the largest logit of each of `which` rows (lowest index on ties).
    fn argmax(&self, logits: &CudaTensor, which: &[u32]) -> Result<Vec<u32>> {
        let vocab = int(logits.cols(), "sample")?;
        let s = &self.stream;
        let rows = s
            .clone_htod(which)
            .map_err(dev_err("sample: upload rows"))?;
        // SAFETY: fully written by the kernel below (one u32 per row) before it is read.
        let ids = unsafe { s.alloc::<u32>(which.len()) }.map_err(dev_err("sample: allocation"))?;
        let name = "argmax_f32";
        let f = self.func(Module::Softmax, name)?;
        let (o, x) = (
            cudarc::driver::DevicePtr::device_ptr(&ids, s).0,
            logits.ptr(s),
        );
        let r = cudarc::driver::DevicePtr::device_ptr(&rows, s).0;
        let mut a = s.launch_builder(&f);
        a.arg(&o).arg(&x).arg(&r).arg(&vocab);
        // SAFETY: logits is [R, vocab] f32 and every row index is below R (checked by the
        // caller); ids and rows hold one u32 per block; the block size matches the kernel's
        // shared arrays (ARGMAX_THREADS).
        let res = unsafe { a.launch(cfg((dim(which.len(), "sample")?, 1), ARGMAX_THREADS)) };
        self.launched(name, res)?;
        let ids = s.clone_dtoh(&ids).map_err(dev_err("sample: download"))?;
        self.synchronize()?;
        Ok(ids)
    }

    fn download_row(&self, logits: &CudaTensor, row: usize) -> Result<Vec<f32>> {
        let width = logits.cols() * logits.dtype.size();
        let mut bytes = vec![0u8; width];
        if width > 0 {
            self.stream
                .memcpy_dtoh(
                    &logits.buf.slice(row * width..(row + 1) * width),
                    &mut bytes,
                )
                .map_err(dev_err("sample: download"))?;
            self.synchronize()?;
        }
        Ok(tensor::bytes_to_f32(&bytes, logits.dtype))
    }
}
