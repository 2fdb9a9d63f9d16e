#!/usr/bin/env python3
"""Train the demo hybrid: a tiny Qwen3.5-family model (Gated DeltaNet + gated full attention)
with its multi-token-prediction (MTP) block, from scratch, on the demo corpus, within a
wall-clock budget. What `models/demo-hybrid/` ships: the model on which the engine measures
speculative decoding's acceptance on a real model (docs/speculative.md).

The trunk is transformers' `Qwen3_5ForCausalLM` in its default layer pattern (3 linear-attention
layers, then 1 full-attention layer). The MTP block is Qwen3.5's, computed here exactly as the
engine computes it (`engine/src/models/qwen3_5.rs`, `mtp_forward`): for the trunk's final-normed
hidden state `h_i` at position i and the next token `t_{i+1}`, at position i,

    x = fc([rms_norm(embed(t_{i+1}), pre_fc_norm_embedding) ; rms_norm(h_i, pre_fc_norm_hidden)])
    x = layers.0(x)                 # a gated full-attention decoder layer (causal over the block's rows)
    logits = lm_head(rms_norm(x, norm))   # the trunk's (tied) head; norms multiply by 1 + w

trained to predict t_{i+2} (DeepSeek-V3's and Qwen3.5's MTP objective). Loss = LM loss +
--mtp-weight x MTP loss; gradients of the MTP loss reach the trunk too.

It reuses the demo model's tokenizer (`models/demo/`: no new tokenizer) and train.py's data
loading and schedule, and writes, in bf16: `model.safetensors` (the trunk, transformers' layout),
`mtp.safetensors` (`mtp.*`, beside it, where the engine reads it), `config.json` (with
`mtp_num_hidden_layers: 1`), and the demo's tokenizer files and generation config.

    python3 scripts/demo_model/make_corpus.py --out /tmp/c --target-mb 8
    python3 scripts/demo_model/train_hybrid.py --corpus /tmp/c/corpus.txt --out models/demo-hybrid \
        --max-minutes 30
"""

import argparse
import json
import os
import random
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from train import SAMPLE_PROMPTS, fail, load_tokens, log, lr_at  # noqa: E402

DEMO = os.path.join(ROOT, "models", "demo")


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", required=True, help="corpus.txt from make_corpus.py")
    ap.add_argument("--tokenizer", default=DEMO, help="tokenizer directory (default: the demo model's)")
    ap.add_argument("--out", required=True, help="checkpoint directory to write")
    ap.add_argument("--report", default=None, help="write a JSON summary (losses, samples) here")
    ap.add_argument("--max-minutes", type=float, default=30.0, help="wall-clock budget for the whole script")
    ap.add_argument("--reserve-seconds", type=float, default=90.0, help="kept back for evaluation, saving, samples")
    ap.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (0: only the budget)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1234)
    # shape
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4, help="transformers' pattern: every 4th is full attention")
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=32)
    ap.add_argument("--linear-key-heads", type=int, default=2)
    ap.add_argument("--linear-value-heads", type=int, default=4)
    ap.add_argument("--linear-head-dim", type=int, default=32)
    ap.add_argument("--intermediate", type=int, default=384)
    ap.add_argument("--max-positions", type=int, default=2048)
    # optimisation
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.05)
    ap.add_argument("--warmup-steps", type=int, default=30)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--mtp-weight", type=float, default=0.5, help="weight of the MTP loss")
    # data (train.py's load_tokens reads these)
    ap.add_argument("--max-corpus-mb", type=float, default=0)
    ap.add_argument("--bpe-dropout", type=float, default=0.1)
    ap.add_argument("--bpe-dropout-frac", type=float, default=0.25)
    ap.add_argument("--val-frac", type=float, default=0.01)
    ap.add_argument("--log-every-seconds", type=float, default=30.0)
    ap.add_argument("--size-limit-mb", type=float, default=8.0, help="fail if the checkpoint is larger")
    ap.add_argument("--sample-tokens", type=int, default=60)
    ap.add_argument("--max-final-loss", type=float, default=3.0, help="fail if the held-out LM loss is above")
    return ap.parse_args()


