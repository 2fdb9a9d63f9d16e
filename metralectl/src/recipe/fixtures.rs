//! Small recipes for unit tests, to alter with `str::replace`.

/// A valid dense recipe named `t`.
pub const DENSE: &str = r#"
name = "t"
display_name = "T"
vendor = "Qwen"
family = "qwen3"
[checkpoint]
repo = "Qwen/Qwen3-8B"
quantization = "bf16"
[serve]
max_seq_len = 4096
max_batch_size = 4
gpu_memory_utilization = 0.9
[requirements]
gpus = 1
"#;

/// A valid hybrid recipe with Qwen3.6-27B's shape: FP8 weights and KV cache, 1024 tokens × 2
/// sequences, half the GPU's memory.
pub fn hybrid() -> String {
    let text = DENSE
        .replace(
            "quantization = \"bf16\"",
            "quantization = \"fp8\"\nparameters = \"27B\"",
        )
        .replace(
            "max_seq_len = 4096\nmax_batch_size = 4\ngpu_memory_utilization = 0.9",
            "max_seq_len = 1024\nmax_batch_size = 2\nkv_cache_dtype = \"fp8\"\ngpu_memory_utilization = 0.5",
        )
        .replace("gpus = 1", "gpus = 1\ncompute_capability = \"8.9\"");
    text + r#"
[model]
layers = 64
full_attention_layers = 16
kv_heads = 4
head_dim = 256
hidden_size = 5120
vocab_size = 248320
[model.linear_attention]
key_heads = 16
value_heads = 48
key_head_dim = 128
value_head_dim = 128
conv_kernel = 4
"#
}
