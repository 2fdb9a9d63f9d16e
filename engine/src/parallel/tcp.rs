//! [`TcpGroup`]: the ranks of a tensor-parallel group as processes joined by TCP, rank 0 the
//! hub of a star. The rendezvous is rank 0 listening on `--master-addr:--master-port` and
//! every other rank connecting and saying who it is, so the same code joins ranks on one host
//! or several. Rank 0 then sends each step's batch over the same links (`ranks.rs`), and the
//! collectives run over them: each rank sends its tensor to rank 0, which sums (or places)
//! them in rank order, as [`super::local::LocalGroup`] does, and sends the result back.
//!
//! This carries the CPU reference's traffic; on GPUs NCCL carries the collectives
//! (`docs/multi-gpu.md`) and these links only the steps. A rank whose process dies closes its
//! socket, and every rank waiting on it gets [`BackendError::GroupLost`], not a hang.

use std::io::{BufReader, BufWriter};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::host::{self, HostValues};
use super::wire::{self, Reader, Tag, Writer};
use super::{Collective, Shard};
use crate::backend::{Backend, BackendError, Result};

/// One link: buffered both ways over one socket.
struct Link {
    rank: usize,
    read: BufReader<TcpStream>,
    write: BufWriter<TcpStream>,
}

impl Link {
    fn new(rank: usize, stream: TcpStream) -> std::io::Result<Self> {
        stream.set_nodelay(true)?;
        Ok(Self {
            rank,
            read: BufReader::new(stream.try_clone()?),
            write: BufWriter::new(stream),
        })
    }

    fn send(&mut self, tag: Tag, payload: &[u8]) -> Result<()> {
        wire::write_frame(&mut self.write, tag, payload).map_err(|e| lost(self.rank, &e))
    }

    fn recv(&mut self) -> Result<(Tag, Vec<u8>)> {
        wire::read_frame(&mut self.read).map_err(|e| lost(self.rank, &e))
    }

    /// The next frame, which must be `want`.
    fn expect(&mut self, want: Tag) -> Result<Vec<u8>> {
        match self.recv()? {
            (tag, payload) if tag == want => Ok(payload),
            (tag, _) => Err(BackendError::GroupLost(format!(
                "rank {} sent {tag:?} where {want:?} was due: the group is out of step",
                self.rank
            ))),
        }
    }
}

fn split_name(expert_parallel: bool) -> &'static str {
    if expert_parallel {
        "whole (expert parallel)"
    } else {
        "by width"
    }
}

fn lost(rank: usize, e: &std::io::Error) -> BackendError {
    use std::io::ErrorKind::{TimedOut, WouldBlock};
    // A read timeout is only ever set on rank 0's links, for the length of one collective.
    if matches!(e.kind(), WouldBlock | TimedOut) {
        return BackendError::GroupLost(format!(
            "rank {rank} of the tensor-parallel group sent nothing within --dist-timeout in \
             the middle of a step: it is stuck (or its step is slower than the timeout allows; \
             raise --dist-timeout for very long steps)"
        ));
    }
    BackendError::GroupLost(format!(
        "the link to rank {rank} of the tensor-parallel group failed ({e}): that rank is gone"
    ))
}

fn io_err(e: std::io::Error) -> BackendError {
    BackendError::GroupLost(format!("a tensor-parallel frame was malformed ({e})"))
}

/// What a joining rank must agree on with rank 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub world: usize,
    /// Experts split whole over the ranks ([`Shard::expert_parallel`]).
    pub expert_parallel: bool,
    /// What names the model, so ranks started on different checkpoints refuse each other.
    pub fingerprint: String,
}

/// One rank's end of the group: rank 0 holds a link to every other rank (in rank order),
/// the others one link to rank 0.
pub struct TcpGroup {
    shard: Shard,
    links: Mutex<Vec<Link>>,
}

