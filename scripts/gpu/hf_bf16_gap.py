#!/usr/bin/env python3
"""How far transformers' own bfloat16 forward lands from the stored float32 reference, per fixture.

For every checkpoint under tests/fixtures/models/, load it with transformers on the GPU in
float32 and in bfloat16 (eager attention, TF32 off), score the reference sequences of
tests/fixtures/<name>.reference.json (each position's log-probability of the next token), and
print the largest |difference| from the stored log-probs (transformers float32 on the CPU, when
the fixture was made) and the top-1 disagreements where the reference's top-1/top-2 margin
exceeds 5e-2 and 0.2. float32 on the GPU says how reproducible the reference is; bfloat16 is
what bf16 computation alone costs on these deliberately high-gain fixtures: the bar for the
CUDA backend's bf16 path.

FP8 fixtures (`quantization_config.quant_method = "fp8"`) are dequantized here, e4m3 · scale_inv
per 128 × 128 block in float32, as their references were made (make_moe_fixtures.py), and then
loaded without the quantization config: bfloat16 then rounds those values once more, as the
engine's bf16 path does for GEMMs of more than 32 rows. NVFP4 fixtures (ModelOpt `NVFP4` and
compressed-tensors `nvfp4-pack-quantized`) are dequantized the same way, e2m1 · scale · scale_2
(ModelOpt) or e2m1 · scale / global_scale (compressed-tensors) per 16 values, as
make_nvfp4_fixtures.py scored them (docs/nvfp4.md has the formats).

    python3 scripts/gpu/hf_bf16_gap.py [--fixtures tests/fixtures] [--out DIR] [NAME ...]

Needs torch and transformers 5 (Qwen3, Qwen3-MoE, Qwen3.5, Llama, Gemma 3, gpt-oss, MiniMax-M2,
Nemotron-H and DeepSeek-V3 classes; the newer fixtures were made with 5.25); prints a table last and
writes DIR/hf_bf16_gap.json when --out is given.
"""

import argparse
import glob
import json
import os
import shutil
import sys
import tempfile
import time

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

MARGINS = (5e-2, 0.2)


def checkpoint_tensors(src):
    """Every tensor of the checkpoint at `src` but its MTP head's."""
    tensors = {}
    for f in sorted(glob.glob(os.path.join(src, "*.safetensors"))):
        if os.path.basename(f) == "mtp.safetensors":
            continue
        tensors.update(load_file(f))
    return tensors


def float32_copy(out, cfg):
    """A temporary float32 checkpoint of the tensors `out`, its config `cfg` without the
    quantization."""
    tmp = tempfile.mkdtemp()
    cfg = dict(cfg, dtype="float32")
    cfg.pop("quantization_config")
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    save_file(out, os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})
    return tmp


def dequantized_copy(src, cfg):
    """A temporary checkpoint of `src` with its FP8 weights dequantized to float32."""
    block = cfg["quantization_config"].get("weight_block_size", [128, 128])
    tensors = checkpoint_tensors(src)
    out = {}
    for key, t in tensors.items():
        if key.endswith("_scale_inv"):
            continue
        inv = tensors.get(key + "_scale_inv")
        if inv is None:
            out[key] = t.float()
            continue
        if inv.dim() == 0:  # one scale for the whole tensor (transformers' own quantizer)
            out[key] = t.float() * inv.float()
            continue
        rows, cols = t.shape
        s = inv.float().repeat_interleave(block[0], 0)[:rows].repeat_interleave(block[1], 1)[:, :cols]
        out[key] = t.float() * s
    return float32_copy(out, cfg)


E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def nvfp4_values(packed, scale, multiplier):
    """[rows, 2 · bytes] float32 from packed E2M1 pairs (element 2i the low nibble of byte i),
    one E4M3 scale per 16 values and a per-tensor f32 multiplier."""
    b = packed.to(torch.uint8).to(torch.int64)
    nib = torch.stack([b & 15, b >> 4], dim=-1).reshape(b.shape[0], -1)
    v = E2M1[nib & 7] * torch.where(nib & 8 != 0, -1.0, 1.0)
    s = scale.view(torch.float8_e4m3fn).float().repeat_interleave(16, 1)[:, :v.shape[1]]
    return v * s * multiplier


def nvfp4_dequantized_copy(src, cfg):
    """A temporary checkpoint of `src` with its NVFP4 weights dequantized to float32."""
    tensors = checkpoint_tensors(src)
    out = {}
    for key, t in tensors.items():
        base = key.rsplit(".", 1)[0]
        if key.endswith(".weight_packed"):  # compressed-tensors
            g = tensors[base + ".weight_global_scale"].float().reshape(-1)[0]
            out[base + ".weight"] = nvfp4_values(t, tensors[base + ".weight_scale"], 1.0 / g)
        elif key.endswith(".weight") and t.dtype == torch.uint8 and base + ".weight_scale" in tensors:
            g = tensors[base + ".weight_scale_2"].float().reshape(-1)[0]  # ModelOpt
            out[key] = nvfp4_values(t, tensors[base + ".weight_scale"], g)
        elif key.rsplit(".", 1)[-1] in ("weight_scale", "weight_scale_2", "weight_global_scale",
                                         "input_scale", "input_global_scale"):
            continue
        else:
            out[key] = t.float()
    return float32_copy(out, cfg)


