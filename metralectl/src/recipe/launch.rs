//! The exact commands that start a recipe: `docker run …` and the native `met serve …`.
//! Pure: everything it needs from the environment comes in [`LaunchEnv`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::load::Entry;
use super::resolve::{Location, locate};
use super::schema::{Device, ExpertProjection, FlagValue, Recipe, Requantize};

/// `met serve` flags the recipe or the launcher sets; `serve.extra_args` may not repeat them.
pub const MANAGED_FLAGS: &[(&str, &str)] = &[
    ("--host", "the launcher (0.0.0.0 in a container)"),
    ("--port", "serve.port"),
    ("--model-name", "the launcher (the recipe name)"),
    ("--revision", "checkpoint.revision"),
    ("--device", "serve.device"),
    ("--max-seq-len", "serve.max_seq_len"),
    ("--max-batch-size", "serve.max_batch_size"),
    ("--max-num-batched-tokens", "serve.max_num_batched_tokens"),
    (
        "--prefill-chunk-with-decodes",
        "serve.prefill_chunk_with_decodes",
    ),
    ("--gpu-memory-utilization", "serve.gpu_memory_utilization"),
    ("--kv-cache-dtype", "serve.kv_cache_dtype"),
    ("--enable-prefix-caching", "serve.prefix_caching"),
    ("--disable-thinking", "serve.thinking"),
    ("--tool-call-parser", "serve.tool_call_parser"),
    ("--reasoning-parser", "serve.reasoning_parser"),
    ("--speculative", "serve.speculative"),
    ("--num-drafts", "serve.speculative.num_drafts"),
    ("--ssm-cache-slots", "serve.ssm_cache_slots"),
    ("--ssm-checkpoint-interval", "serve.ssm_checkpoint_interval"),
    ("--load-format", "serve.load_format"),
    ("--tensor-parallel-size", "serve.tensor_parallel_size"),
    ("--enable-expert-parallel", "serve.enable_expert_parallel"),
    ("--requantize", "checkpoint.requantize"),
    ("--no-tui", "the launcher"),
];

/// Environment variables an older launcher set for `checkpoint.requantize` (which `met` never
/// read); `serve.env` may not set them, so no recipe believes it re-quantizes through them.
pub const REQUANTIZE_ENV_PREFIX: &str = "MET_REQUANTIZE_";

/// Where the Hugging Face cache lives inside the container.
pub const CONTAINER_HF_CACHE: &str = "/root/.cache/huggingface";

/// What the commands depend on outside the recipe.
#[derive(Debug, Clone)]
pub struct LaunchEnv {
    /// The launcher's version: the image tag when the recipe names none.
    pub version: String,
    /// The host's Hugging Face cache directory, mounted into the container.
    pub hf_cache: PathBuf,
    /// Whether `HF_TOKEN` is set, to pass it through to the container.
    pub hf_token_set: bool,
    /// Overrides `serve.port`.
    pub port: Option<u16>,
    /// The address the endpoint is reachable on: the host side of the container's port
    /// binding, the native engine's `--host`. 127.0.0.1 unless the user binds wider.
    pub host: String,
}

/// The address `run` binds unless told otherwise.
pub const DEFAULT_HOST: &str = "127.0.0.1";

/// A command as arguments, with the grouping used to print it one option a line.
#[derive(Debug, Clone, Serialize)]
pub struct CommandLine {
    /// Environment to set before it (the native command only; the container gets `-e`).
    pub env: BTreeMap<String, String>,
    pub argv: Vec<String>,
    /// The command as one shell line, quoted.
    pub shell: String,
    #[serde(skip)]
    groups: Vec<Vec<String>>,
}

impl CommandLine {
    fn new(env: BTreeMap<String, String>, groups: Vec<Vec<String>>) -> Self {
        let argv: Vec<String> = groups.iter().flatten().cloned().collect();
        let shell = env_prefix(&env)
            .into_iter()
            .chain(argv.iter().map(|a| shell_quote(a)))
            .collect::<Vec<_>>()
            .join(" ");
        Self {
            env,
            argv,
            shell,
            groups,
        }
    }

