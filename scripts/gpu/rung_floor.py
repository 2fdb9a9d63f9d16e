#!/usr/bin/env python3
"""The byte floor of each rung of a decode ladder, beside what a record measured.

    rung_floor.py CONFIG RECORD [--bw GB/s] [--isl 128] [--osl 256] [--experts-bf16]

A decode step must read every dense weight once, each routed expert that any of the step's
tokens chose (with uniform random routing, as dummy weights route: E·(1 − (1 − k/E)^C) experts a
layer), each sequence's KV cache up to its position, and read and write each sequence's
recurrent state. The floor of rung C is C tokens over those bytes at --bw (default 4000 GB/s,
shared/GPU.md's copy rate of an H200; an H100 80GB HBM3 copies about 3,350 × 0.84 of nominal,
so pass what the machine measured). The mean position is ISL + OSL/2. Weights count the bytes
the engine keeps on the device for the config: bf16 unless a quantization_config says FP8
(1 byte + an f32 scale per 128 of a row) or NVFP4; gpt-oss's MXFP4 experts as bf16 with
--experts-bf16 (the CUDA backend widens them today), else 4.25 bits. Embedding rows are
negligible and not counted; the LM head is (bf16: the NVFP4 configs' ignore lists keep it). The
Qwen3.5/3.6 hybrids' recurrent state (f32) counts once read and once written a step. The record's rows are `metralectl bench`'s
(concurrency, output tok/s).
"""
import argparse
import json
import sys

BF16, FP8 = 2.0, 1.0 + 4.0 / 128


def quant_bytes(cfg):
    q = cfg.get("quantization_config") or {}
    m = q.get("quant_method")
    if m == "fp8":
        return FP8
    if m in ("modelopt", "compressed-tensors"):
        return 0.5 + 1.0 / 16 + 0.0
    return BF16


def attention(cfg, h, wb):
    nh, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or h // nh
    return wb * (h * nh * hd * 2 + 2 * h * kv * hd), 2 * kv * hd * BF16