def make_config(args, vocab_size, ids):
    from transformers import Qwen3_5TextConfig

    cfg = Qwen3_5TextConfig(
        vocab_size=vocab_size,
        hidden_size=args.hidden,
        intermediate_size=args.intermediate,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        head_dim=args.head_dim,
        linear_conv_kernel_dim=4,
        linear_key_head_dim=args.linear_head_dim,
        linear_value_head_dim=args.linear_head_dim,
        linear_num_key_heads=args.linear_key_heads,
        linear_num_value_heads=args.linear_value_heads,
        tie_word_embeddings=True,
        max_position_embeddings=args.max_positions,
        rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0, "partial_rotary_factor": 0.25},
        bos_token_id=ids["<|endoftext|>"],
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=None,
    )
    full = [i for i, t in enumerate(cfg.layer_types) if t == "full_attention"]
    if not full:
        fail(f"layer pattern {cfg.layer_types} has no full-attention layer (the MTP block is one)")
    return cfg, full[0]


def make_mtp(config, full_index):
    """The MTP block's modules; its decoder layer is transformers' full-attention layer."""
    import torch
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5DecoderLayer, Qwen3_5RMSNorm

    h, eps = config.hidden_size, config.rms_norm_eps
    mtp = torch.nn.ModuleDict({
        "fc": torch.nn.Linear(2 * h, h, bias=False),
        "pre_fc_norm_embedding": Qwen3_5RMSNorm(h, eps),
        "pre_fc_norm_hidden": Qwen3_5RMSNorm(h, eps),
        "layers": torch.nn.ModuleList([Qwen3_5DecoderLayer(config, full_index)]),
        "norm": Qwen3_5RMSNorm(h, eps),
    })
    with torch.no_grad():
        for name, p in mtp.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, config.initializer_range)
    return mtp


def unit_lower_inverse(t):
    """(I + strictly_lower(t))^-1 for [..., n, n] (n a power of two), by block forward
    substitution in log2(n) levels of batched matmuls: [[A, 0], [C, B]]^-1 is
    [[A^-1, 0], [-B^-1 C A^-1, B^-1]], A and B inverted together."""
    import torch

    n = t.shape[-1]
    if n == 1:
        return torch.ones_like(t)
    h = n // 2
    both = unit_lower_inverse(torch.stack([t[..., :h, :h], t[..., h:, h:]]))
    ai, bi = both[0], both[1]
    low = -(bi @ t[..., h:, :h] @ ai)
    return torch.cat([torch.cat([ai, torch.zeros_like(ai)], -1), torch.cat([low, bi], -1)], -2)


def fast_triangular_solve():
    """transformers' torch reference of the chunked gated delta rule solves its 64 x 64 unit
    lower-triangular systems with torch.linalg.solve_triangular, which on the CPU takes most of
    a training step (forward and backward); the same solve as matmuls is several times faster.
    Only this script's process is patched (the reference in tests/fixtures/ is transformers' own)."""
    import torch

    solve = torch.linalg.solve_triangular

    def patched(a, b, *, upper, left=True, unitriangular=False, out=None):
        if upper or not left or not unitriangular or out is not None or a.shape[-1] & (a.shape[-1] - 1):
            return solve(a, b, upper=upper, left=left, unitriangular=unitriangular, out=out)
        return unit_lower_inverse(a) @ b

    torch.linalg.solve_triangular = patched


def losses(model, mtp, x):
    """LM loss, MTP loss and the MTP block's top-1 agreement with the trunk's own argmax one
    position later (what the engine's first draft needs to be accepted under greedy)."""
    import torch
    import torch.nn.functional as F

    trunk = model.model
    hn = trunk(input_ids=x).last_hidden_state  # [B, T, H], final-normed
    head = model.lm_head
    logits = head(hn)  # [B, T, V]
    v = logits.shape[-1]
    lm = F.cross_entropy(logits[:, :-1].reshape(-1, v), x[:, 1:].reshape(-1))
    # MTP rows i = 0..T-3: h_i and t_{i+1} at position i, target t_{i+2}.
    b, t = x.shape
    n = t - 2
    e = trunk.embed_tokens(x[:, 1:t - 1])
    z = mtp["fc"](torch.cat([mtp["pre_fc_norm_embedding"](e), mtp["pre_fc_norm_hidden"](hn[:, :n])], dim=-1))
    pos = torch.arange(n, device=x.device).view(1, 1, -1).expand(3, b, -1)
    causal = torch.full((n, n), float("-inf"), device=x.device).triu(1)[None, None]  # [1, 1, n, n]
    z = mtp["layers"][0](z, position_embeddings=trunk.rotary_emb(z, pos), attention_mask=causal)
    mlogits = head(mtp["norm"](z))
    mloss = F.cross_entropy(mlogits.reshape(-1, v), x[:, 2:].reshape(-1))
    with torch.no_grad():
        agree = (mlogits.argmax(-1) == logits[:, 1:t - 1].argmax(-1)).float().mean()
    return lm, mloss, agree


