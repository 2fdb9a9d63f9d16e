//! Checks across fields, run on every recipe as it loads. Each failure names the file, the field,
//! what is wrong and what to write instead.

use super::error::RecipeError;
use super::launch::{MANAGED_FLAGS, REQUANTIZE_ENV_PREFIX, requantize_flag};
use super::schema::{Device, Recipe};

/// Reports the first problem found in `recipe`, read from the file `label` whose name without
/// `.toml` is `stem`.
pub fn validate(recipe: &Recipe, stem: &str, label: &str) -> Result<(), RecipeError> {
    let ensure = |ok: bool, field: &str, problem: &dyn Fn() -> String| {
        if ok {
            Ok(())
        } else {
            Err(RecipeError::Invalid {
                file: label.to_owned(),
                field: field.to_owned(),
                problem: problem(),
            })
        }
    };

    // Identity.
    ensure(is_recipe_name(&recipe.name), "name", &|| {
        format!(
            "{:?} is not a recipe name: use lowercase letters, digits, '.' and '-', starting with a \
             letter or digit",
            recipe.name
        )
    })?;
    ensure(recipe.name == stem, "name", &|| {
        format!(
            "{:?} differs from the file name {stem:?}.toml; rename the file or the recipe so they match",
            recipe.name
        )
    })?;
    for (field, value) in [
        ("display_name", &recipe.display_name),
        ("vendor", &recipe.vendor),
        ("family", &recipe.family),
    ] {
        ensure(!value.trim().is_empty(), field, &|| {
            "is empty; give it a value".to_owned()
        })?;
    }

    // Checkpoint.
    let ck = &recipe.checkpoint;
    ensure(
        ck.repo.is_some() != ck.path.is_some(),
        "checkpoint",
        &|| {
            "set exactly one of `repo` (a Hugging Face repository) and `path` (a checkpoint on disk)".to_owned()
        },
    )?;
    if let Some(repo) = &ck.repo {
        ensure(is_hub_repo(repo), "checkpoint.repo", &|| {
            format!("{repo:?} is not a Hugging Face repository id; write it as \"owner/name\"")
        })?;
    }
    if let Some(path) = &ck.path {
        ensure(!path.trim().is_empty(), "checkpoint.path", &|| {
            "is empty; give the checkpoint directory".to_owned()
        })?;
    }
    ensure(
        ck.revision.is_none() || ck.repo.is_some(),
        "checkpoint.revision",
        &|| "only a Hub `repo` has a revision; remove it from a `path` checkpoint".to_owned(),
    )?;
    let ensure_gib = |value: Option<f64>, field: &str, what: &str| match value {
        Some(gib) => ensure(gib.is_finite() && gib > 0.0, field, &|| {
            format!("{gib} is not a size; give {what} in GiB")
        }),
        None => Ok(()),
    };
    ensure_gib(
        ck.weights_gib,
        "checkpoint.weights_gib",
        "the weights' size",
    )?;
    if let (Some(total), Some(active)) = (&ck.parameters, &ck.active_parameters) {
        ensure(
            active.count() <= total.count(),
            "checkpoint.active_parameters",
            &|| {
                format!(
                    "{} is more than the total `parameters` {}",
                    active.as_str(),
                    total.as_str()
                )
            },
        )?;
    }
    if let Some(rq) = &ck.requantize {
        ensure(
            rq.lm_head.is_some() || rq.experts.is_some(),
            "checkpoint.requantize",
            &|| "names no part; set `lm_head` or `experts`, or remove the table".to_owned(),
        )?;
        if rq.experts.is_some() {
            let has_experts = recipe.model.as_ref().is_none_or(|m| m.experts.is_some());
            ensure(has_experts, "checkpoint.requantize.experts", &|| {
                "the model has no experts ([model] sets no `experts`); remove it".to_owned()
            })?;
        }
        if let Some(projections) = &rq.expert_projections {
            ensure(
                rq.experts.is_some(),
                "checkpoint.requantize.expert_projections",
                &|| "applies only with `experts`; set `experts` or remove it".to_owned(),
            )?;
            let mut sorted = projections.clone();
            sorted.sort();
            sorted.dedup();
            ensure(
                !projections.is_empty() && sorted.len() == projections.len(),
                "checkpoint.requantize.expert_projections",
                &|| {
                    "must list each of \"gate\", \"up\", \"down\" at most once, and at least one"
                        .to_owned()
                },
            )?;
        }
        // What met serve --requantize can do: nvfp4 or bf16, gate and up together.
        if let Err(why) = requantize_flag(rq) {
            ensure(false, "checkpoint.requantize", &|| why.clone())?;
        }
    }

    // Model shape.
    if let Some(m) = &recipe.model {
        for (field, value) in [
            ("model.layers", m.layers),
            ("model.kv_heads", m.kv_heads),
            ("model.head_dim", m.head_dim),
        ] {
            ensure(value > 0, field, &|| "must be at least 1".to_owned())?;
        }
        if let Some(full) = m.full_attention_layers {
            ensure(
                full >= 1 && full <= m.layers,
                "model.full_attention_layers",
                &|| format!("{full} is not between 1 and `layers` ({})", m.layers),
            )?;
        }
        if let Some(name) = &m.architecture {
            ensure(
                metrale_protocol::support::architecture(name).is_some(),
                "model.architecture",
                &|| {
                    let known: Vec<&str> = metrale_protocol::support::ARCHITECTURES
                        .iter()
                        .map(|a| a.name)
                        .collect();
                    format!(
                        "{name:?} is not an architecture met loads; write config.json's \
                         `architectures[0]`, one of: {}",
                        known.join(", ")
                    )
                },
            )?;
        }
        ensure(
            m.sliding_window.is_none_or(|w| w > 0),
            "model.sliding_window",
            &|| "must be at least 1; remove it for a model without a window".to_owned(),
        )?;
        ensure(
            m.sliding_layers
                .is_none_or(|n| m.sliding_window.is_some() && n <= m.layers),
            "model.sliding_layers",
            &|| {
                format!(
                    "must come with model.sliding_window and be at most model.layers ({})",
                    m.layers
                )
            },
        )?;
        ensure(
            m.linear_attention.is_none() || m.mamba2.is_none(),
            "model.mamba2",
            &|| {
                "a model has Gated DeltaNet ([model.linear_attention]) or Mamba-2 layers, not both"
                    .to_owned()
            },
        )?;
        if let Some(mamba) = &m.mamba2 {
            let full = m.full_attention_layers.unwrap_or(m.layers);
            ensure(
                mamba.layers >= 1 && full < m.layers && mamba.layers <= m.layers - full,
                "model.mamba2.layers",
                &|| {
                    format!(
                        "{} Mamba-2 layers do not fit beside {full} attention layers in {}; set \
                         `full_attention_layers` and count the `M` layers of the pattern",
                        mamba.layers, m.layers
                    )
                },
            )?;
            for (field, value) in [
                ("model.mamba2.heads", mamba.heads),
                ("model.mamba2.head_dim", mamba.head_dim),
                ("model.mamba2.state_size", mamba.state_size),
                ("model.mamba2.groups", mamba.groups),
                ("model.mamba2.conv_kernel", mamba.conv_kernel),
            ] {
                ensure(value > 0, field, &|| "must be at least 1".to_owned())?;
            }
        }
        if let Some(latent) = &m.latent_attention {
            for (field, value) in [
                ("model.latent_attention.kv_lora_rank", latent.kv_lora_rank),
                ("model.latent_attention.rope_head_dim", latent.rope_head_dim),
            ] {
                ensure(value > 0, field, &|| "must be at least 1".to_owned())?;
            }
        }
        if m.linear_attention.is_some() {
            ensure(
                m.full_attention_layers.is_some_and(|f| f < m.layers),
                "model.linear_attention",
                &|| {
                    "a hybrid model needs `full_attention_layers` below `layers`; the rest are linear-attention layers"
                    .to_owned()
                },
            )?;
        }
        ensure(
            m.experts.is_some() == m.expert_intermediate_size.is_some(),
            "model.expert_intermediate_size",
            &|| {
                "`experts` and `expert_intermediate_size` go together; set both or neither"
                    .to_owned()
            },
        )?;
    }

    // Image.
    let image = &recipe.image;
    ensure(
        is_image_repository(&image.repository),
        "image.repository",
        &|| {
            format!(
                "{:?} is not an image repository; write it without tag or digest, e.g. \"ghcr.io/metrale/met\"",
                image.repository
            )
        },
    )?;
    if let Some(tag) = &image.tag {
        ensure(is_image_tag(tag), "image.tag", &|| {
            format!("{tag:?} is not a tag: use up to 128 letters, digits, '_', '.' and '-'")
        })?;
    }

    // Serve settings.
    let serve = &recipe.serve;
    let cpu = serve.device == Device::Cpu;
    for (field, value) in [
        ("serve.max_seq_len", Some(serve.max_seq_len)),
        ("serve.max_batch_size", Some(serve.max_batch_size)),
        ("serve.max_num_batched_tokens", serve.max_num_batched_tokens),
        (
            "serve.prefill_chunk_with_decodes",
            serve.prefill_chunk_with_decodes,
        ),
        ("serve.ssm_cache_slots", serve.ssm_cache_slots),
        (
            "serve.ssm_checkpoint_interval",
            serve.ssm_checkpoint_interval,
        ),
        ("serve.port", Some(u32::from(serve.port))),
    ] {
        ensure(value.is_none_or(|v| v > 0), field, &|| {
            "must be at least 1".to_owned()
        })?;
    }
    match serve.gpu_memory_utilization {
        Some(_) if cpu => ensure(false, "serve.gpu_memory_utilization", &|| {
            "has no effect with device = \"cpu\"; remove it".to_owned()
        })?,
        Some(u) => ensure(u > 0.0 && u <= 1.0, "serve.gpu_memory_utilization", &|| {
            format!(
                "{u} is not a fraction of GPU memory; use a number above 0 and at most 1, e.g. 0.9"
            )
        })?,
        None => {}
    }
    if let Some(spec) = &serve.speculative {
        ensure(
            (1..=16).contains(&spec.num_drafts),
            "serve.speculative.num_drafts",
            &|| format!("{} is not between 1 and 16", spec.num_drafts),
        )?;
    }
    ensure(
        serve.tensor_parallel_size >= 1,
        "serve.tensor_parallel_size",
        &|| "must be at least 1".to_owned(),
    )?;
    // (A GPU count of 0 on CUDA is refused below, by its own field.)
    if !cpu && recipe.requirements.gpus >= 1 {
        ensure(
            serve.tensor_parallel_size == recipe.requirements.gpus,
            "serve.tensor_parallel_size",
            &|| {
                format!(
                    "is {} but requirements.gpus is {}: on CUDA each rank is one GPU; make them equal",
                    serve.tensor_parallel_size, recipe.requirements.gpus
                )
            },
        )?;
    }
    if serve.enable_expert_parallel {
        ensure(
            serve.tensor_parallel_size >= 2,
            "serve.enable_expert_parallel",
            &|| {
                "splits the experts over the ranks; set tensor_parallel_size to 2 or more"
                    .to_owned()
            },
        )?;
        ensure(
            recipe.model.as_ref().is_none_or(|m| m.experts.is_some()),
            "serve.enable_expert_parallel",
            &|| "the model has no experts ([model] sets no `experts`); remove it".to_owned(),
        )?;
    }
    for arg in &serve.extra_args {
        let flag = arg.split('=').next().unwrap_or(arg);
        if let Some((_, field)) = MANAGED_FLAGS.iter().find(|(f, _)| *f == flag) {
            ensure(false, "serve.extra_args", &|| {
                format!("{flag} is set by `{field}`; set it there instead")
            })?;
        }
    }
    for key in serve.env.keys() {
        ensure(is_env_name(key), "serve.env", &|| {
            format!(
                "{key:?} is not an environment variable name: use A-Z, 0-9 and '_', not starting with a digit"
            )
        })?;
        ensure(key != "HF_TOKEN", "serve.env", &|| {
            "HF_TOKEN is a secret and is passed through from your environment; remove it from the recipe".to_owned()
        })?;
        ensure(
            !key.starts_with(REQUANTIZE_ENV_PREFIX),
            "serve.env",
            &|| {
                format!(
                    "{key} is not read by met; re-quantize with [checkpoint.requantize], which \
                     passes met serve --requantize"
                )
            },
        )?;
    }

    // Requirements.
    let req = &recipe.requirements;
    if cpu {
        ensure(req.gpus == 0, "requirements.gpus", &|| {
            format!(
                "is {} but serve.device is \"cpu\"; a CPU recipe needs 0 GPUs",
                req.gpus
            )
        })?;
        ensure(
            req.gpu_memory_gib.is_none() && req.compute_capability.is_none(),
            "requirements",
            &|| {
                "a CPU recipe has no GPU memory or compute capability requirement; remove them"
                    .to_owned()
            },
        )?;
    } else {
        ensure(req.gpus >= 1, "requirements.gpus", &|| {
            "is 0 but serve.device is \"cuda\"; set the GPU count, or device = \"cpu\"".to_owned()
        })?;
    }
    ensure_gib(
        req.gpu_memory_gib,
        "requirements.gpu_memory_gib",
        "a GPU's memory",
    )?;
    if let Some(nodes) = req.expert_parallel_nodes {
        ensure(nodes >= 1, "requirements.expert_parallel_nodes", &|| {
            "must be at least 1".to_owned()
        })?;
    }
    Ok(())
}