impl TcpGroup {
    /// Rank 0: accept the other `world - 1` ranks on `listener` within `timeout`. Once
    /// joined, a rank that sends nothing for `step_timeout` while rank 0 waits on it in a
    /// collective is taken for stuck ([`BackendError::GroupLost`]); rank 0 never waits on the
    /// others between steps, so an idle server never times out.
    pub fn lead(
        listener: &TcpListener,
        id: &Identity,
        timeout: Duration,
        step_timeout: Duration,
    ) -> Result<Self> {
        let deadline = Instant::now() + timeout;
        listener.set_nonblocking(true).map_err(io_err)?;
        let mut links: Vec<Option<Link>> = (1..id.world).map(|_| None).collect();
        while links.iter().any(Option::is_none) {
            let stream = match listener.accept() {
                Ok((stream, _)) => stream,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if Instant::now() >= deadline {
                        let missing: Vec<String> = (1..id.world)
                            .filter(|r| links[r - 1].is_none())
                            .map(|r| r.to_string())
                            .collect();
                        return Err(BackendError::GroupLost(format!(
                            "rank(s) {} of the tensor-parallel group did not join within {}s",
                            missing.join(", "),
                            timeout.as_secs()
                        )));
                    }
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
                Err(e) => return Err(io_err(e)),
            };
            stream.set_nonblocking(false).map_err(io_err)?;
            // A connection that is not a rank (silent, or sending something else) is dropped
            // and the wait goes on; one that says it is a rank must be the right one.
            let left = deadline.saturating_duration_since(Instant::now());
            stream
                .set_read_timeout(Some(left.max(Duration::from_millis(1))))
                .map_err(io_err)?;
            let mut link =
                Link::new(usize::MAX, stream.try_clone().map_err(io_err)?).map_err(io_err)?;
            let Ok((Tag::Hello, hello)) = wire::read_frame_at_most(&mut link.read, 1 << 16) else {
                continue;
            };
            let mut r = Reader(&hello);
            let Ok((rank, world, experts, fingerprint)) = (|| {
                std::io::Result::Ok((
                    r.u32()? as usize,
                    r.u32()? as usize,
                    r.u32()? == 1,
                    r.text()?,
                ))
            })() else {
                continue;
            };
            // Writes too: a rank that stopped reading fills its socket's buffers.
            let step_timeout = Some(step_timeout.max(Duration::from_millis(1)));
            stream.set_read_timeout(step_timeout).map_err(io_err)?;
            stream.set_write_timeout(step_timeout).map_err(io_err)?;
            let refusal = if experts != id.expert_parallel {
                Some(format!(
                    "it splits the experts {}, rank 0 {}",
                    split_name(experts),
                    split_name(id.expert_parallel)
                ))
            } else if world != id.world {
                Some(format!(
                    "it was started for a group of {world}, rank 0 for {}",
                    id.world
                ))
            } else if fingerprint != id.fingerprint {
                Some(format!(
                    "it loads {fingerprint:?}, rank 0 loads {:?}",
                    id.fingerprint
                ))
            } else if !(1..id.world).contains(&rank) || links[rank - 1].is_some() {
                Some(format!("rank {rank} is not a free place in the group"))
            } else {
                None
            };
            if let Some(why) = refusal {
                let mut w = Writer::default();
                w.text(&why);
                let _ = link.send(Tag::Refused, &w.0);
                return Err(BackendError::GroupLost(format!(
                    "a rank tried to join the tensor-parallel group and was refused: {why}"
                )));
            }
            link.rank = rank;
            link.send(Tag::Welcome, &[])?;
            links[rank - 1] = Some(link);
        }
        Ok(Self {
            shard: Shard {
                expert_parallel: id.expert_parallel,
                ..Shard::new(0, id.world)
            },
            links: Mutex::new(links.into_iter().flatten().collect()),
        })
    }

