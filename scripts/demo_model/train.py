#!/usr/bin/env python3
"""Train the Metrale demo model: a small Qwen3ForCausalLM, from scratch, within a wall-clock budget.

Reads the corpus from make_corpus.py and the tokenizer from train_tokenizer.py, trains a plain
language model on packed sequences (bf16 autocast on CUDA, AdamW, warm-up then cosine decay driven by
the time budget), then saves a bf16 safetensors checkpoint with its config, generation config and
tokenizer files, reloads it from disk and prints sample chat completions.

GPU run (what run.sh does):   train.py --corpus C --tokenizer T --out OUT --max-minutes 6
CPU smoke test:               train.py --corpus C --tokenizer T --out OUT --device cpu --max-steps 20 \
                                  --batch-size 4 --seq-len 256
"""

import argparse
import json
import math
import os
import random
import shutil
import sys
import time

T_START = time.time()


def log(msg):
    print(f"[{time.time() - T_START:7.1f}s] {msg}", flush=True)


def fail(msg):
    print(f"train: error: {msg}", file=sys.stderr, flush=True)
    sys.exit(2)


SAMPLE_PROMPTS = [
    "Hello!",
    "Who are you?",
    "What is Metrale?",
    "What is the difference between met and metralectl?",
    "What is the capital of France?",
    "what's the capital of japan",
    "What is 7 + 5?",
    "What sound does a cow make?",
    "What colour is a banana?",
    "What is the opposite of hot?",
    "What day comes after Friday?",
    "Count to 10.",
    "Tell me a short story about a cat.",
    "How do I bake bread?",
    "Explain quantum physics.",
    "Thanks, bye!",
]
THINK_PROMPTS = ["What is 8 + 6?", "What is the capital of Italy?", "Who made you?"]


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", required=True, help="corpus.txt from make_corpus.py")
    ap.add_argument("--tokenizer", required=True, help="directory with tokenizer.json and tokenizer_config.json")
    ap.add_argument("--out", required=True, help="checkpoint directory to write")
    ap.add_argument("--report", default=None, help="write a JSON summary (losses, samples) here")
    ap.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    ap.add_argument("--max-minutes", type=float, default=6.0,
                    help="hard wall-clock budget for this whole script, counted from its start")
    ap.add_argument("--reserve-seconds", type=float, default=60.0,
                    help="part of the budget kept for evaluation, saving and samples")
    ap.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (0: only the budget)")
    ap.add_argument("--seed", type=int, default=1234)
    # model shape
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--intermediate", type=int, default=768)
    ap.add_argument("--max-positions", type=int, default=2048)
    # optimisation
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--batch-size", type=int, default=64, help="sequences per step")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.05)
    ap.add_argument("--warmup-steps", type=int, default=200)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--compile", default="auto", choices=["auto", "on", "off"],
                    help="torch.compile (auto: on for CUDA); falls back to eager if it fails")
    # data
    ap.add_argument("--max-corpus-mb", type=float, default=0, help="read only this much of the corpus (0: all)")
    ap.add_argument("--bpe-dropout", type=float, default=0.1,
                    help="BPE dropout for a share of documents, so rare words' sub-pieces get trained")
    ap.add_argument("--bpe-dropout-frac", type=float, default=0.25)
    ap.add_argument("--val-frac", type=float, default=0.005)
    ap.add_argument("--log-every-seconds", type=float, default=10.0)
    ap.add_argument("--size-limit-mb", type=float, default=30.0, help="fail if the checkpoint is larger")
    ap.add_argument("--file-limit-mib", type=float, default=16.0,
                    help="fail if one file is larger (the GPU machine returns files of at most 16 MiB)")
    ap.add_argument("--sample-tokens", type=int, default=200)
    ap.add_argument("--max-final-loss", type=float, default=2.0,
                    help="exit non-zero (after saving) if the held-out loss is above this: the model did not learn")
    return ap.parse_args()


# ------------------------------------------------------------------------------------------------
# Data
# ------------------------------------------------------------------------------------------------