fn is_recipe_name(s: &str) -> bool {
    s.bytes()
        .next()
        .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
}

fn is_hub_part(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

fn is_hub_repo(s: &str) -> bool {
    s.split_once('/')
        .is_some_and(|(owner, name)| is_hub_part(owner) && is_hub_part(name))
}

fn is_image_repository(s: &str) -> bool {
    let last = s.rsplit('/').next().unwrap_or(s);
    !s.is_empty()
        && !last.contains(':')
        && s.bytes().all(|b| {
            b.is_ascii_lowercase()
                || b.is_ascii_digit()
                || matches!(b, b'/' | b'.' | b'-' | b'_' | b':')
        })
}

fn is_image_tag(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

fn is_env_name(s: &str) -> bool {
    s.bytes()
        .next()
        .is_some_and(|b| b.is_ascii_uppercase() || b == b'_')
        && s.bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::recipe::fixtures::DENSE as GOOD;

    fn check(text: &str) -> Result<(), RecipeError> {
        let recipe: Recipe = toml::from_str(text).map_err(|e| RecipeError::Parse {
            file: "t".into(),
            message: e.to_string(),
        })?;
        validate(&recipe, "t", "t.toml")
    }

    fn field_of(text: &str) -> String {
        match check(text) {
            Err(RecipeError::Invalid { field, .. }) => field,
            other => format!("{other:?}"),
        }
    }

    #[test]
    fn a_good_recipe_passes() {
        assert!(check(GOOD).is_ok());
    }

    #[test]
    fn each_bad_field_is_named() {
        let cases = [
            (GOOD.replace("name = \"t\"", "name = \"u\""), "name"),
            (
                GOOD.replace("repo = \"Qwen/Qwen3-8B\"", "repo = \"Qwen3-8B\""),
                "checkpoint.repo",
            ),
            (
                GOOD.replace("repo = \"Qwen/Qwen3-8B\"", "repo = \"a/b\"\npath = \"x\""),
                "checkpoint",
            ),
            (GOOD.replace("0.9", "1.5"), "serve.gpu_memory_utilization"),
            (GOOD.replace("gpus = 1", "gpus = 0"), "requirements.gpus"),
            (
                GOOD.replace("max_batch_size = 4", "max_batch_size = 0"),
                "serve.max_batch_size",
            ),
            (
                GOOD.replace(
                    "[requirements]",
                    "extra_args = [\"--port=9\"]\n[requirements]",
                ),
                "serve.extra_args",
            ),
            (
                GOOD.replace(
                    "[requirements]",
                    "env = { HF_TOKEN = \"x\" }\n[requirements]",
                ),
                "serve.env",
            ),
            (
                GOOD.replace(
                    "[requirements]",
                    "env = { \"bad-name\" = \"x\" }\n[requirements]",
                ),
                "serve.env",
            ),
            (
                GOOD.replace("vendor = \"Qwen\"", "vendor = \" \""),
                "vendor",
            ),
        ];
        for (text, field) in cases {
            assert_eq!(field_of(&text), field, "for:\n{text}");
        }
    }

    /// The model-shape tables of the newer families: each inconsistency names its field.
    #[test]
    fn model_shape_tables_are_checked() {
        let model =
            |body: &str| format!("{GOOD}[model]\nlayers = 8\nkv_heads = 2\nhead_dim = 64\n{body}");
        let mamba = "full_attention_layers = 2\n[model.mamba2]\nlayers = 4\nheads = 8\n\
                     head_dim = 16\nstate_size = 16\ngroups = 2\nconv_kernel = 4\n";
        assert!(check(&model(mamba)).is_ok(), "{:?}", check(&model(mamba)));
        let latent = "[model.latent_attention]\nkv_lora_rank = 64\nrope_head_dim = 16\n";
        assert!(check(&model(latent)).is_ok(), "{:?}", check(&model(latent)));
        let cases = [
            (
                model("architecture = \"BertModel\"\n"),
                "model.architecture",
            ),
            (model("sliding_window = 0\n"), "model.sliding_window"),
            (model("sliding_layers = 4\n"), "model.sliding_layers"),
            (
                model("sliding_window = 16\nsliding_layers = 9\n"),
                "model.sliding_layers",
            ),
            (
                model(&mamba.replace("layers = 4", "layers = 7")),
                "model.mamba2.layers",
            ),
            (
                model(&mamba.replace("groups = 2", "groups = 0")),
                "model.mamba2.groups",
            ),
        ];
        for (text, field) in cases {
            assert_eq!(field_of(&text), field, "for:\n{text}");
        }
    }

    #[test]
    fn ranks_match_the_gpus_and_expert_parallelism_needs_experts_and_ranks() {
        let tp = |n: u32, gpus: u32| {
            GOOD.replace(
                "gpu_memory_utilization = 0.9",
                &format!("gpu_memory_utilization = 0.9\ntensor_parallel_size = {n}"),
            )
            .replace("gpus = 1", &format!("gpus = {gpus}"))
        };
        assert!(check(&tp(2, 2)).is_ok());
        assert_eq!(field_of(&tp(2, 1)), "serve.tensor_parallel_size");
        assert_eq!(field_of(&tp(0, 1)), "serve.tensor_parallel_size");
        let ep = |text: String| {
            text.replace(
                "max_batch_size = 4",
                "max_batch_size = 4\nenable_expert_parallel = true",
            )
        };
        assert_eq!(field_of(&ep(tp(1, 1))), "serve.enable_expert_parallel");
        let dense = format!(
            "{}[model]\nlayers = 8\nkv_heads = 2\nhead_dim = 64\n",
            ep(tp(2, 2))
        );
        assert_eq!(field_of(&dense), "serve.enable_expert_parallel");
        let moe = format!("{dense}experts = 8\nexpert_intermediate_size = 64\n");
        assert!(check(&moe).is_ok(), "{:?}", check(&moe));
    }

    #[test]
    fn field_formats_are_checked_by_the_parser() {
        for bad in [
            GOOD.replace(
                "quantization = \"bf16\"",
                "quantization = \"bf16\"\nrevision = \"main\"",
            ),
            GOOD.replace(
                "quantization = \"bf16\"",
                "quantization = \"bf16\"\nparameters = \"8 billion\"",
            ),
            GOOD.replace("quantization = \"bf16\"", "quantization = \"int3\""),
            GOOD.replace(
                "[requirements]",
                "[image]\ndigest = \"sha256:abc\"\n[requirements]",
            ),
            GOOD.replace("gpus = 1", "gpus = 1\ncompute_capability = \"sm90\""),
            GOOD.replace("gpus = 1", "gpus = 1\nspeed = 3"),
        ] {
            assert!(
                matches!(check(&bad), Err(RecipeError::Parse { .. })),
                "accepted:\n{bad}"
            );
        }
    }
}