def save(model, mtp, args, out, ids, summary):
    import torch
    from safetensors.torch import save_file

    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(out)
    model = model.to(torch.bfloat16)
    model.config.dtype = torch.bfloat16
    model.config.use_cache = True
    model.save_pretrained(out, safe_serialization=True)
    tensors = {f"mtp.{k}": v.detach().to(torch.bfloat16).contiguous() for k, v in mtp.state_dict().items()}
    save_file(tensors, os.path.join(out, "mtp.safetensors"), metadata={"format": "pt"})
    cfg_path = os.path.join(out, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    cfg["mtp_num_hidden_layers"] = 1
    cfg["architectures"] = ["Qwen3_5ForCausalLM"]
    with open(cfg_path, "w") as f:
        json.dump(dict(sorted(cfg.items())), f, indent=2)
        f.write("\n")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(args.tokenizer, name), os.path.join(out, name))
    shutil.copy(os.path.join(DEMO, "generation_config.json"), os.path.join(out, "generation_config.json"))
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write(f"""---
license: apache-2.0
library_name: transformers
pipeline_tag: text-generation
tags: [qwen3_5, metrale, demo, mtp]
---

# Metrale demo hybrid

A tiny Qwen3.5-family hybrid (`Qwen3_5ForCausalLM`: {cfg['layer_types'].count('linear_attention')} Gated
DeltaNet layers and {cfg['layer_types'].count('full_attention')} gated full-attention layer, hidden
{args.hidden}) with its MTP block (`mtp.safetensors`, `mtp_num_hidden_layers: 1`), trained from
scratch on the Metrale demo corpus (text our own code generates; no third-party text), with the demo
model's tokenizer. {summary['parameters'] / 1e6:.2f}M parameters in the trunk, {summary['mtp_parameters'] / 1e6:.2f}M in the
MTP block. Held-out loss {summary['val_lm_loss']:.3f} (trunk), {summary['val_mtp_loss']:.3f} (MTP, token t+2). It exists so
that Metrale can measure speculative decoding on a real model on a CPU; its replies are simpler than
the demo model's. Reproduce with `scripts/demo_model/train_hybrid.py` (see its docstring).
Licence: the repository's (Apache-2.0).
""")


