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

/// `--dist-timeout`'s default: torch.distributed's, long enough for any one step of a
/// model that fits.
pub const DEFAULT_DIST_TIMEOUT: Duration = Duration::from_secs(600);

/// Where the ranks meet, and which of them run on this host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rendezvous {
    /// Node 0's listening address (`--master-addr:--master-port`).
    pub master: SocketAddr,
    pub nnodes: usize,
    pub node_rank: usize,
}

impl Rendezvous {
    /// The ranks node `node_rank` runs: its even share, in order.
    fn local_ranks(&self, world: usize) -> std::ops::Range<usize> {
        let per = world / self.nnodes;
        self.node_rank * per..(self.node_rank + 1) * per
    }
}

/// What the ranks agree on: the model's config.json, by digest (the checkpoint's path may
/// differ from host to host).
pub fn fingerprint(dir: &Path) -> anyhow::Result<String> {
    let config = std::fs::read(dir.join("config.json"))
        .with_context(|| format!("failed to read {}", dir.join("config.json").display()))?;
    let digest = Sha256::digest(&config);
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("config.json {hex}"))
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
    /// `--dist-timeout`: how long rank 0 waits on another rank inside a step.
    pub step_timeout: Duration,
}

fn load_format_name(f: LoadFormat) -> &'static str {
    match f {
        LoadFormat::Auto => "auto",
        LoadFormat::Dummy => "dummy",
    }
}

/// Rank 0: listen where the ranks meet, start this host's other ranks, and wait for every
/// rank (those of other hosts too) to join. The group is ready for collectives when this
/// returns; the ranks then load their shards while this one loads its own.
pub fn start_group(
    world: usize,
    options: &RankOptions,
    rendezvous: Option<Rendezvous>,
) -> anyhow::Result<(Arc<TcpGroup>, RankProcesses)> {
    let rendezvous = rendezvous.unwrap_or(Rendezvous {
        master: SocketAddr::from(([127, 0, 0, 1], 0)),
        nnodes: 1,
        node_rank: 0,
    });
    let listener = TcpListener::bind(rendezvous.master).with_context(|| {
        format!(
            "failed to listen for the tensor-parallel ranks on {} (--master-addr, \
             --master-port): use an address of this host and a free port",
            rendezvous.master
        )
    })?;
    // This host's ranks dial the port actually bound, on loopback when bound to every address.
    let mut local = listener.local_addr()?;
    if local.ip().is_unspecified() {
        local.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    let id = Identity {
        world,
        expert_parallel: options.expert_parallel,
        fingerprint: fingerprint(&options.model_dir)?,
    };
    let ranks = rendezvous.local_ranks(world);
    let children = spawn_ranks(ranks.start + 1..ranks.end, world, local, &id, options)?;
    let group = TcpGroup::lead(&listener, &id, RENDEZVOUS_TIMEOUT, options.step_timeout)?;
    Ok((Arc::new(group), children))
}

/// A host other than node 0 (`--node-rank` above 0): run this host's ranks, joining node 0,
/// until they are done; an error names the first rank that failed.
pub fn run_node(config: &super::EngineConfig, node: Rendezvous) -> anyhow::Result<()> {
    let world = config.tensor_parallel_size;
    let options = RankOptions {
        model_dir: config.model_dir.clone(),
        load_format: config.load_format,
        requantize: config.requantize,
        kv_cache_fp8: config.kv_cache_fp8,
        expert_parallel: config.enable_expert_parallel,
        step_timeout: config.dist_timeout,
    };
    let id = Identity {
        world,
        expert_parallel: options.expert_parallel,
        fingerprint: fingerprint(&options.model_dir)?,
    };
    let ranks = node.local_ranks(world);
    println!(
        "met: node {} of {}: ranks {}..{} joining {}",
        node.node_rank,
        node.nnodes,
        ranks.start,
        ranks.end - 1,
        node.master
    );
    let mut children = spawn_ranks(ranks.clone(), world, node.master, &id, &options)?;
    let mut failed = None;
    for (rank, child) in ranks.zip(children.0.iter_mut()) {
        let status = child.wait()?;
        if !status.success() && failed.is_none() {
            failed = Some(format!("rank {rank} exited with {status}"));
        }
    }
    match failed {
        Some(why) => bail!("{why} (its error is above)"),
        None => Ok(()),
    }
}

/// Start `met rank` for each of `ranks`, joining `master`.
fn spawn_ranks(
    ranks: std::ops::Range<usize>,
    world: usize,
    master: SocketAddr,
    id: &Identity,
    options: &RankOptions,
) -> anyhow::Result<RankProcesses> {
    let exe = std::env::current_exe().context("failed to find met's own executable")?;
    let mut children = RankProcesses(Vec::new());
    for rank in ranks {
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
    Ok(children)
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
