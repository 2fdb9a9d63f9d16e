#!/usr/bin/env python3
"""What the engine's bf16 CUDA path should land from each fixture's stored float32 reference,
emulated on the CPU with transformers in float32 and the engine's bf16 rounding points.

transformers' own bfloat16 forward (hf_bf16_gap.py) rounds every activation, the residual
stream included. The engine's bf16 path (docs/cuda.md, "CudaTensor types") rounds less: GEMM
operands (the norms' outputs, attention's output, the gated activation) and the KV cache are
bf16, while GEMM outputs, the residual stream, router logits, QK norm + RoPE inputs and
recurrent state stay f32. On the deliberately high-gain fixtures (router margins ~1e-4) which
expert choices flip depends on where the rounding happens, so the two can land far apart in
either direction (minimax-m2-tiny: transformers bf16 0.44, this emulation 1.42). This script
rounds to bf16 exactly at those points, and nowhere else:

- the input of every `F.linear` (projections, router, eager experts, lm head; the fixtures'
  weights are bf16 already, FP8/NVFP4 ones are dequantized as hf_bf16_gap.py does),
- K and V entering eager attention (the bf16 KV cache),
- gpt-oss's experts: their input and the clamped GLU's output (its experts use `@`).

Its figures reproduced the engine's bf16 e2e on an H100 within 1e-2 on minimax-m2-tiny (1.42),
nemotron-h-tiny (0.112), gpt-oss-bf16 (1.61 vs 1.62), gpt-oss-mxfp4 (0.954 vs 0.95),
qwen3-moe-mixed (0.497 vs 0.50), qwen3-moe-step2 (0.924 vs 0.92) and qwen3-gqa-tied (0.044 vs
0.041); not the Qwen3.5 hybrids (1.09 / 1.60 vs 0.83 / 1.16: the Gated DeltaNet's own rounding
points are not emulated). A fixture where the engine lands well beyond this figure points at an
engine bug; one where it lands near it (however far from transformers' bf16) is bf16 alone.

    python3 scripts/gpu/bf16_emulation.py [--fixtures tests/fixtures] [--update GAPS_JSON] [NAME ...]

CPU only; torch and transformers 5.25 (as the fixtures), accelerate for gpt-oss-mxfp4.
"""

import argparse
import importlib
import json
import os
import shutil
import sys

import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_bf16_gap as gap  # noqa: E402


def bf(t):
    return t.to(torch.bfloat16).to(t.dtype) if t.is_floating_point() else t


_linear = F.linear


def rounded_linear(x, w, b=None):
    return _linear(bf(x), w, b)


def emulate(model):
    """Patch the model's module so attention sees a bf16 cache and gpt-oss's experts bf16
    operands; F.linear is patched globally in main()."""
    mm = importlib.import_module(type(model).__module__)
    if hasattr(mm, "eager_attention_forward"):
        attn = mm.eager_attention_forward
        mm.eager_attention_forward = lambda module, q, k, v, *a, **kw: attn(
            module, q, bf(k), bf(v), *a, **kw)
    if hasattr(mm, "GptOssExperts"):
        e = mm.GptOssExperts
        fwd, gate = e.forward, e._apply_gate
        e.forward = lambda self, h, *a, **kw: fwd(self, bf(h), *a, **kw)
        e._apply_gate = lambda self, x: bf(gate(self, x))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fixtures", default="tests/fixtures")
    ap.add_argument("--update", metavar="GAPS_JSON",
                    help="record each figure in this hf_bf16_gap.json as its fixture's "
                         "engine_emulation (cuda_check's e2e bound is 1.25x the larger of it and "
                         "transformers' bf16 gap)")
    ap.add_argument("names", nargs="*")
    args = ap.parse_args()
    figures = {}
    models = os.path.join(args.fixtures, "models")
    names = args.names or sorted(
        d for d in os.listdir(models) if os.path.isfile(os.path.join(models, d, "config.json")))
    F.linear = rounded_linear
    torch.nn.functional.linear = rounded_linear
    failed = False
    for name in names:
        src = os.path.join(models, name)
        with open(os.path.join(args.fixtures, f"{name}.reference.json")) as f:
            ref = json.load(f)
        with open(os.path.join(src, "config.json")) as f:
            cfg = json.load(f)
        path = src
        try:
            if cfg.get("quantization_config", {}).get("quant_method") == "fp8":
                path = gap.dequantized_copy(src, cfg)
            elif gap.is_nvfp4(cfg):
                path = gap.nvfp4_dequantized_copy(src, cfg)
            model = AutoModelForCausalLM.from_pretrained(
                path, dtype=torch.float32, attn_implementation="eager",
                experts_implementation="eager").eval()
            emulate(model)
            worst, positions, checked, wrong = gap.score(model, ref["sequences"], "cpu")
            figures[name] = {"max_abs": worst, "positions": positions,
                             "top1_wrong": {str(m): wrong[m] for m in gap.MARGINS},
                             "device": f"cpu (torch {torch.__version__}, transformers "
                                       f"{importlib.import_module('transformers').__version__})"}
            print(f"{name:<28} emulated bf16 max |Δ| {worst:.3e} over {positions} log-probs; "
                  "top-1 wrong " + " / ".join(f"{len(wrong[m])} of {checked[m]}"
                                              for m in gap.MARGINS)
                  + " (margin > 5e-2 / 0.2)", flush=True)
        except Exception as e:  # one fixture's failure must not hide the others'
            failed = True
            print(f"{name:<28} FAILED: {type(e).__name__}: {e}", flush=True)
        finally:
            if path != src:
                shutil.rmtree(path, ignore_errors=True)
    if args.update:
        with open(args.update) as f:
            gaps = json.load(f)
        for entry in gaps["fixtures"]:
            if entry["fixture"] in figures:
                entry["engine_emulation"] = figures.pop(entry["fixture"])
        for name in figures:
            print(f"{name:<28} not in {args.update}: measure its bf16 gap first (hf_bf16_gap.py)")
        with open(args.update + ".tmp", "w") as f:
            json.dump(gaps, f, indent=4)
            f.write("\n")
        os.replace(args.update + ".tmp", args.update)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