def samples(out, max_new):
    """Greedy chat replies from the saved trunk, reloaded from disk by transformers."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tk = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    res = []
    for p in SAMPLE_PROMPTS[:8]:
        text = tk.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                      add_generation_prompt=True, enable_thinking=False)
        enc = tk(text, return_tensors="pt", add_special_tokens=False)
        with torch.no_grad():
            gen = model.generate(**enc, max_new_tokens=max_new, do_sample=False, temperature=None,
                                 top_p=None, top_k=None)
        reply = tk.decode(gen[0, enc["input_ids"].shape[1]:], skip_special_tokens=False)
        res.append({"prompt": p, "reply": reply})
        log(f">>> {p}\n{reply}")
    return res


def main():
    args = parse_args()
    import torch
    from transformers import Qwen3_5ForCausalLM
    from transformers import logging as hf_logging

    hf_logging.set_verbosity_error()
    torch.set_num_threads(args.threads)
    fast_triangular_solve()
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    with open(os.path.join(args.tokenizer, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    ids = {t["content"]: t["id"] for t in tj["added_tokens"]}
    n_tok = max(max(tj["model"]["vocab"].values()), max(ids.values())) + 1
    vocab_size = (n_tok + 63) // 64 * 64
    train_np, val_np, n_docs, _ = load_tokens(args, args.tokenizer)
    log(f"data: {n_docs} documents -> {len(train_np) / 1e6:.2f}M train tokens, {len(val_np) / 1e3:.1f}K val")
    train_t, val_t = torch.from_numpy(train_np), torch.from_numpy(val_np)

    config, full_index = make_config(args, vocab_size, ids)
    model = Qwen3_5ForCausalLM(config)
    model.config.use_cache = False
    mtp = make_mtp(config, full_index)
    n_params = sum(p.numel() for p in model.parameters())
    n_mtp = sum(p.numel() for p in mtp.parameters())
    log(f"model: {config.layer_types}, hidden {args.hidden}, vocab {vocab_size}: {n_params / 1e6:.2f}M + MTP "
        f"{n_mtp / 1e6:.2f}M parameters = {(n_params + n_mtp) * 2 / 1e6:.1f} MB in bf16")
    if (n_params + n_mtp) * 2 / 1e6 > args.size_limit_mb:
        fail(f"the checkpoint would be over --size-limit-mb {args.size_limit_mb}")

    params = list(model.parameters()) + list(mtp.parameters())
    opt = torch.optim.AdamW([{"params": [p for p in params if p.dim() >= 2], "weight_decay": args.weight_decay},
                             {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    gen = torch.Generator().manual_seed(args.seed)
    offs = torch.arange(args.seq_len)

    def batch(src, bs):
        starts = torch.randint(0, len(src) - args.seq_len, (bs,), generator=gen)
        return src[starts[:, None] + offs].long()

    budget = args.max_minutes * 60.0 - args.reserve_seconds
    model.train()
    mtp.train()
    step, hist, start = 0, [], time.time()
    last = start
    while not (args.max_steps and step >= args.max_steps):
        progress = (time.time() - T0) / budget
        if args.max_steps:
            progress = max(progress, step / args.max_steps)
        if progress >= 1.0:
            break
        lr = lr_at(args, step, progress)
        for g in opt.param_groups:
            g["lr"] = lr
        lm, ml, agree = losses(model, mtp, batch(train_t, args.batch_size))
        (lm + args.mtp_weight * ml).backward()
        gn = torch.nn.utils.clip_grad_norm_(params, args.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        if time.time() - last >= args.log_every_seconds or step in (1, 10):
            last = time.time()
            hist.append((step, round(lm.item(), 4), round(ml.item(), 4), round(agree.item(), 4)))
            log(f"step {step:5d}  lm {lm.item():.4f}  mtp {ml.item():.4f}  agree {agree.item():.3f}  "
                f"lr {lr:.2e}  grad-norm {float(gn):.2f}  {step * args.batch_size * args.seq_len / (last - start):.0f} tok/s")
    train_secs = time.time() - start
    log(f"stopped after {step} steps, {step * args.batch_size * args.seq_len / 1e6:.2f}M tokens in {train_secs:.0f}s")

    model.eval()
    mtp.eval()
    vgen = torch.Generator().manual_seed(args.seed + 1)
    v = [0.0, 0.0, 0.0]
    with torch.no_grad():
        for _ in range(8):
            starts = torch.randint(0, len(val_t) - args.seq_len, (8,), generator=vgen)
            r = losses(model, mtp, val_t[starts[:, None] + offs].long())
            v = [a + b.item() / 8 for a, b in zip(v, r)]
    log(f"held-out: lm loss {v[0]:.4f}, mtp loss {v[1]:.4f}, mtp argmax = trunk argmax {v[2]:.3f}")
    summary = dict(parameters=n_params, mtp_parameters=n_mtp, vocab_size=vocab_size, steps=step,
                   tokens_seen=step * args.batch_size * args.seq_len, train_tokens=int(len(train_np)),
                   train_seconds=round(train_secs, 1), train_lm_loss=hist[-1][1] if hist else None,
                   val_lm_loss=v[0], val_mtp_loss=v[1], val_mtp_agreement=v[2], loss_history=hist,
                   args=vars(args))
    save(model, mtp, args, args.out, ids, summary)
    sizes = {n: os.path.getsize(os.path.join(args.out, n)) for n in sorted(os.listdir(args.out))}
    total = sum(sizes.values())
    log(f"{args.out}: {total / 1e6:.2f} MB ({', '.join(f'{n} {s / 1e6:.2f}' for n, s in sizes.items())})")
    summary["files"], summary["total_bytes"] = sizes, total
    summary["samples"] = samples(args.out, args.sample_tokens)
    if args.report:
        with open(args.report, "w") as f:
            json.dump(summary, f, indent=2)
    if total > args.size_limit_mb * 1e6:
        fail(f"checkpoint is {total / 1e6:.2f} MB, over {args.size_limit_mb} MB")
    if not v[0] <= args.max_final_loss:
        fail(f"held-out loss {v[0]:.3f} above --max-final-loss {args.max_final_loss}")


T0 = time.time()

if __name__ == "__main__":
    main()