    /// The command on several lines joined by ` \`, one option a line.
    pub fn multiline(&self) -> String {
        let mut lines: Vec<String> = Vec::new();
        let env = env_prefix(&self.env);
        for (i, group) in self.groups.iter().enumerate() {
            let words: Vec<String> = group.iter().map(|a| shell_quote(a)).collect();
            let mut line = words.join(" ");
            if i == 0 && !env.is_empty() {
                line = format!("{} {line}", env.join(" "));
            }
            lines.push(if i == 0 { line } else { format!("  {line}") });
        }
        lines.join(" \\\n")
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Launch {
    pub image: String,
    pub docker: CommandLine,
    pub native: CommandLine,
    /// Things the user should know before running either command.
    pub warnings: Vec<String>,
    /// The container form as data, for `run` through the Docker Engine API.
    #[serde(skip)]
    pub container: ContainerPlan,
}

/// What the `docker run` command says, as data.
#[derive(Debug, Clone, Default)]
pub struct ContainerPlan {
    /// The command after the image: `met serve …`.
    pub cmd: Vec<String>,
    pub env: BTreeMap<String, String>,
    /// `host:container[:ro]`.
    pub binds: Vec<String>,
    pub port: u16,
    pub gpus: bool,
    /// Pass the host's `HF_TOKEN` through.
    pub hf_token: bool,
}

/// The image reference: by digest when pinned (with the tag kept for readers), else by tag.
pub fn image_reference(recipe: &Recipe, version: &str) -> String {
    let image = &recipe.image;
    let tag = image.tag.as_deref().unwrap_or(version);
    match &image.digest {
        Some(digest) => format!("{}:{tag}@{digest}", image.repository),
        None => format!("{}:{tag}", image.repository),
    }
}

/// The engine's environment: `serve.env`.
pub fn engine_env(recipe: &Recipe) -> BTreeMap<String, String> {
    recipe.serve.env.clone()
}

/// `met serve --requantize`'s value for `[checkpoint.requantize]` (`lm_head=nvfp4,experts=…`),
/// or the reason `met` cannot honour it. `validate.rs` refuses such recipes at load, so a
/// recipe that loaded always has a value here.
pub fn requantize_flag(rq: &Requantize) -> Result<String, String> {
    let format = |q: super::schema::Quantization| match q.flag_value() {
        f @ ("nvfp4" | "bf16") => Ok(f),
        other => Err(format!("met re-quantizes to nvfp4 or bf16, not {other}")),
    };
    let mut parts = Vec::new();
    if let Some(q) = rq.lm_head {
        parts.push(format!("lm_head={}", format(q)?));
    }
    if let Some(q) = rq.experts {
        let f = format(q)?;
        let mut p = rq.expert_projections.clone().unwrap_or_else(|| {
            vec![
                ExpertProjection::Gate,
                ExpertProjection::Up,
                ExpertProjection::Down,
            ]
        });
        p.sort();
        p.dedup();
        use ExpertProjection::{Down, Gate, Up};
        let part = match p.as_slice() {
            [Gate, Up, Down] => "experts",
            [Gate, Up] => "experts.gate_up",
            [Down] => "experts.down",
            _ => {
                return Err(
                    "met fuses each expert's gate and up projections into one matrix, so \
                     expert_projections must list both or neither of \"gate\" and \"up\""
                        .to_owned(),
                );
            }
        };
        parts.push(format!("{part}={f}"));
    }
    Ok(parts.join(","))
}

pub fn launch(entry: &Entry, le: &LaunchEnv) -> Launch {
    let recipe = &entry.recipe;
    let port = le.port.unwrap_or(recipe.serve.port);
    let env = engine_env(recipe);
    let image = image_reference(recipe, &le.version);
    let mut warnings = Vec::new();
    // A Hub checkpoint's pinned commit, passed to `met serve --revision`.
    let mut pinned: Option<String> = None;

    // The model argument of each form, and the container's mounts for it.
    let (native_model, container_model, mounts) = match locate(entry) {
        Location::Hub { repo, revision } => {
            pinned = revision.map(|r| r.as_str().to_owned());
            let cache = format!("{}:{CONTAINER_HF_CACHE}", le.hf_cache.display());
            (repo.clone(), repo, vec![cache])
        }
        Location::Local(local) => {
            let host_path = match &local.found {
                Some(found) => found.display().to_string(),
                None => {
                    warnings.push(local.missing_note());
                    local.written.clone()
                }
            };
            let base = Path::new(&local.written)
                .file_name()
                .map_or_else(|| "model".into(), |n| n.to_string_lossy());
            let inside = format!("/models/{base}");
            (
                host_path.clone(),
                inside.clone(),
                vec![format!("{host_path}:{inside}:ro")],
            )
        }
    };

    // docker run …
    let mut docker: Vec<Vec<String>> = vec![
        words(&["docker", "run", "--rm"]),
        vec!["--name".into(), format!("metrale-{}", recipe.name)],
        vec![
            "--label".into(),
            format!("ai.metrale.recipe={}", recipe.name),
        ],
    ];
    if recipe.serve.device == Device::Cuda {
        docker.push(words(&["--gpus", "all"]));
    }
    docker.push(words(&["--ipc=host"]));
    docker.push(vec!["-p".into(), port_binding(&le.host, port)]);
    docker.extend(mounts.iter().map(|m| vec!["-v".into(), m.clone()]));
    let hub = recipe.checkpoint.repo.is_some();
    if hub && le.hf_token_set {
        docker.push(words(&["-e", "HF_TOKEN"]));
    }
    docker.extend(
        env.iter()
            .map(|(k, v)| vec!["-e".into(), format!("{k}={v}")]),
    );
    docker.push(vec![image.clone()]);
    let with_revision = |mut groups: Vec<Vec<String>>| {
        if let Some(rev) = &pinned {
            groups.insert(1, vec!["--revision".into(), rev.clone()]);
        }
        groups
    };
    let container_cmd = with_revision(serve_groups(recipe, &container_model, port, None));
    docker.extend(container_cmd.iter().cloned());

    let container = ContainerPlan {
        cmd: container_cmd.into_iter().flatten().collect(),
        env: env.clone(),
        binds: mounts,
        port,
        gpus: recipe.serve.device == Device::Cuda,
        hf_token: hub && le.hf_token_set,
    };
    Launch {
        image,
        docker: CommandLine::new(BTreeMap::new(), docker),
        native: CommandLine::new(
            env,
            with_revision(serve_groups(recipe, &native_model, port, Some(&le.host))),
        ),
        warnings,
        container,
    }
}

fn words(ws: &[&str]) -> Vec<String> {
    ws.iter().map(|w| (*w).to_owned()).collect()
}

/// `-p HOST:PORT:PORT`, the bracketed form for an IPv6 address.
fn port_binding(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}:{port}")
    } else {
        format!("{host}:{port}:{port}")
    }
}

