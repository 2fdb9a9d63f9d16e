#!/usr/bin/env python3
"""transformers on the same model shape as our ladder, for the side-by-side figure the CUDA
issue asks for: Qwen3-8B's config (or --config FILE, e.g. scripts/gpu/qwen3-30b-a3b-config.json:
a bf16 Qwen3, Qwen3-MoE or Qwen3.5 hybrid config.json) with random bf16 weights on the GPU, sdpa attention,
`generate` greedy with every request generating exactly --osl tokens (min_new_tokens), prompts
of --isl random token ids, one warm-up then --reps timed runs a batch size.

transformers batches a fixed set of prompts (static batching), so "concurrency C" here is a
batch of C prompts generated together: the closest thing it has to our concurrency ladder.

  hf_bench.py --isl 128 --osl 128 --batch 1,8,32 --reps 2 --out FILE.json [--config FILE]
"""

import argparse
import json
import statistics
import sys
import time

import torch
import transformers
import transformers as tf
from transformers import Qwen3Config, Qwen3ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM

QWEN3_8B = dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                num_attention_heads=32, num_key_value_heads=8, head_dim=128, vocab_size=151936,
                max_position_embeddings=40960, rms_norm_eps=1e-6, rope_theta=1000000,
                tie_word_embeddings=False)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--isl", type=int, default=128)
    ap.add_argument("--osl", type=int, default=128)
    ap.add_argument("--batch", default="1,8,32")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--out", required=True)
    ap.add_argument("--config", help="a bf16 Qwen3 / Qwen3-MoE / Qwen3.5 config.json (default: Qwen3-8B)")
    a = ap.parse_args()

    shape = "Qwen3-8B"
    if a.config:
        with open(a.config) as f:
            fields = json.load(f)
        arch = (fields.pop("architectures", None) or ["Qwen3ForCausalLM"])[0]
        fields.pop("torch_dtype", None)
        fields.pop("model_type", None)
        if "quantization_config" in fields:
            print(f"{a.config}: transformers quantizes FP8 only when loading a real checkpoint; "
                  "give it the bf16 config", file=sys.stderr)
            return 2
        # (config, model) classes; the Qwen3.5 hybrids (Gated DeltaNet) by name, as older
        # transformers lack them.
        classes = {"Qwen3ForCausalLM": (Qwen3Config, Qwen3ForCausalLM),
                   "Qwen3MoeForCausalLM": (Qwen3MoeConfig, Qwen3MoeForCausalLM)}
        for model_cls, cfg_cls in [("Qwen3_5ForCausalLM", "Qwen3_5TextConfig"),
                                   ("Qwen3_5MoeForCausalLM", "Qwen3_5MoeTextConfig")]:
            if hasattr(tf, model_cls):
                classes[model_cls] = (getattr(tf, cfg_cls), getattr(tf, model_cls))
        if arch not in classes:
            print(f"{a.config}: {arch} is not one of {sorted(classes)}", file=sys.stderr)
            return 2
        cfg_cls, model_cls = classes[arch]
        cfg = cfg_cls(**fields)
        shape = a.config
    else:
        cfg, model_cls = Qwen3Config(**QWEN3_8B), Qwen3ForCausalLM
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    t0 = time.perf_counter()
    with torch.device("cuda"):
        model = model_cls._from_config(cfg, dtype=torch.bfloat16)
    model.eval()
    print(f"transformers {transformers.__version__}, torch {torch.__version__}: "
          f"random {shape} shape built in {time.perf_counter() - t0:.1f} s", flush=True)
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    for b in [int(x) for x in a.batch.split(",")]:
        ids = torch.randint(100, 5000, (b, a.isl), device="cuda", generator=gen)
        mask = torch.ones_like(ids)
        times = []
        for rep in range(1 + a.reps):
            torch.cuda.synchronize()
            t = time.perf_counter()
            with torch.no_grad():
                out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=a.osl,
                                     min_new_tokens=a.osl, do_sample=False, pad_token_id=0)
            torch.cuda.synchronize()
            if rep > 0:
                times.append(time.perf_counter() - t)
            assert out.shape[1] == a.isl + a.osl, out.shape
        tok_s = [b * a.osl / t for t in times]
        row = {"batch": b, "tok_s_mean": statistics.mean(tok_s), "tok_s_reps": tok_s,
               "seconds_reps": times}
        rows.append(row)
        print(f"transformers batch {b:4d}: {row['tok_s_mean']:9.1f} tok/s "
              f"({a.osl} tokens each, {statistics.mean(times):.2f} s a run)", flush=True)
    with open(a.out, "w") as f:
        json.dump({"transformers": transformers.__version__, "torch": torch.__version__,
                   "shape": shape, "isl": a.isl, "osl": a.osl, "rungs": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