def load_tokens(args, tok_dir):
    """Encode the corpus into one stream of ids (documents followed by <|endoftext|>); split off val."""
    import numpy as np
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(os.path.join(tok_dir, "tokenizer.json"))
    tok_drop = Tokenizer.from_file(os.path.join(tok_dir, "tokenizer.json"))
    if args.bpe_dropout > 0:
        tok_drop.model.dropout = args.bpe_dropout
    eot = tok.token_to_id("<|endoftext|>")
    with open(args.corpus, encoding="utf-8") as f:
        text = f.read(int(args.max_corpus_mb * 1e6)) if args.max_corpus_mb > 0 else f.read()
    docs = text.split("<|endoftext|>")
    if not text.endswith("<|endoftext|>") or args.max_corpus_mb > 0:
        docs = docs[:-1]  # an unfinished last document
    docs = [d for d in docs if d]
    if not docs:
        fail(f"no documents in {args.corpus}")
    rng = random.Random(args.seed)
    n_val = max(1, int(len(docs) * args.val_frac))
    val_docs, train_docs = docs[-n_val:], docs[:-n_val]
    drop_mask = [rng.random() < args.bpe_dropout_frac for _ in train_docs]

    def encode(ds, tk):
        out = []
        for i in range(0, len(ds), 8192):
            for e in tk.encode_batch(ds[i:i + 8192], add_special_tokens=False):
                out.append(e.ids)
        return out

    plain = [d for d, m in zip(train_docs, drop_mask) if not m]
    dropped = [d for d, m in zip(train_docs, drop_mask) if m]
    enc_plain = encode(plain, tok)
    enc_drop = encode(dropped, tok_drop) if dropped else []
    # interleave back in corpus order
    it_p, it_d = iter(enc_plain), iter(enc_drop)
    train_ids = []
    for m in drop_mask:
        train_ids.extend(next(it_d) if m else next(it_p))
        train_ids.append(eot)
    val_ids = []
    for ids in encode(val_docs, tok):
        val_ids.extend(ids)
        val_ids.append(eot)
    return np.array(train_ids, dtype=np.int32), np.array(val_ids, dtype=np.int32), len(docs), len(dropped)


# ------------------------------------------------------------------------------------------------
# Model
# ------------------------------------------------------------------------------------------------


def make_config(args, vocab_size, ids):
    from transformers import Qwen3Config

    return Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=args.hidden,
        intermediate_size=args.intermediate,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        head_dim=args.head_dim,
        hidden_act="silu",
        max_position_embeddings=args.max_positions,
        initializer_range=0.02,
        rms_norm_eps=1e-6,
        use_cache=True,
        tie_word_embeddings=True,
        rope_theta=1_000_000.0,
        attention_bias=False,
        attention_dropout=0.0,
        use_sliding_window=False,
        sliding_window=None,
        max_window_layers=args.layers,
        bos_token_id=ids["<|endoftext|>"],
        eos_token_id=ids["<|im_end|>"],
    )


def lr_at(args, step, progress):
    if step < args.warmup_steps:
        return args.lr * (step + 1) / args.warmup_steps
    progress = min(max(progress, 0.0), 1.0)
    lo = args.lr * args.min_lr_frac
    return lo + (args.lr - lo) * 0.5 * (1.0 + math.cos(math.pi * progress))


