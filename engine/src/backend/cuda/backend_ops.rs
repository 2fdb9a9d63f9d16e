//! The [`Backend`] trait's ops on the CUDA backend: each op's host-side checks, then the
//! launcher of the module that owns it (`norm.rs`, `attention.rs`, `moe.rs`, ...). Split from
//! `mod.rs`, which keeps the
//! backend's state, construction and launch helpers.

use super::*;

impl Backend for CudaBackend {
    type Tensor = CudaTensor;
    type Batch = CudaBatch;

    fn name(&self) -> &'static str {
        "cuda"
    }

    fn describe(&self) -> String {
        let i = &self.info;
        format!(
            "{} ({}, {} SMs, {:.0} GiB, CUDA driver {}.{}, NVRTC {}.{}){}",
            i.name,
            i.arch,
            i.multiprocessors,
            i.total_memory as f64 / (1u64 << 30) as f64,
            i.driver_version / 1000,
            (i.driver_version % 1000) / 10,
            i.nvrtc_version.0,
            i.nvrtc_version.1,
            if self.compute == DType::F32 {
                ", float32"
            } else {
                ""
            }
        )
    }

    fn memory_info(&self) -> Option<(usize, usize)> {
        self.ctx.mem_get_info().ok()
    }

    fn kv_head_bytes(&self, head_dim: usize) -> usize {
        if self.kv_fp8 {
            crate::backend::kv_fp8::fp8_head_bytes(head_dim)
        } else {
            self.compute.size() * head_dim
        }
    }

    fn kv_cache_fp8(&self) -> bool {
        self.kv_fp8
    }

    fn kv_zeros(&self, shape: &[usize]) -> Result<CudaTensor> {
        if !self.kv_fp8 {
            return self.zeros(shape);
        }
        let buf = self.raw_alloc(tensor::fp8_alloc_bytes(shape), true)?;
        Ok(CudaTensor {
            shape: shape.to_vec(),
            dtype: DType::F8,
            buf,
        })
    }

    fn upload_f32_weight(&self, t: &HostTensor<'_>) -> Result<CudaTensor> {
        match &t.data {
            // The same stream HostData::Random's values come from, drawn on the device.
            HostData::Random { seed, std } => self.random(&t.shape, DType::F32, *seed, *std),
            _ => self.tensor_from_f32(&t.shape, &t.to_f32(), DType::F32),
        }
    }

    fn upload(&self, t: &HostTensor<'_>) -> Result<CudaTensor> {
        let n = t.numel();
        match &t.data {
            HostData::Raw { dtype, bytes } => {
                check("upload", bytes.len() == n * dtype.size(), || {
                    format!("{} bytes for {:?} of {dtype:?}", bytes.len(), t.shape)
                })?;
                match (dtype, self.compute) {
                    (HostDType::BF16, DType::BF16) => {
                        self.tensor_from_bytes(&t.shape, DType::BF16, bytes)
                    }
                    (_, DType::F32) => self.tensor_from_f32(&t.shape, &t.to_f32(), DType::F32),
                    _ => {
                        let bytes = tensor::f32_to_bf16_bytes(&t.to_f32());
                        self.tensor_from_bytes(&t.shape, DType::BF16, &bytes)
                    }
                }
            }
            HostData::Random { seed, std } => self.random(&t.shape, self.compute, *seed, *std),
            // The float32 path computes with the CPU reference's dequantized values: e4m3 ·
            // scale in f32, on the host for a checkpoint (the CPU loader's own function), on the
            // device for dummy weights (the same product, bit for bit).
            HostData::Fp8 { .. } if self.compute == DType::F32 => {
                self.tensor_from_f32(&t.shape, &t.to_f32(), DType::F32)
            }
            HostData::RandomFp8 { seed, std } if self.compute == DType::F32 => {
                self.random_fp8_as_f32(&t.shape, *seed, *std)
            }
            HostData::Fp8 {
                bytes,
                scales,
                col_block,
            } => self.upload_fp8(&t.shape, bytes, scales, *col_block),
            HostData::RandomFp8 { seed, std } => self.random_fp8(&t.shape, *seed, *std),
            // NVFP4 (a checkpoint's, or --requantize's): kept packed (DType::F4, nvfp4.rs) for
            // bf16 compute on weights whose rows are whole 32-value chunks: 2-D weights and the
            // MoE experts' 3-D stacks (rows [E · rows, cols], each expert's global repeated over
            // its rows; moe_fp4.rs); otherwise (the float32 path, other shapes) the CPU
            // reference's dequantized values, widened to the compute type.
            HostData::Nvfp4 {
                packed,
                scales,
                globals,
                rule,
            } if self.compute == DType::BF16
                && matches!(t.shape.len(), 2 | 3)
                && t.cols().is_multiple_of(32) =>
            {
                self.upload_nvfp4(&t.shape, packed, scales, globals, *rule)
            }
            // Dummy NVFP4: drawn packed on the device wherever a checkpoint's NVFP4 stays
            // packed; the float32 path and rows of 16 (not 32) values take the CPU reference's
            // values from the host.
            HostData::RandomNvfp4 { seed, std }
                if self.compute == DType::BF16
                    && matches!(t.shape.len(), 2 | 3)
                    && t.cols().is_multiple_of(32) =>
            {
                self.random_nvfp4(&t.shape, *seed, *std)
            }
            // MXFP4 expert stacks (gpt-oss's checkpoints, and their dummies drawn on the
            // device) stay packed (DType::Mx4, moe_fp4.rs) for bf16 compute; the float32 path
            // and other shapes take the CPU reference's exact values, as NVFP4's do.
            HostData::Mxfp4 { packed, scales }
                if self.compute == DType::BF16
                    && t.shape.len() == 3
                    && t.cols().is_multiple_of(32) =>
            {
                self.upload_mxfp4(&t.shape, packed, scales)
            }
            HostData::RandomMxfp4 { seed, std }
                if self.compute == DType::BF16
                    && t.shape.len() == 3
                    && t.cols().is_multiple_of(32) =>
            {
                self.random_mxfp4(&t.shape, *seed, *std)
            }
            HostData::Nvfp4 { .. }
            | HostData::RandomNvfp4 { .. }
            | HostData::Mxfp4 { .. }
            | HostData::RandomMxfp4 { .. } => match self.compute {
                DType::F32 => self.tensor_from_f32(&t.shape, &t.to_f32(), DType::F32),
                _ => {
                    let bytes = tensor::f32_to_bf16_bytes(&t.to_f32());
                    self.tensor_from_bytes(&t.shape, DType::BF16, &bytes)
                }
            },
            HostData::Constant(c) => {
                let mut out = self.alloc(&t.shape, self.compute)?;
                self.fill_const(&mut out, *c)?;
                Ok(out)
            }
        }
    }

    fn zeros(&self, shape: &[usize]) -> Result<CudaTensor> {
        let numel: usize = shape.iter().product();
        let buf = self.raw_alloc(tensor::alloc_bytes(numel, self.compute), true)?;
        Ok(CudaTensor {
            shape: shape.to_vec(),
            dtype: self.compute,
            buf,
        })
    }

    fn to_host(&self, t: &CudaTensor) -> Result<Vec<f32>> {
        let n = t.num_bytes();
        if n == 0 {
            return Ok(Vec::new());
        }
        let mut bytes = vec![0u8; n];
        self.stream
            .memcpy_dtoh(&t.buf.slice(0..n), &mut bytes)
            .map_err(dev_err("download"))?;
        self.synchronize()?;
        Ok(match t.dtype {
            DType::F8 => tensor::fp8_bytes_to_f32(&bytes, &t.shape),
            d => tensor::bytes_to_f32(&bytes, d),
        })
    }

    fn shape<'t>(&self, t: &'t CudaTensor) -> &'t [usize] {
        &t.shape
    }

    fn prepare_batch(&self, b: &BatchInputs) -> Result<CudaBatch> {
        let tables = self.tables.lock().unwrap_or_else(|e| e.into_inner());
        let views = super::block_tables::views(&tables, self);
        CudaBatch::grouped(
            &self.stream,
            b,
            self.tuning().attention.flash_min_rows,
            &views,
        )
    }

    fn embedding(&self, out: &mut CudaTensor, batch: &CudaBatch, table: &CudaTensor) -> Result<()> {
        self.embedding_op(out, batch, table)
    }

    fn rms_norm(
        &self,
        out: &mut CudaTensor,
        x: &CudaTensor,
        w: &CudaTensor,
        eps: f32,
    ) -> Result<()> {
        self.rms_norm_op(out, x, w, eps)
    }

    fn add_rms_norm(
        &self,
        out: &mut CudaTensor,
        residual: &mut CudaTensor,
        x: &CudaTensor,
        w: &CudaTensor,
        eps: f32,
    ) -> Result<()> {
        self.add_rms_norm_op(out, residual, x, w, eps)
    }

    fn matmul(&self, out: &mut CudaTensor, x: &CudaTensor, w: &CudaTensor) -> Result<()> {
        self.matmul_op(out, x, w)
    }

    fn qk_norm_rope(
        &self,
        qkv: &mut CudaTensor,
        batch: &CudaBatch,
        q_w: &CudaTensor,
        k_w: &CudaTensor,
        rope: &RopeTables,
        num_heads: usize,
        num_kv_heads: usize,
        eps: f32,
    ) -> Result<()> {
        self.qk_norm_rope_op(
            qkv,
            batch,
            q_w,
            k_w,
            rope,
            num_heads,
            num_kv_heads,
            eps,
            None,
        )
    }

    fn qk_norm_rope_write_kv(
        &self,
        qkv: &mut CudaTensor,
        batch: &CudaBatch,
        q_w: &CudaTensor,
        k_w: &CudaTensor,
        rope: &RopeTables,
        (num_heads, num_kv_heads, eps): (usize, usize, f32),
        k_cache: &mut CudaTensor,
        v_cache: &mut CudaTensor,
    ) -> Result<()> {
        self.qk_norm_rope_op(
            qkv,
            batch,
            q_w,
            k_w,
            rope,
            num_heads,
            num_kv_heads,
            eps,
            Some((k_cache, v_cache)),
        )
    }

    fn write_kv(
        &self,
        k_cache: &mut CudaTensor,
        v_cache: &mut CudaTensor,
        qkv: &CudaTensor,
        batch: &CudaBatch,
        num_heads: usize,
    ) -> Result<()> {
        self.write_kv_op(k_cache, v_cache, qkv, batch, num_heads)
    }

    fn paged_attention(
        &self,
        out: &mut CudaTensor,
        qkv: &CudaTensor,
        k_cache: &CudaTensor,
        v_cache: &CudaTensor,
        batch: &CudaBatch,
        num_heads: usize,
        scale: f32,
    ) -> Result<()> {
        self.paged_attention_op(out, qkv, k_cache, v_cache, batch, num_heads, scale)
    }

    fn paged_attention_window(
        &self,
        out: &mut CudaTensor,
        qkv: &CudaTensor,
        k_cache: &CudaTensor,
        v_cache: &CudaTensor,
        batch: &CudaBatch,
        num_heads: usize,
        scale: f32,
        window: usize,
    ) -> Result<()> {
        self.paged_attention_window_op(out, qkv, k_cache, v_cache, batch, num_heads, scale, window)
    }

    fn paged_attention_sinks(
        &self,
        out: &mut CudaTensor,
        qkv: &CudaTensor,
        k_cache: &CudaTensor,
        v_cache: &CudaTensor,
        batch: &CudaBatch,
        heads: (usize, f32),
        window: Option<usize>,
        sinks: &CudaTensor,
    ) -> Result<()> {
        self.paged_attention_sinks_op(out, qkv, k_cache, v_cache, batch, heads, window, sinks)
    }

    fn add_bias(&self, x: &mut CudaTensor, bias: &CudaTensor) -> Result<()> {
        self.add_bias_op(x, bias)
    }

    fn matmul_bias(
        &self,
        out: &mut CudaTensor,
        x: &CudaTensor,
        w: &CudaTensor,
        bias: &CudaTensor,
    ) -> Result<()> {
        if self.gemv_bias_op(out, x, w, bias)? {
            return Ok(());
        }
        self.matmul_op(out, x, w)?;
        self.add_bias_op(out, bias)
    }

    fn fused_moe_clamped(
        &self,
        out: &mut CudaTensor,
        x: &CudaTensor,
        router_logits: &CudaTensor,
        experts: &ClampedExperts<'_, CudaTensor>,
        top_k: usize,
    ) -> Result<()> {
        self.fused_moe_clamped_op(out, x, router_logits, experts, top_k, None)
    }

    fn routed_moe_clamped(
        &self,
        out: &mut CudaTensor,
        x: &CudaTensor,
        router: (&CudaTensor, &CudaTensor),
        router_logits: &mut CudaTensor,
        experts: &ClampedExperts<'_, CudaTensor>,
        top_k: usize,
    ) -> Result<()> {
        self.routed_moe_clamped_op(out, x, router, router_logits, experts, top_k)
    }

    fn rms_norm_cols(
        &self,
        x: &mut CudaTensor,
        start: usize,
        weight: &CudaTensor,
        eps: f32,
    ) -> Result<()> {
        self.rms_norm_cols_op(x, start, weight, eps)
    }

    fn fused_moe_sigmoid(
        &self,
        out: &mut CudaTensor,
        x: &CudaTensor,
        router_logits: &CudaTensor,
        bias: &CudaTensor,
        experts: (&CudaTensor, &CudaTensor),
        routing: SigmoidRouting,
    ) -> Result<()> {
        self.fused_moe_sigmoid_op(out, x, router_logits, bias, experts, routing)
    }

    fn mla_rope_write_kv(
        &self,
        q: &mut CudaTensor,
        latent: &mut CudaTensor,
        batch: &CudaBatch,
        rope: &RopeTables,
        dims: MlaDims,
        interleaved: bool,
        cache: &mut CudaTensor,
    ) -> Result<()> {
        self.mla_rope_write_kv_op(q, latent, batch, rope, dims, interleaved, cache)
    }

    fn mla_attention(
        &self,
        out: &mut CudaTensor,
        q: &CudaTensor,
        kv_b: &CudaTensor,
        cache: &CudaTensor,
        batch: &CudaBatch,
        dims: MlaDims,
        scale: f32,
    ) -> Result<()> {
        self.mla_attention_op(out, q, kv_b, cache, batch, dims, scale)
    }

    fn supports(&self, feature: Feature) -> bool {
        // The table `metralectl` also reads, so a recipe is refused before its download.
        metrale_protocol::support::cuda_supports(feature)
    }

    fn fused_moe(
        &self,
        out: &mut CudaTensor,
        x: &CudaTensor,
        router_logits: &CudaTensor,
        gate_up: &CudaTensor,
        down: &CudaTensor,
        top_k: usize,
        norm_topk_prob: bool,
    ) -> Result<()> {
        self.fused_moe_op(out, x, router_logits, gate_up, down, top_k, norm_topk_prob)
    }

    fn routed_moe(
        &self,
        out: &mut CudaTensor,
        x: &CudaTensor,
        router: &CudaTensor,
        router_logits: &mut CudaTensor,
        experts: (&CudaTensor, &CudaTensor),
        top_k: usize,
        norm_topk_prob: bool,
    ) -> Result<()> {
        self.routed_moe_op(
            out,
            x,
            router,
            router_logits,
            experts,
            top_k,
            norm_topk_prob,
        )
    }

    fn rope_write_kv(
        &self,
        qkv: &mut CudaTensor,
        batch: &CudaBatch,
        rope: &RopeTables,
        num_heads: usize,
        num_kv_heads: usize,
        k_cache: &mut CudaTensor,
        v_cache: &mut CudaTensor,
    ) -> Result<()> {
        self.rope_write_kv_op(qkv, batch, rope, num_heads, num_kv_heads, k_cache, v_cache)
    }

    fn gelu_tanh_mul(&self, out: &mut CudaTensor, gate_up: &CudaTensor) -> Result<()> {
        self.gelu_tanh_mul_op(out, gate_up)
    }

    fn scale(&self, x: &mut CudaTensor, factor: f32) -> Result<()> {
        self.scale_op(x, factor)
    }

    fn silu_mul(&self, out: &mut CudaTensor, gate_up: &CudaTensor) -> Result<()> {
        self.silu_mul_op(out, gate_up)
    }

    fn matmul_silu_mul(
        &self,
        out: &mut CudaTensor,
        gate_up: &mut CudaTensor,
        x: &CudaTensor,
        w: &CudaTensor,
    ) -> Result<()> {
        if self.gemv_silu_op(out, x, w)? {
            return Ok(());
        }
        self.matmul_op(gate_up, x, w)?;
        self.silu_mul_op(out, gate_up)
    }

    fn gather_rows(&self, out: &mut CudaTensor, x: &CudaTensor, batch: &CudaBatch) -> Result<()> {
        self.gather_rows_op(out, x, batch)
    }

    fn log_softmax(&self, x: &mut CudaTensor) -> Result<()> {
        self.log_softmax_op(x)
    }

    fn sample(&self, logits: &CudaTensor, rows: &[SampleRow<'_>]) -> Result<Vec<Sampled>> {
        self.sample_op(logits, rows)
    }

    fn draft_head(&self, head: &CudaTensor) -> Result<Option<CudaTensor>> {
        self.draft_head_op(head)
    }

    fn end_sequences(&self, seqs: &[u64]) {
        self.end_sequences_op(seqs);
    }

    fn kv_groups(&self) -> bool {
        true
    }

    fn group_batch<'a>(&self, batch: &'a CudaBatch, group: usize) -> Result<&'a CudaBatch> {
        batch.group(group)
    }

    fn keep_block_tables(&self, groups: usize, rows: usize, width: usize) -> Result<Option<u32>> {
        self.keep_block_tables_op(groups, rows, width)
    }

    fn write_block_tables(&self, group: usize, writes: &[TableWrite<'_>]) -> Result<()> {
        self.write_block_tables_op(group, writes)
    }

    fn graph_buckets(&self) -> Option<&'static [usize]> {
        Some(graph::BUCKETS)
    }

    fn graph_forward_many(
        &self,
        batch_inputs: &BatchInputs,
        outputs: usize,
        forward: &mut ForwardMany<'_, CudaBackend>,
    ) -> Result<Option<Vec<CudaTensor>>> {
        self.graph_forward_op(batch_inputs, outputs, forward)
    }

    fn graph_chain(
        &self,
        hosts: &[BatchInputs],
        inputs: &[&CudaTensor],
        outputs: usize,
        forward: &mut ChainForward<'_, CudaBackend>,
    ) -> Result<Option<Vec<CudaTensor>>> {
        self.graph_chain_op(hosts, inputs, outputs, forward)
    }

    fn argmax_ids(&self, ids: &mut CudaTensor, row: usize, logits: &CudaTensor) -> Result<()> {
        self.argmax_ids_op(ids, row, logits)
    }

    fn feed_tokens(&self, batch: &CudaBatch, ids: &CudaTensor, row: usize) -> Result<()> {
        self.feed_tokens_op(batch, ids, row)
    }
}
