//! `met`'s command line (clap types only).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "met",
    version,
    about = "Metrale inference engine",
    propagate_version = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Score a token sequence: each next token's log-probability and the top-k alternatives, as JSON.
    Score(ScoreArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Device {
    Cpu,
    /// The first NVIDIA GPU (a `met` built with `--features cuda`).
    Cuda,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LoadFormatArg {
    /// Safetensors weights from the model directory.
    Auto,
    /// Random weights of the right shapes from config.json alone (for benchmarks).
    Dummy,
}

#[derive(Debug, Clone, Args)]
pub struct ModelArgs {
    /// A Hugging Face checkpoint directory (config.json, *.safetensors, tokenizer.json).
    pub model: PathBuf,
    /// Where to run the model.
    #[arg(long, value_enum, default_value = "cpu")]
    pub device: Device,
    /// How to obtain weights.
    #[arg(long, value_enum, default_value = "auto")]
    pub load_format: LoadFormatArg,
}

#[derive(Debug, Args)]
pub struct ScoreArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Token ids, comma-separated (e.g. 9707,11,1879).
    #[arg(
        long,
        value_delimiter = ',',
        conflicts_with = "tokens_file",
        required_unless_present = "tokens_file"
    )]
    pub tokens: Vec<u32>,
    /// A JSON file holding an array of token ids.
    #[arg(long)]
    pub tokens_file: Option<PathBuf>,
    /// Alternatives to report at each position.
    #[arg(long, default_value_t = 5)]
    pub top_k: usize,
}