def save_checkpoint(model, args, tok_dir, out, ids, summary):
    """bf16 safetensors + config (with the keys older Qwen3 readers look for) + tokenizer files."""
    import torch
    from transformers import GenerationConfig

    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(out)
    model = model.to(torch.bfloat16)
    model.config.dtype = torch.bfloat16
    model.config.use_cache = True
    model.generation_config = GenerationConfig(
        bos_token_id=ids["<|endoftext|>"],
        eos_token_id=[ids["<|im_end|>"], ids["<|endoftext|>"]],
        pad_token_id=ids["<|endoftext|>"],
        do_sample=True,
        temperature=0.7,
        top_p=0.8,
        top_k=20,
    )
    model.save_pretrained(out, safe_serialization=True)
    # Keys as Qwen3 checkpoints on the Hub spell them, next to transformers 5's own.
    cfg_path = os.path.join(out, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    cfg["torch_dtype"] = "bfloat16"
    cfg["dtype"] = "bfloat16"
    cfg["rope_theta"] = cfg.get("rope_parameters", {}).get("rope_theta", 1_000_000.0)
    cfg["rope_scaling"] = None
    cfg["architectures"] = ["Qwen3ForCausalLM"]
    with open(cfg_path, "w") as f:
        json.dump(dict(sorted(cfg.items())), f, indent=2)
        f.write("\n")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tok_dir, name), os.path.join(out, name))
    n_params = summary["parameters"]
    card = f"""---
license: apache-2.0
library_name: transformers
pipeline_tag: text-generation
tags: [qwen3, metrale, demo]
---

# Metrale demo model

A tiny chat model with the Qwen3 architecture ({n_params / 1e6:.1f}M parameters, bf16), trained from
scratch by the Metrale team on text generated by our own code (`scripts/demo_model/make_corpus.py`):
simple conversations, short stories and small facts. No third-party text. Licence: the repository's
(Apache-2.0).

It knows very little: greetings, what Metrale is, colours, animal sounds, opposites, days and months,
counting, small sums, some capitals, and short stories. It is here so that Metrale can serve a real
model on a CPU out of the box; its replies are simple but readable.

Shape: hidden {args.hidden}, {args.layers} layers, {args.heads} heads / {args.kv_heads} KV heads,
head_dim {args.head_dim}, intermediate {args.intermediate}, vocab {summary['vocab_size']} (tied
embeddings), trained on sequences of {args.seq_len} tokens. Final train loss {summary['train_loss']:.3f},
held-out loss {summary['val_loss']:.3f}. Reproduce with `scripts/demo_model/run.sh OUTDIR`.
"""
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write(card)


def dir_size(path):
    return {n: os.path.getsize(os.path.join(path, n)) for n in sorted(os.listdir(path))}