/// `met serve MODEL` and its flags, one group an option; `native_host` is `None` in a container
/// (which listens on every interface inside, the binding choosing what the host exposes).
fn serve_groups(
    recipe: &Recipe,
    model: &str,
    port: u16,
    native_host: Option<&str>,
) -> Vec<Vec<String>> {
    let s = &recipe.serve;
    let flag = |name: &str, value: String| vec![name.to_owned(), value];
    let mut g = vec![vec!["met".to_owned(), "serve".to_owned(), model.to_owned()]];
    let in_container = native_host.is_none();
    match native_host {
        None => g.push(flag("--host", "0.0.0.0".into())),
        Some(DEFAULT_HOST) => {}
        Some(host) => g.push(flag("--host", host.to_owned())),
    }
    g.push(flag("--port", port.to_string()));
    g.push(flag("--model-name", recipe.name.clone()));
    g.push(flag("--device", s.device.flag_value().into()));
    g.push(flag("--max-seq-len", s.max_seq_len.to_string()));
    g.push(flag("--max-batch-size", s.max_batch_size.to_string()));
    if let Some(n) = s.max_num_batched_tokens {
        g.push(flag("--max-num-batched-tokens", n.to_string()));
    }
    if let Some(n) = s.prefill_chunk_with_decodes {
        g.push(flag("--prefill-chunk-with-decodes", n.to_string()));
    }
    if let Some(u) = s.gpu_memory_utilization {
        g.push(flag("--gpu-memory-utilization", u.to_string()));
    }
    g.push(flag(
        "--kv-cache-dtype",
        s.kv_cache_dtype.flag_value().into(),
    ));
    if s.prefix_caching {
        g.push(words(&["--enable-prefix-caching"]));
    }
    if !s.thinking {
        g.push(words(&["--disable-thinking"]));
    }
    if let Some(p) = s.tool_call_parser {
        g.push(flag("--tool-call-parser", p.flag_value().into()));
    }
    if let Some(p) = s.reasoning_parser {
        g.push(flag("--reasoning-parser", p.flag_value().into()));
    }
    if let Some(spec) = &s.speculative {
        g.push(vec![
            "--speculative".into(),
            "--num-drafts".into(),
            spec.num_drafts.to_string(),
        ]);
    }
    if let Some(n) = s.ssm_cache_slots {
        g.push(flag("--ssm-cache-slots", n.to_string()));
    }
    if let Some(n) = s.ssm_checkpoint_interval {
        g.push(flag("--ssm-checkpoint-interval", n.to_string()));
    }
    if let Some(f) = s.load_format {
        g.push(flag("--load-format", f.flag_value().into()));
    }
    if s.tensor_parallel_size > 1 {
        g.push(flag(
            "--tensor-parallel-size",
            s.tensor_parallel_size.to_string(),
        ));
    }
    if s.enable_expert_parallel {
        g.push(words(&["--enable-expert-parallel"]));
    }
    if let Some(Ok(plan)) = recipe.checkpoint.requantize.as_ref().map(requantize_flag) {
        g.push(flag("--requantize", plan));
    }
    if in_container {
        g.push(words(&["--no-tui"]));
    }
    g.extend(s.extra_args.iter().map(|a| vec![a.clone()]));
    g
}

