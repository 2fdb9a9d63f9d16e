//! The MTP head of a Qwen3.5 hybrid (`mtp.*`, speculative decoding): the full pass that drafts
//! ([`Model::mtp_forward`](crate::models::Model::mtp_forward)) and the keys-only pass of a
//! step in which nobody drafts ([`Model::mtp_fill_cache`](crate::models::Model::mtp_fill_cache)).

use crate::backend::{Backend, BatchInputs, HybridOps, Result};
use crate::models::{KvStorage, lm_head_logits};

use super::{Bufs, Layer, Mixer, Qwen3_5, shape_err};

/// The checkpoint's multi-token-prediction block (`mtp.*`), loaded for speculative decoding:
/// `x = fc([norm_e(embed(t)); norm_h(h)])`, one gated full-attention decoder layer (its keys
/// and values in the KV cache's last layer), then `norm`; logits through the target's head.
/// `fc` is kept as its two halves: `x = e · fc_eᵀ + g · fc_gᵀ`.
pub(super) struct MtpHead<B: Backend> {
    pub(super) fc_embed: B::Tensor,    // [H, H]: fc's first H columns
    pub(super) fc_hidden: B::Tensor,   // [H, H]: its last H
    pub(super) norm_embed: B::Tensor,  // [H], 1 + w
    pub(super) norm_hidden: B::Tensor, // [H], 1 + w
    pub(super) layer: Layer<B>,
    pub(super) norm: B::Tensor, // [H], 1 + w
}

impl<B: HybridOps> Qwen3_5<B> {
    /// The MTP head's input over the batch, in `Bufs::x`: `fc([norm_e(embed(t)); norm_h(h)])`
    /// for each row's next token `t` and target hidden state `h`.
    fn mtp_input(
        &self,
        b: &B,
        host: &BatchInputs,
        batch: &B::Batch,
        hidden: &B::Tensor,
    ) -> Result<(&MtpHead<B>, Bufs<B::Tensor>)> {
        let m = self.mtp.as_ref().ok_or_else(|| {
            shape_err("mtp_forward: the model was loaded without its MTP head".into())
        })?;
        let c = &self.config.base;
        let (t, h, eps) = (host.num_tokens(), c.hidden_size, c.rms_norm_eps);
        if b.shape(hidden) != [t, h] {
            return Err(shape_err(format!(
                "mtp_forward: hidden {:?} for {t} rows of width {h}",
                b.shape(hidden)
            )));
        }
        let mut e = b.zeros(&[t, h])?;
        b.embedding(&mut e, batch, &self.embed)?;
        let mut en = b.zeros(&[t, h])?;
        b.rms_norm(&mut en, &e, &m.norm_embed, eps)?;
        let mut hn = b.zeros(&[t, h])?;
        b.rms_norm(&mut hn, hidden, &m.norm_hidden, eps)?;
        let mut f = self.bufs(b, t)?;
        b.matmul(&mut f.x, &en, &m.fc_embed)?;
        b.matmul(&mut f.proj, &hn, &m.fc_hidden)?;
        b.add_assign(&mut f.x, &f.proj)?;
        Ok((m, f))
    }

    /// One pass of the head: the logits of `host.logits_rows` and the head's normed output
    /// for them (the next draft's hidden input).
    pub(super) fn mtp_pass(
        &self,
        b: &B,
        host: &BatchInputs,
        batch: &B::Batch,
        hidden: &B::Tensor,
        kv: &mut KvStorage<B>,
    ) -> Result<(B::Tensor, B::Tensor)> {
        let (m, mut f) = self.mtp_input(b, host, batch, hidden)?;
        let (h, eps) = (self.config.base.hidden_size, self.config.base.rms_norm_eps);
        let kv = (kv.k.as_mut_slice(), kv.v.as_mut_slice());
        // The head's layer, its output normed by the head's norm: the next draft's hidden input
        // and its logits.
        b.rms_norm(&mut f.xn, &f.x, &m.layer.input_norm, eps)?;
        self.run_layer(b, &m.layer, &mut f, host, batch, kv, None, &m.norm)?;
        let head = self.draft_head.as_ref().unwrap_or(self.head());
        let logits = lm_head_logits(b, &f.xn, host, batch, head)?;
        let mut rows = b.zeros(&[host.logits_rows.len(), h])?;
        b.gather_rows(&mut rows, &f.xn, batch)?;
        Ok((logits, rows))
    }

    /// The head's keys and values for every row, nothing else.
    pub(super) fn mtp_keys(
        &self,
        b: &B,
        host: &BatchInputs,
        batch: &B::Batch,
        hidden: &B::Tensor,
        kv: &mut KvStorage<B>,
    ) -> Result<()> {
        let (m, mut f) = self.mtp_input(b, host, batch, hidden)?;
        let Mixer::Full(a) = &m.layer.mixer else {
            return Err(shape_err(
                "the MTP layer is not a full-attention layer".into(),
            ));
        };
        let c = &self.config.base;
        let (t, hd, nh, nkv) = (
            host.num_tokens(),
            c.head_dim,
            c.num_attention_heads,
            c.num_key_value_heads,
        );
        // xn = norm(x); k, v = QK-normed, roped projections of xn into the head's cache layer.
        // The layer's attention, MLP and output norm feed only the drafts: skipped.
        b.rms_norm(&mut f.xn, &f.x, &m.layer.input_norm, c.rms_norm_eps)?;
        let mut qkv = b.zeros(&[t, (nh + 2 * nkv) * hd])?;
        b.matmul(&mut qkv, &f.xn, &a.qkv)?;
        let (k, v) = match (kv.k.get_mut(a.cache), kv.v.get_mut(a.cache)) {
            (Some(k), Some(v)) => (k, v),
            _ => {
                return Err(shape_err(format!(
                    "KV cache layer {} was not allocated",
                    a.cache
                )));
            }
        };
        b.qk_norm_rope_write_kv(
            &mut qkv,
            batch,
            &a.q_norm,
            &a.k_norm,
            &self.rope,
            (nh, nkv, c.rms_norm_eps),
            k,
            v,
        )
    }
}