def is_nvfp4(cfg):
    q = cfg.get("quantization_config", {})
    return q.get("quant_algo") == "NVFP4" or q.get("format") == "nvfp4-pack-quantized"


@torch.no_grad()
def score(model, sequences, device):
    """Max |Δ| from the reference log-probs and the top-1 disagreements per margin."""
    worst, positions = 0.0, 0
    wrong = {m: [] for m in MARGINS}
    checked = {m: 0 for m in MARGINS}
    for s, seq in enumerate(sequences):
        ids = torch.tensor([seq["tokens"]], device=device)
        logp = torch.log_softmax(model(ids).logits[0].float(), dim=-1)
        want = torch.tensor(seq["next_token_logprobs"], device=device)
        n = len(seq["next_token_logprobs"])
        if n > 0:  # a one-token sequence has only its top-5
            got = logp[torch.arange(n, device=device), ids[0, 1:n + 1]]
            worst = max(worst, float((got - want).abs().max()))
        positions += n
        top1 = logp.argmax(dim=-1).tolist()
        for p, top5 in enumerate(seq["top5"]):
            if len(top5) < 2:
                continue
            margin = top5[0][1] - top5[1][1]
            for m in MARGINS:
                if margin > m:
                    checked[m] += 1
                    if top1[p] != top5[0][0]:
                        wrong[m].append(f"seq {s} pos {p} (margin {margin:.3f})")
    return worst, positions, checked, wrong


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fixtures", default="tests/fixtures")
    ap.add_argument("--out")
    ap.add_argument("--device", default="cuda",
                    help="cuda (the bar the engine's bf16 path is held to) or cpu (torch's own "
                         "bf16 kernels: a stand-in where no GPU has torch)")
    ap.add_argument("names", nargs="*")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    models = os.path.join(args.fixtures, "models")
    names = args.names or sorted(
        d for d in os.listdir(models) if os.path.isfile(os.path.join(models, d, "config.json")))
    results = []
    for name in names:
        src = os.path.join(models, name)
        with open(os.path.join(args.fixtures, f"{name}.reference.json")) as f:
            ref = json.load(f)
        with open(os.path.join(src, "config.json")) as f:
            cfg = json.load(f)
        fp8 = cfg.get("quantization_config", {}).get("quant_method") == "fp8"
        path = src
        row = {"fixture": name, "fp8": fp8, "architecture": cfg["architectures"][0]}
        try:
            if fp8:
                path = dequantized_copy(src, cfg)
            elif is_nvfp4(cfg):
                path = nvfp4_dequantized_copy(src, cfg)
            for dtype in (torch.float32, torch.bfloat16):
                t = time.time()
                model = AutoModelForCausalLM.from_pretrained(
                    path, dtype=dtype, attn_implementation="eager").to(args.device).eval()
                worst, positions, checked, wrong = score(model, ref["sequences"], args.device)
                key = "f32" if dtype == torch.float32 else "bf16"
                row[key] = {"max_abs": worst, "positions": positions,
                            "top1_checked": {str(m): checked[m] for m in MARGINS},
                            "top1_wrong": {str(m): wrong[m] for m in MARGINS}}
                print(f"{name:<24} {key:<5} max |Δ| {worst:.3e} over {positions} log-probs; top-1 "
                      + ", ".join(f"{checked[m] - len(wrong[m])}/{checked[m]} (margin > {m:g})"
                                  for m in MARGINS)
                      + f" [{time.time() - t:.1f} s]", flush=True)
                for w in wrong[MARGINS[0]][:8]:
                    print(f"    top-1 differs: {w}", flush=True)
                del model
                if args.device == "cuda":
                    torch.cuda.empty_cache()
        except Exception as e:  # one fixture's failure must not hide the others'
            row["error"] = f"{type(e).__name__}: {e}"
            print(f"{name:<24} FAILED: {row['error']}", flush=True)
        finally:
            if path != src:
                shutil.rmtree(path, ignore_errors=True)
        results.append(row)
    print(f"\n=== transformers on {args.device} vs the stored float32 reference: max |Δ log-prob| ===")
    print(f"{'fixture':<24} {'float32':>10} {'bfloat16':>10}  bf16 top-1 wrong (margin > 5e-2 / 0.2)")
    for r in results:
        if "error" in r:
            print(f"{r['fixture']:<24} {r['error']}")
            continue
        b = r["bf16"]
        print(f"{r['fixture']:<24} {r['f32']['max_abs']:>10.2e} {b['max_abs']:>10.2e}  "
              + " / ".join(f"{len(b['top1_wrong'][str(m)])} of {b['top1_checked'][str(m)]}"
                           for m in MARGINS))
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "hf_bf16_gap.json"), "w") as f:
            json.dump({"torch": torch.__version__,
                       "transformers": __import__("transformers").__version__,
                       "device": torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu",
                       "fixtures": results}, f, indent=1)
    return 1 if any("error" in r for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