/// `KEY=value` words, the value quoted (quoting the whole word would stop the shell reading it
/// as an assignment).
fn env_prefix(env: &BTreeMap<String, String>) -> Vec<String> {
    env.iter()
        .map(|(k, v)| format!("{k}={}", shell_quote(v)))
        .collect()
}

/// Quotes `arg` for a POSIX shell when it holds anything beyond a safe set of characters.
pub fn shell_quote(arg: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "_@%+=:,./-".contains(c);
    if !arg.is_empty() && arg.chars().all(safe) {
        arg.to_owned()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recipe::fixtures::DENSE;

    #[test]
    fn quoting_leaves_plain_words_and_wraps_the_rest() {
        assert_eq!(shell_quote("Qwen/Qwen3-8B"), "Qwen/Qwen3-8B");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("$HOME"), "'$HOME'");
    }

    #[test]
    fn env_values_are_quoted_but_names_are_not() {
        let env = BTreeMap::from([("A".to_owned(), "x y".to_owned())]);
        let line = CommandLine::new(
            env,
            vec![words(&["met", "serve", "m"]), words(&["--port", "1"])],
        );
        assert_eq!(line.shell, "A='x y' met serve m --port 1");
        assert_eq!(line.multiline(), "A='x y' met serve m \\\n  --port 1");
        assert_eq!(line.argv, ["met", "serve", "m", "--port", "1"]);
    }

    /// The ranks a recipe splits the model over reach `met serve`, and nothing when it does not.
    #[test]
    fn ranks_and_expert_parallelism_become_met_flags() {
        let flags = |text: &str| -> Vec<String> {
            let recipe: Recipe = toml::from_str(text).expect("recipe parses");
            serve_groups(&recipe, "m", 8000, Some(DEFAULT_HOST))
                .into_iter()
                .flatten()
                .collect()
        };
        let plain = flags(DENSE);
        assert!(!plain.iter().any(|f| f.contains("parallel")), "{plain:?}");
        let split = flags(&DENSE.replace(
            "max_batch_size = 4",
            "max_batch_size = 4\ntensor_parallel_size = 2\nenable_expert_parallel = true",
        ));
        let at = split
            .iter()
            .position(|f| f == "--tensor-parallel-size")
            .expect("the flag");
        assert_eq!(split[at + 1], "2");
        assert!(split.iter().any(|f| f == "--enable-expert-parallel"));
    }
}
