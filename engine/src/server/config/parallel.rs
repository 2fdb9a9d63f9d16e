//! The flags that split the model over ranks and hosts: `--tensor-parallel-size`,
//! `--enable-expert-parallel`, `--nnodes`, `--node-rank`, `--master-addr`, `--master-port`,
//! checked against each other and the checkpoint (`docs/multi-gpu.md`).

use super::{Device, ServeFlags, bad};
use crate::engine_core::ranks::Rendezvous;
use crate::loader::ModelConfig;

/// The flags that spread the ranks over hosts.
#[derive(Debug, Clone, Default)]
pub struct NodeFlags {
    pub nnodes: usize,
    pub node_rank: usize,
    pub master_addr: Option<String>,
    pub master_port: Option<u16>,
    /// `--dist-timeout` in seconds.
    pub dist_timeout_secs: u64,
}

impl NodeFlags {
    /// Where the ranks meet, checked against the group size; `None` for one node and no
    /// address or port given.
    fn rendezvous(&self, world: usize) -> anyhow::Result<Option<Rendezvous>> {
        let NodeFlags {
            nnodes, node_rank, ..
        } = *self;
        if nnodes == 0 || !world.is_multiple_of(nnodes) {
            return Err(bad(
                "--nnodes",
                format!(
                    "{nnodes} must be at least 1 and divide --tensor-parallel-size {world} (each \
                     node runs the same number of ranks)"
                ),
            )
            .into());
        }
        if node_rank >= nnodes {
            return Err(bad(
                "--node-rank",
                format!("{node_rank} is not one of 0..{nnodes} (--nnodes {nnodes})"),
            )
            .into());
        }
        if nnodes == 1 && self.master_addr.is_none() && self.master_port.is_none() {
            return Ok(None);
        }
        let port = match (self.master_port, nnodes) {
            (Some(p), _) => p,
            (None, 1) => 0,
            (None, _) => {
                return Err(bad(
                    "--master-port",
                    "is needed with --nnodes above 1: the port node 0 listens on, the same on \
                     every node (e.g. 29500)",
                )
                .into());
            }
        };
        if nnodes > 1 && self.master_addr.is_none() {
            return Err(bad(
                "--master-addr",
                "is needed with --nnodes above 1: node 0's address, the same on every node",
            )
            .into());
        }
        let host = self.master_addr.as_deref().unwrap_or("127.0.0.1");
        let master = std::net::ToSocketAddrs::to_socket_addrs(&(host, port))
            .ok()
            .and_then(|mut a| a.next())
            .ok_or_else(|| {
                bad(
                    "--master-addr",
                    format!("{host:?} does not resolve to an address; give node 0's IP or name"),
                )
            })?;
        Ok(Some(Rendezvous {
            master,
            nnodes,
            node_rank,
        }))
    }
}

/// The parallel flags of `flags` against each other and `model`: where the ranks meet, if
/// anywhere but the default.
pub(super) fn check(flags: &ServeFlags, model: &ModelConfig) -> anyhow::Result<Option<Rendezvous>> {
    match flags.tensor_parallel_size {
        0 => return Err(bad("--tensor-parallel-size", "must be at least 1").into()),
        1 => {}
        n if flags.device != Device::Cpu => {
            return Err(bad(
                "--tensor-parallel-size",
                format!(
                    "{n} ranks on cuda need NCCL between the GPUs, which met does not have \
                         yet; serve on one GPU, or split the model over CPU processes with \
                         --device cpu"
                ),
            )
            .into());
        }
        _ if flags.speculative => {
            return Err(bad(
                "--tensor-parallel-size",
                "does not combine with --speculative yet (the MTP head is not split); drop one",
            )
            .into());
        }
        _ => {}
    }
    let rendezvous = flags.nodes.rendezvous(flags.tensor_parallel_size)?;
    if flags.enable_expert_parallel {
        if flags.tensor_parallel_size < 2 {
            return Err(bad(
                "--enable-expert-parallel",
                "splits the experts over the ranks of --tensor-parallel-size; give it 2 or more",
            )
            .into());
        }
        if model.moe.is_none() {
            return Err(bad(
                "--enable-expert-parallel",
                format!(
                    "{} has no routed experts to split; drop the flag",
                    model.architecture
                ),
            )
            .into());
        }
    }
    Ok(rendezvous)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(nnodes: usize, node_rank: usize, addr: Option<&str>, port: Option<u16>) -> NodeFlags {
        NodeFlags {
            nnodes,
            node_rank,
            master_addr: addr.map(str::to_owned),
            master_port: port,
            ..Default::default()
        }
    }

    fn refused(n: NodeFlags, world: usize) -> String {
        n.rendezvous(world).expect_err("refused").to_string()
    }

    #[test]
    fn node_flags_are_checked_against_each_other() {
        assert_eq!(nodes(1, 0, None, None).rendezvous(2).expect("ok"), None);
        let r = nodes(2, 1, Some("127.0.0.1"), Some(29500))
            .rendezvous(4)
            .expect("ok")
            .expect("a rendezvous");
        assert_eq!(r.master.to_string(), "127.0.0.1:29500");
        assert_eq!((r.nnodes, r.node_rank), (2, 1));
        assert!(refused(nodes(3, 0, Some("a"), Some(1)), 4).starts_with("--nnodes: 3 must"));
        assert!(refused(nodes(2, 2, Some("a"), Some(1)), 4).starts_with("--node-rank: 2 is not"));
        assert!(refused(nodes(2, 0, Some("127.0.0.1"), None), 4).starts_with("--master-port"));
        assert!(refused(nodes(2, 0, None, Some(29500)), 4).starts_with("--master-addr: is needed"));
        let e = refused(nodes(2, 0, Some("no such host.invalid"), Some(1)), 4);
        assert!(e.contains("does not resolve"), "{e}");
    }
}