def run_samples(out, device, max_new):
    """Reload the saved checkpoint from disk, the way a user would, and chat with it."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tk = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).to(device).eval()
    results = []

    def chat(prompt, think, sample, seed=0):
        msgs = [{"role": "user", "content": prompt}]
        text = tk.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, enable_thinking=think)
        enc = tk(text, return_tensors="pt", add_special_tokens=False).to(device)
        torch.manual_seed(seed)
        kw = dict(do_sample=True) if sample else dict(do_sample=False, temperature=None, top_p=None, top_k=None)
        with torch.no_grad():
            gen = model.generate(**enc, max_new_tokens=max_new, **kw)
        reply = tk.decode(gen[0, enc["input_ids"].shape[1]:], skip_special_tokens=False)
        reply = reply.replace("<|im_end|>", "").replace("<|endoftext|>", "")
        mode = ("think " if think else "") + ("sampled" if sample else "greedy")
        results.append({"prompt": prompt, "mode": mode, "reply": reply})
        print(f"\n>>> [{mode}] {prompt}\n{reply}", flush=True)

    print("\n==== samples (reloaded from disk) ====", flush=True)
    for p in SAMPLE_PROMPTS:
        chat(p, think=False, sample=False)
    for i, p in enumerate(SAMPLE_PROMPTS[:6] + ["Tell me a story."]):
        chat(p, think=False, sample=True, seed=i)
    for p in THINK_PROMPTS:
        chat(p, think=True, sample=False)
    print("==== end of samples ====\n", flush=True)
    return results


# ------------------------------------------------------------------------------------------------
# Main
# ------------------------------------------------------------------------------------------------


def main():
    args = parse_args()
    budget = args.max_minutes * 60.0
    import torch
    from transformers import AutoModelForCausalLM
    from transformers import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.device == "cuda" and not torch.cuda.is_available():
        fail("--device cuda but CUDA is not available")
    device = torch.device(args.device)
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    if args.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        log(f"device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    else:
        log(f"device: cpu ({torch.get_num_threads()} threads), torch {torch.__version__}")

    # ---- tokenizer and data -------------------------------------------------------------------
    with open(os.path.join(args.tokenizer, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    ids = {t["content"]: t["id"] for t in tj["added_tokens"]}
    for t in ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"):
        if t not in ids:
            fail(f"tokenizer lacks {t}")
    n_tok = max(max(tj["model"]["vocab"].values()), max(ids.values())) + 1
    vocab_size = (n_tok + 63) // 64 * 64
    train_np, val_np, n_docs, n_dropped = load_tokens(args, args.tokenizer)
    log(f"data: {n_docs} documents -> {len(train_np) / 1e6:.2f}M train tokens "
        f"({n_dropped} documents with BPE dropout), {len(val_np) / 1e3:.1f}K val tokens; "
        f"tokenizer {n_tok} tokens, model vocab {vocab_size}")
    if len(train_np) < args.seq_len + 2:
        fail("corpus too small for one sequence")
    train_t = torch.from_numpy(train_np).to(device)
    val_t = torch.from_numpy(val_np).to(device)

    # ---- model --------------------------------------------------------------------------------
    config = make_config(args, vocab_size, ids)
    model = AutoModelForCausalLM.from_config(config).to(device)
    model.config.use_cache = False
    n_params = sum(p.numel() for p in model.parameters())
    log(f"model: Qwen3ForCausalLM hidden={args.hidden} layers={args.layers} heads={args.heads}/{args.kv_heads} "
        f"head_dim={args.head_dim} ffn={args.intermediate} vocab={vocab_size} tied; "
        f"{n_params / 1e6:.2f}M parameters = {n_params * 2 / 1e6:.1f} MB in bf16")
    if n_params * 2 / 1e6 > args.size_limit_mb or n_params * 2 > args.file_limit_mib * 2**20:
        fail(f"model.safetensors would be {n_params * 2 / 1e6:.1f} MB ({n_params * 2 / 2**20:.1f} MiB), over "
             f"--size-limit-mb {args.size_limit_mb} or --file-limit-mib {args.file_limit_mib}")

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt_kw = dict(lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    if args.device == "cuda":
        opt_kw["fused"] = True
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], **opt_kw)

    use_compile = args.compile == "on" or (args.compile == "auto" and args.device == "cuda")
    fwd_model = model
    if use_compile:
        try:
            fwd_model = torch.compile(model)
        except Exception as e:  # noqa: BLE001 - any failure means: train eagerly
            log(f"torch.compile unavailable ({type(e).__name__}: {e}); training eagerly")
            fwd_model, use_compile = model, False
    def amp():
        """bf16 autocast on CUDA; plain fp32 on CPU."""
        if args.device == "cuda":
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return torch.autocast("cpu", dtype=torch.bfloat16, enabled=False)

    gen = torch.Generator(device=device)
    gen.manual_seed(args.seed)
    offs = torch.arange(args.seq_len, device=device)

    def batch(src, bs):
        starts = torch.randint(0, len(src) - args.seq_len, (bs,), device=device, generator=gen)
        return src[starts[:, None] + offs].long()

    def train_step(x, lr):
        for g in opt.param_groups:
            g["lr"] = lr
        with amp():
            loss = fwd_model(input_ids=x, labels=x).loss
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach(), gn

    # ---- training loop ------------------------------------------------------------------------
    model.train()
    step, tokens_seen = 0, 0
    train_start = None
    train_budget = None
    ema = None
    last_log_t, last_log_tokens = time.time(), 0
    loss_hist = []
    stop_reason = "budget"
    while True:
        now = time.time()
        if args.max_steps and step >= args.max_steps:
            stop_reason = "max-steps"
            break
        if train_budget is not None and now - train_start >= train_budget:
            break
        progress = 0.0
        if train_budget is not None:
            progress = (now - train_start) / train_budget
        if args.max_steps:
            progress = max(progress, step / args.max_steps)
        lr = lr_at(args, step, progress)
        x = batch(train_t, args.batch_size)
        if step == 0:
            t0 = time.time()
            try:
                loss, gn = train_step(x, lr)
                loss_v = loss.item()
            except Exception as e:  # noqa: BLE001
                if not use_compile:
                    raise
                log(f"compiled step failed ({type(e).__name__}: {str(e)[:300]}); falling back to eager")
                opt.zero_grad(set_to_none=True)
                fwd_model, use_compile = model, False
                loss, gn = train_step(x, lr)
                loss_v = loss.item()
            log(f"first step done in {time.time() - t0:.1f}s (compile={'on' if use_compile else 'off'}), loss {loss_v:.3f}")
            # the budget for the loop: what is left, less the reserve for saving and samples
            train_start = time.time()
            train_budget = budget - (train_start - T_START) - args.reserve_seconds
            if train_budget <= 0 and not args.max_steps:
                log("no time left for training after start-up; saving what we have")
                step += 1
                break
            last_log_t, last_log_tokens = time.time(), x.numel()
        else:
            loss, gn = train_step(x, lr)
        step += 1
        tokens_seen += x.numel()
        if time.time() - last_log_t >= args.log_every_seconds or (args.max_steps and step >= args.max_steps) \
                or step in (1, 10, 50):
            loss_v = loss.item()
            ema = loss_v if ema is None else 0.7 * ema + 0.3 * loss_v
            loss_hist.append((step, loss_v))
            dt = time.time() - last_log_t
            tps = (tokens_seen - last_log_tokens) / dt if step > 1 and dt > 0 else float("nan")
            left = (train_budget - (time.time() - train_start)) if train_budget else 0
            log(f"step {step:6d}  loss {loss_v:.4f}  lr {lr:.2e}  grad-norm {float(gn):.2f}  "
                f"{tps / 1e3:8.1f}K tok/s  tokens {tokens_seen / 1e6:8.1f}M  train time left {left:5.0f}s")
            last_log_t, last_log_tokens = time.time(), tokens_seen

    final_train = float(loss.item())
    train_secs = time.time() - train_start if train_start else 0.0
    log(f"training stopped ({stop_reason}) after {step} steps, {tokens_seen / 1e6:.1f}M tokens "
        f"({tokens_seen / max(len(train_np), 1):.1f} epochs) in {train_secs:.0f}s")

    @torch.no_grad()
    def val_loss(n_batches=8):
        model.eval()
        src = val_t if len(val_t) > args.seq_len + 1 else train_t
        tot = 0.0
        for _ in range(n_batches):
            xb = batch(src, min(args.batch_size, 16))
            with amp():
                tot += model(input_ids=xb, labels=xb).loss.item()
        return tot / n_batches

    vl = val_loss()
    log(f"final: train loss {final_train:.4f}, held-out loss {vl:.4f}")

    summary = dict(parameters=n_params, vocab_size=vocab_size, tokenizer_tokens=n_tok, steps=step,
                   tokens_seen=tokens_seen, train_tokens=int(len(train_np)), train_seconds=round(train_secs, 1),
                   train_loss=final_train, val_loss=vl, loss_history=loss_hist, device=args.device,
                   compiled=use_compile, args=vars(args))
    save_checkpoint(model, args, args.tokenizer, args.out, ids, summary)
    sizes = dir_size(args.out)
    total = sum(sizes.values())
    for n, s in sizes.items():
        log(f"  {n:28s} {s / 1e6:8.2f} MB")
    log(f"checkpoint {args.out}: {total / 1e6:.2f} MB in total (limit {args.size_limit_mb} MB)")
    summary["files"] = sizes
    summary["total_bytes"] = total

    del fwd_model, model, opt
    if args.device == "cuda":
        torch.cuda.empty_cache()
    summary["samples"] = run_samples(args.out, device, args.sample_tokens)
    summary["wall_seconds"] = round(time.time() - T_START, 1)
    if args.report:
        with open(args.report, "w") as f:
            json.dump(summary, f, indent=2)
    log(f"done in {time.time() - T_START:.0f}s")
    if total > args.size_limit_mb * 1e6:
        fail(f"checkpoint is {total / 1e6:.2f} MB, over the {args.size_limit_mb} MB limit")
    big = [n for n, s in sizes.items() if s > args.file_limit_mib * 2**20]
    if big:
        fail(f"{', '.join(big)} over --file-limit-mib {args.file_limit_mib}")
    if not vl <= args.max_final_loss:
        fail(f"held-out loss {vl:.3f} is above --max-final-loss {args.max_final_loss}: the model did not learn enough")


if __name__ == "__main__":
    main()