    /// Rank `rank`: connect to rank 0 at `master` (retrying until `timeout`: rank 0 may not
    /// listen yet) and join.
    pub fn join(master: SocketAddr, rank: usize, id: &Identity, timeout: Duration) -> Result<Self> {
        let deadline = Instant::now() + timeout;
        let stream = loop {
            match TcpStream::connect_timeout(&master, Duration::from_secs(1)) {
                Ok(s) => break s,
                Err(e) if Instant::now() >= deadline => {
                    return Err(BackendError::GroupLost(format!(
                        "rank 0 of the tensor-parallel group did not answer at {master} within \
                         {}s ({e})",
                        timeout.as_secs()
                    )));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        };
        let mut link = Link::new(0, stream).map_err(io_err)?;
        let mut w = Writer::default();
        w.u32(rank as u32)
            .u32(id.world as u32)
            .u32(u32::from(id.expert_parallel))
            .text(&id.fingerprint);
        link.send(Tag::Hello, &w.0)?;
        match link.recv()? {
            (Tag::Welcome, _) => {}
            (Tag::Refused, why) => {
                let why = Reader(&why).text().unwrap_or_default();
                return Err(BackendError::GroupLost(format!(
                    "rank 0 refused rank {rank}: {why}"
                )));
            }
            (tag, _) => {
                return Err(BackendError::GroupLost(format!(
                    "rank 0 answered {tag:?} to rank {rank}'s hello"
                )));
            }
        }
        Ok(Self {
            shard: Shard {
                expert_parallel: id.expert_parallel,
                ..Shard::new(rank, id.world)
            },
            links: Mutex::new(vec![link]),
        })
    }

    fn links(&self) -> Result<MutexGuard<'_, Vec<Link>>> {
        self.links
            .lock()
            .map_err(|_| BackendError::GroupLost("a collective panicked".into()))
    }

    /// Rank 0: send one control frame to every other rank.
    pub fn broadcast(&self, tag: Tag, payload: &[u8]) -> Result<()> {
        for link in self.links()?.iter_mut() {
            link.send(tag, payload)?;
        }
        Ok(())
    }

    /// A rank other than 0: the next control frame from rank 0.
    pub fn next_control(&self) -> Result<(Tag, Vec<u8>)> {
        let mut links = self.links()?;
        let link = links.first_mut().ok_or_else(|| {
            BackendError::GroupLost("rank 0 has no link to itself to read".into())
        })?;
        link.recv()
    }

    /// Every rank's `(values, shape)` in rank order, on rank 0; on the others, their own sent
    /// to rank 0 and nothing back yet (`None`).
    fn gather(&self, mine: HostValues) -> Result<Option<Vec<HostValues>>> {
        let mut links = self.links()?;
        if self.shard.rank != 0 {
            let link = &mut links[0];
            link.send(Tag::Tensor, &tensor_payload(&mine.0, &mine.1))?;
            return Ok(None);
        }
        let mut all = vec![mine];
        for link in links.iter_mut() {
            let payload = link.expect(Tag::Tensor)?;
            all.push(read_tensor(&payload).map_err(io_err)?);
        }
        Ok(Some(all))
    }

    /// Rank 0 sends `result` to every rank; the others receive it.
    fn scatter_result(
        &self,
        result: Option<(Vec<f32>, Vec<usize>)>,
    ) -> Result<(Vec<f32>, Vec<usize>)> {
        let mut links = self.links()?;
        match result {
            Some((values, shape)) => {
                let payload = tensor_payload(&values, &shape);
                for link in links.iter_mut() {
                    link.send(Tag::Tensor, &payload)?;
                }
                Ok((values, shape))
            }
            None => {
                let payload = links[0].expect(Tag::Tensor)?;
                read_tensor(&payload).map_err(io_err)
            }
        }
    }
}

fn tensor_payload(values: &[f32], shape: &[usize]) -> Vec<u8> {
    let dims: Vec<u32> = shape.iter().map(|&d| d as u32).collect();
    let mut w = Writer::default();
    w.u32s(&dims).f32s(values);
    w.0
}

fn read_tensor(payload: &[u8]) -> std::io::Result<HostValues> {
    let mut r = Reader(payload);
    let shape = r.u32s()?.into_iter().map(|d| d as usize).collect();
    Ok((r.f32s()?, shape))
}

impl<B: Backend> Collective<B> for TcpGroup {
    fn shard(&self) -> Shard {
        self.shard
    }

    fn all_reduce_sum(&self, b: &B, t: &mut B::Tensor) -> Result<()> {
        let gathered = self.gather(host::download(b, t)?)?;
        let result = gathered.map(|all| host::sum(&all)).transpose()?;
        *t = host::upload(b, &self.scatter_result(result)?)?;
        Ok(())
    }

