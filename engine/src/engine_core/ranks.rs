//! `--tensor-parallel-size N`: rank 0 (this process, `met serve`) starts ranks 1..N as
//! `met rank` processes on this host, meets them over TCP (`parallel/tcp.rs`), and serves with
//! its shard wrapped in [`crate::parallel::ranks::Leader`]; each other rank loads its shard and
//! follows ([`run_rank`]). The rendezvous is an address and port, so ranks on other hosts
//! could join the same way (`docs/multi-gpu.md`).

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use sha2::{Digest, Sha256};

use crate::backend::{CpuBackend, HybridOps};
use crate::loader::{LoadFormat, ModelDir, Requantize};
use crate::models::Model;
use crate::models::registry::{self, LoadOptions, WithModel};
use crate::parallel::Collective;
use crate::parallel::ranks::follow;
use crate::parallel::tcp::{Identity, TcpGroup};

/// How long ranks wait for each other to meet: enough to start a process, not to load.
const RENDEZVOUS_TIMEOUT: Duration = Duration::from_secs(60);

/// What the ranks agree on: the checkpoint's path and its config.json's digest.
pub fn fingerprint(dir: &Path) -> anyhow::Result<String> {
    let config = std::fs::read(dir.join("config.json"))
        .with_context(|| format!("failed to read {}", dir.join("config.json").display()))?;
    let digest = Sha256::digest(&config);
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("{} {hex}", dir.display()))
}

/// The ranks this process started: stopped and reaped when it is done with them.
#[derive(Debug)]
pub struct RankProcesses(Vec<Child>);

impl Drop for RankProcesses {
    fn drop(&mut self) {
        // A rank exits once rank 0 says stop or its link closes; give it a moment, then make
        // sure, so no rank outlives the server.
        let deadline = Instant::now() + Duration::from_secs(5);
        for child in &mut self.0 {
            while Instant::now() < deadline {
                match child.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// What a rank process needs besides its place.
#[derive(Debug, Clone)]
pub struct RankOptions {
    pub model_dir: PathBuf,
    pub load_format: LoadFormat,
    pub requantize: Requantize,
    pub kv_cache_fp8: bool,
    /// `--enable-expert-parallel`: the experts split whole over the ranks.
    pub expert_parallel: bool,
}

fn load_format_name(f: LoadFormat) -> &'static str {
    match f {
        LoadFormat::Auto => "auto",
        LoadFormat::Dummy => "dummy",
    }
}

/// Rank 0: start ranks 1..`world` and meet them. The group is ready for collectives when this
/// returns; the ranks then load their shards while this one loads its own.
pub fn start_group(
    world: usize,
    options: &RankOptions,
) -> anyhow::Result<(Arc<TcpGroup>, RankProcesses)> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .context("failed to open the tensor-parallel rendezvous port on 127.0.0.1")?;
    let master = listener.local_addr()?;
    let id = Identity {
        world,
        expert_parallel: options.expert_parallel,
        fingerprint: fingerprint(&options.model_dir)?,
    };
    let exe = std::env::current_exe().context("failed to find met's own executable")?;
    let mut children = RankProcesses(Vec::new());
    for rank in 1..world {
        let mut cmd = Command::new(&exe);
        cmd.arg("rank")
            .arg(&options.model_dir)
            .args(["--rank", &rank.to_string(), "--world", &world.to_string()])
            .args(["--master", &master.to_string()])
            .args(["--fingerprint", &id.fingerprint])
            .args(["--load-format", load_format_name(options.load_format)]);
        if !options.requantize.is_empty() {
            cmd.args(["--requantize", &options.requantize.to_string()]);
        }
        if options.kv_cache_fp8 {
            cmd.arg("--kv-cache-fp8");
        }
        if options.expert_parallel {
            cmd.arg("--expert-parallel");
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("failed to start tensor-parallel rank {rank}"))?;
        children.0.push(child);
    }
    let group = TcpGroup::lead(&listener, &id, RENDEZVOUS_TIMEOUT)?;
    Ok((Arc::new(group), children))
}

/// A rank other than 0, in its own process: join rank 0 at `master`, load this rank's shard
/// on the CPU, then run every step rank 0 sends until it says stop.
pub fn run_rank(
    options: &RankOptions,
    rank: usize,
    world: usize,
    master: SocketAddr,
    fingerprint_given: &str,
) -> anyhow::Result<()> {
    if rank == 0 || rank >= world {
        bail!("rank {rank} is not one of 1..{world}: rank 0 is `met serve` itself");
    }
    let id = Identity {
        world,
        expert_parallel: options.expert_parallel,
        fingerprint: fingerprint_given.to_owned(),
    };
    let group = Arc::new(TcpGroup::join(master, rank, &id, RENDEZVOUS_TIMEOUT)?);
    let dir = ModelDir::open(&options.model_dir)?;
    let load = LoadOptions {
        load_format: options.load_format,
        mtp: false,
        requantize: options.requantize,
    };
    let backend = CpuBackend::with_fp8_kv_cache(options.kv_cache_fp8);
    let tp: Arc<dyn Collective<CpuBackend>> = group.clone();
    registry::load_rank(backend, &dir, load, Some(tp), &mut |_| {}, Follow(group))?
}

/// Runs the loaded shard as a follower.
struct Follow(Arc<TcpGroup>);

impl<B: HybridOps> WithModel<B> for Follow {
    type Output = anyhow::Result<()>;
    fn run<M: Model<B> + 'static>(self, backend: B, model: M) -> Self::Output {
        Ok(follow(&backend, &model, &self.0)?)
    }
}