def shape(cfg, experts_bf16):
    """(dense bytes, [(moe layers, experts, top_k, bytes an expert)], KV bytes a token,
    recurrent state bytes a sequence read and written a step)."""
    h, v, arch = cfg["hidden_size"], cfg["vocab_size"], cfg["architectures"][0]
    wb, layers = quant_bytes(cfg), cfg["num_hidden_layers"]
    head = BF16 * h * v
    if arch in ("LlamaForCausalLM", "MistralForCausalLM", "Gemma3ForCausalLM"):
        a, kv = attention(cfg, h, wb)
        return head + layers * (a + wb * 3 * h * cfg["intermediate_size"]), [], layers * kv, 0
    if arch == "GptOssForCausalLM":
        a, kv = attention(cfg, h, wb)
        e, i = cfg["num_local_experts"], cfg["intermediate_size"]
        eb = (BF16 if experts_bf16 else 4.25 / 8) * 3 * h * i
        dense = head + layers * (a + BF16 * h * e)
        return dense, [(layers, e, cfg["num_experts_per_tok"], eb)], layers * kv, 0
    if arch == "MiniMaxM2ForCausalLM":
        a, kv = attention(cfg, h, wb)
        e, i = cfg["num_local_experts"], cfg["intermediate_size"]
        dense = head + layers * (a + BF16 * h * e)
        return dense, [(layers, e, cfg["num_experts_per_tok"], wb * 3 * h * i)], layers * kv, 0
    if arch == "DeepseekV3ForCausalLM":
        nh, ql, kl = cfg["num_attention_heads"], cfg["q_lora_rank"], cfg["kv_lora_rank"]
        nope, rope, vd = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
        a = wb * (h * ql + ql * nh * (nope + rope) + h * (kl + rope) + kl * nh * (nope + vd)
                  + nh * vd * h)
        dense_layers = cfg["first_k_dense_replace"]
        e, mi = cfg["n_routed_experts"], cfg["moe_intermediate_size"]
        shared = cfg.get("n_shared_experts", 0) * wb * 3 * h * mi
        dense = (head + layers * a + dense_layers * wb * 3 * h * cfg["intermediate_size"]
                 + (layers - dense_layers) * (shared + BF16 * h * e))
        moe = [(layers - dense_layers, e, cfg["num_experts_per_tok"], wb * 3 * h * mi)]
        return dense, moe, layers * (kl + rope) * BF16, 0
    if arch == "NemotronHForCausalLM":
        pat = cfg["hybrid_override_pattern"]
        nh, hd, n, g = (cfg["mamba_num_heads"], cfg["mamba_head_dim"], cfg["ssm_state_size"],
                        cfg["n_groups"])
        di = nh * hd
        mamba = wb * (h * (2 * di + 2 * g * n + nh) + di * h)
        a, kv = attention(cfg, h, wb)
        mlp = wb * 2 * h * cfg["intermediate_size"]
        dense = head + pat.count("M") * mamba + pat.count("*") * a + pat.count("-") * mlp
        state = pat.count("M") * 2 * (nh * hd * n * 4 + (di + 2 * g * n) * 3 * BF16)
        return dense, [], pat.count("*") * kv, state
    if arch in ("Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM"):
        # Every full_attention_interval-th layer full attention (q with its output gate), the
        # rest Gated DeltaNet: fused in_proj (q, k, v, z, b, a), out_proj, and each sequence's
        # f32 delta-rule state and conv window read and written a step.
        full = layers // cfg.get("full_attention_interval", 4)
        nh, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
        gate = 2 if cfg.get("attn_output_gate", True) else 1
        a = wb * (h * nh * hd * gate + 2 * h * nkv * hd + nh * hd * h)
        nk, nv = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
        dk, dv = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"]
        conv = 2 * nk * dk + nv * dv
        gdn = wb * (h * (conv + nv * dv + 2 * nv) + nv * dv * h)
        mixers = full * a + (layers - full) * gdn
        state = (layers - full) * 2 * 4 * (nv * dk * dv + conv * (cfg["linear_conv_kernel_dim"] - 1))
        if arch == "Qwen3_5ForCausalLM":
            mlp = wb * 3 * h * cfg["intermediate_size"]
            return head + mixers + layers * mlp, [], full * 2 * nkv * hd * BF16, state
        e, mi = cfg["num_experts"], cfg["moe_intermediate_size"]
        shared = wb * 3 * h * cfg["shared_expert_intermediate_size"] + BF16 * h * (e + 1)
        moe = [(layers, e, cfg["num_experts_per_tok"], wb * 3 * h * mi)]
        return head + mixers + layers * shared, moe, full * 2 * nkv * hd * BF16, state
    sys.exit(f"rung_floor.py: no byte model for {arch}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("config")
    p.add_argument("record")
    p.add_argument("--bw", type=float, default=4000.0)
    p.add_argument("--isl", type=int, default=128)
    p.add_argument("--osl", type=int, default=256)
    p.add_argument("--experts-bf16", action="store_true")
    a = p.parse_args()
    cfg = json.load(open(a.config))
    dense, moe, kv_tok, state = shape(cfg, a.experts_bf16)
    rec = json.load(open(a.record))
    ctx = a.isl + a.osl / 2
    print(f"dense weights {dense / 1e9:.2f} GB, KV {kv_tok / 1e3:.1f} kB a token, "
          f"state {state / 1e6:.1f} MB a sequence a step, at {a.bw:.0f} GB/s")
    print("| C | output tok/s | floor tok/s | of floor |")
    print("|---|---|---|---|")
    for r in rec["rungs"]:
        c, got = r["concurrency"], r["output_tok_s"]["median"]
        experts = sum(n * e * (1 - (1 - k / e) ** c) * b for n, e, k, b in moe)
        step = (dense + experts + c * (ctx * kv_tok + state)) / (a.bw * 1e9)
        floor = c / step
        print(f"| {c} | {got:,.1f} | {floor:,.0f} | {got / floor:.2f} |")


if __name__ == "__main__":
    main()