    fn all_gather_cols(&self, b: &B, part: &B::Tensor) -> Result<B::Tensor> {
        let gathered = self.gather(host::download(b, part)?)?;
        let result = gathered.map(|all| host::cols(&all)).transpose()?;
        host::upload(b, &self.scatter_result(result)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::CpuBackend;

    fn id(world: usize) -> Identity {
        Identity {
            world,
            expert_parallel: false,
            fingerprint: "model".into(),
        }
    }

    const STEP: Duration = Duration::from_secs(30);

    #[test]
    fn ranks_over_tcp_sum_and_gather_in_rank_order() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let workers: Vec<_> = (1..3)
            .map(|rank| {
                std::thread::spawn(move || {
                    let g =
                        TcpGroup::join(addr, rank, &id(3), Duration::from_secs(10)).expect("join");
                    let b = CpuBackend::default();
                    let r = rank as f32;
                    let mut t = host::upload(&b, &(vec![r, 10.0 * r], vec![1, 2])).expect("tensor");
                    Collective::<CpuBackend>::all_reduce_sum(&g, &b, &mut t).expect("reduce");
                    let cols =
                        Collective::<CpuBackend>::all_gather_cols(&g, &b, &t).expect("gather");
                    (
                        b.to_host(&t).expect("host"),
                        b.to_host(&cols).expect("host"),
                    )
                })
            })
            .collect();
        let lead = TcpGroup::lead(&listener, &id(3), Duration::from_secs(10), STEP).expect("lead");
        let b = CpuBackend::default();
        let mut t = host::upload(&b, &(vec![0.0, 0.0], vec![1, 2])).expect("tensor");
        Collective::<CpuBackend>::all_reduce_sum(&lead, &b, &mut t).expect("reduce");
        let cols = Collective::<CpuBackend>::all_gather_cols(&lead, &b, &t).expect("gather");
        assert_eq!(b.to_host(&t).expect("host"), [3.0, 30.0]);
        assert_eq!(
            b.to_host(&cols).expect("host"),
            [3.0, 30.0, 3.0, 30.0, 3.0, 30.0]
        );
        for w in workers {
            let (sum, gathered) = w.join().expect("a rank");
            assert_eq!(sum, [3.0, 30.0]);
            assert_eq!(gathered, [3.0, 30.0, 3.0, 30.0, 3.0, 30.0]);
        }
    }

    #[test]
    fn a_rank_that_dies_fails_rank_0_and_a_stranger_is_refused() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let worker = std::thread::spawn(move || {
            TcpGroup::join(addr, 1, &id(2), Duration::from_secs(10)).expect("join")
        });
        let lead = TcpGroup::lead(&listener, &id(2), Duration::from_secs(10), STEP).expect("lead");
        drop(worker.join().expect("rank 1")); // its socket closes, as a killed process's does
        let b = CpuBackend::default();
        let mut t = host::upload(&b, &(vec![1.0], vec![1])).expect("tensor");
        let e = Collective::<CpuBackend>::all_reduce_sum(&lead, &b, &mut t).expect_err("gone");
        assert!(matches!(e, BackendError::GroupLost(_)), "{e}");
        assert!(e.to_string().contains("rank 1"), "{e}");

        // A rank of another model is refused, and says why.
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let stranger = std::thread::spawn(move || {
            let other = Identity {
                world: 2,
                expert_parallel: false,
                fingerprint: "another model".into(),
            };
            TcpGroup::join(addr, 1, &other, Duration::from_secs(10)).err()
        });
        let e = TcpGroup::lead(&listener, &id(2), Duration::from_secs(10), STEP).err();
        let e = e.map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("another model"), "{e}");
        let theirs = stranger.join().expect("stranger").map(|e| e.to_string());
        assert!(theirs.is_some_and(|e| e.contains("rank 0 refused rank 1")));
        // A connection that is not a rank is dropped; the real rank still joins.
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let worker = std::thread::spawn(move || {
            let mut noise = TcpStream::connect(addr).expect("connect");
            // A hello tag with a length of 8 GiB (refused by its size, not read).
            let mut bytes = vec![1u8];
            bytes.extend_from_slice(&(1u64 << 33).to_le_bytes());
            std::io::Write::write_all(&mut noise, &bytes).expect("write");
            drop(noise);
            TcpGroup::join(addr, 1, &id(2), Duration::from_secs(10)).map(|_| ())
        });
        TcpGroup::lead(&listener, &id(2), Duration::from_secs(10), STEP).expect("the rank joins");
        worker.join().expect("rank 1").expect("joined");
        // Nobody joins: rank 0 gives up at its deadline, naming who is missing.
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let e = TcpGroup::lead(&listener, &id(3), Duration::from_millis(200), STEP).err();
        let e = e.map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("rank(s) 1, 2"), "{e}");
    }

    #[test]
    fn a_rank_stuck_in_a_step_fails_rank_0_at_the_step_timeout() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let worker = std::thread::spawn(move || {
            let g = TcpGroup::join(addr, 1, &id(2), Duration::from_secs(10)).expect("join");
            // Alive (its socket open) but never sends its part: stuck.
            let _ = rx.recv();
            drop(g);
        });
        let step = Duration::from_millis(300);
        let lead = TcpGroup::lead(&listener, &id(2), Duration::from_secs(10), step).expect("lead");
        let b = CpuBackend::default();
        let mut t = host::upload(&b, &(vec![1.0], vec![1])).expect("tensor");
        let start = Instant::now();
        let e = Collective::<CpuBackend>::all_reduce_sum(&lead, &b, &mut t).expect_err("stuck");
        let waited = start.elapsed();
        assert!(matches!(e, BackendError::GroupLost(_)), "{e}");
        assert!(e.to_string().contains("rank 1") && e.to_string().contains("--dist-timeout"));
        assert!(
            waited >= step && waited < Duration::from_secs(10),
            "{waited:?}"
        );
        tx.send(()).expect("release");
        worker.join().expect("rank 1");
    }
}
