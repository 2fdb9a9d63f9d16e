//! The frames tensor-parallel ranks exchange over their TCP links (`tcp.rs`): a tag, a length,
//! a payload of little-endian numbers. Rank 0 sends each step's batch and the cache
//! allocations; the collectives send tensors. Plain bytes, no serializer: the payloads are
//! a few vectors of integers and floats, and both ends are this binary.

use std::io::{Read, Write};

use crate::backend::BatchInputs;
use crate::kv_cache::{StateInit, StatePlan, StateSave};

/// What a frame carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Tag {
    /// A rank joins: its rank, the group size and the model's fingerprint.
    Hello = 1,
    /// Rank 0 accepts a rank.
    Welcome = 2,
    /// Rank 0 refuses a rank: the reason, as text.
    Refused = 3,
    /// One step's batch ([`BatchInputs`]).
    Step = 4,
    /// Allocate the KV cache: blocks, block size.
    Kv = 5,
    /// Allocate the recurrent-state slots: their count.
    State = 6,
    /// A collective's tensor: its shape, then its values.
    Tensor = 7,
    /// Rank 0 is done: the others exit.
    Stop = 8,
}

impl Tag {
    fn from_u8(b: u8) -> Option<Self> {
        [
            Self::Hello,
            Self::Welcome,
            Self::Refused,
            Self::Step,
            Self::Kv,
            Self::State,
            Self::Tensor,
            Self::Stop,
        ]
        .into_iter()
        .find(|t| *t as u8 == b)
    }
}

/// The largest payload a frame may declare (a step's batch or a tensor of logits fits well
/// below): a corrupt length is an error, not an allocation of whatever it says.
const MAX_PAYLOAD: u64 = 1 << 34;

pub fn write_frame(w: &mut impl Write, tag: Tag, payload: &[u8]) -> std::io::Result<()> {
    let mut head = [0u8; 9];
    head[0] = tag as u8;
    head[1..].copy_from_slice(&(payload.len() as u64).to_le_bytes());
    w.write_all(&head)?;
    w.write_all(payload)?;
    w.flush()
}

pub fn read_frame(r: &mut impl Read) -> std::io::Result<(Tag, Vec<u8>)> {
    read_frame_at_most(r, MAX_PAYLOAD)
}

/// [`read_frame`] refusing a payload over `max` bytes (a hello is a few dozen: a stranger's
/// bytes read as a length must not allocate gigabytes).
pub fn read_frame_at_most(r: &mut impl Read, max: u64) -> std::io::Result<(Tag, Vec<u8>)> {
    let mut head = [0u8; 9];
    r.read_exact(&mut head)?;
    let bad = |m: String| std::io::Error::new(std::io::ErrorKind::InvalidData, m);
    let tag = Tag::from_u8(head[0]).ok_or_else(|| bad(format!("unknown frame tag {}", head[0])))?;
    let mut len = [0u8; 8];
    len.copy_from_slice(&head[1..]);
    let len = u64::from_le_bytes(len);
    if len > max {
        return Err(bad(format!("a frame of {len} bytes")));
    }
    let mut payload = vec![0u8; len as usize];
    r.read_exact(&mut payload)?;
    Ok((tag, payload))
}

/// Builds a payload.
#[derive(Default)]
pub struct Writer(pub Vec<u8>);

impl Writer {
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub fn u32s(&mut self, v: &[u32]) -> &mut Self {
        self.u64(v.len() as u64);
        v.iter()
            .for_each(|x| self.0.extend_from_slice(&x.to_le_bytes()));
        self
    }

    pub fn f32s(&mut self, v: &[f32]) -> &mut Self {
        self.u64(v.len() as u64);
        v.iter()
            .for_each(|x| self.0.extend_from_slice(&x.to_le_bytes()));
        self
    }

    pub fn text(&mut self, s: &str) -> &mut Self {
        self.u64(s.len() as u64);
        self.0.extend_from_slice(s.as_bytes());
        self
    }
}

/// Reads a payload; every read checks the bytes are there.
pub struct Reader<'a>(pub &'a [u8]);

fn short() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, "a frame ended early")
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> std::io::Result<&[u8]> {
        if self.0.len() < n {
            return Err(short());
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    pub fn u32(&mut self) -> std::io::Result<u32> {
        let mut b = [0u8; 4];
        b.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(b))
    }

    pub fn u64(&mut self) -> std::io::Result<u64> {
        let mut b = [0u8; 8];
        b.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(b))
    }

    fn count(&mut self, each: usize) -> std::io::Result<usize> {
        let n = self.u64()?;
        match usize::try_from(n).ok().filter(|n| n * each <= self.0.len()) {
            Some(n) => Ok(n),
            None => Err(short()),
        }
    }

    pub fn u32s(&mut self) -> std::io::Result<Vec<u32>> {
        let n = self.count(4)?;
        let bytes = self.take(n * 4)?;
        Ok(bytes
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    pub fn f32s(&mut self) -> std::io::Result<Vec<f32>> {
        let n = self.count(4)?;
        let bytes = self.take(n * 4)?;
        Ok(bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    pub fn text(&mut self) -> std::io::Result<String> {
        let n = self.count(1)?;
        String::from_utf8(self.take(n)?.to_vec())
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "text not UTF-8"))
    }
}

/// A step's batch as a payload.
pub fn encode_batch(b: &BatchInputs) -> Vec<u8> {
    let mut w = Writer::default();
    for v in [
        &b.token_ids,
        &b.positions,
        &b.slot_mapping,
        &b.seq_starts,
        &b.context_lens,
        &b.block_tables,
        &b.table_rows,
        &b.logits_rows,
    ] {
        w.u32s(v);
    }
    w.u64(b.max_blocks_per_seq as u64)
        .u64(b.block_size as u64)
        .u64(b.states.len() as u64);
    for s in &b.states {
        w.u32(s.slot);
        match s.init {
            StateInit::Continue => w.u32(0).u32(0),
            StateInit::Zero => w.u32(1).u32(0),
            StateInit::Copy(from) => w.u32(2).u32(from),
        };
        w.u64(s.saves.len() as u64);
        for save in &s.saves {
            w.u32(save.after).u32(save.slot);
        }
    }
    w.0
}

pub fn decode_batch(payload: &[u8]) -> std::io::Result<BatchInputs> {
    let mut r = Reader(payload);
    let mut b = BatchInputs {
        token_ids: r.u32s()?,
        positions: r.u32s()?,
        slot_mapping: r.u32s()?,
        seq_starts: r.u32s()?,
        context_lens: r.u32s()?,
        block_tables: r.u32s()?,
        table_rows: r.u32s()?,
        logits_rows: r.u32s()?,
        ..BatchInputs::default()
    };
    b.max_blocks_per_seq = r.u64()? as usize;
    b.block_size = r.u64()? as usize;
    let n = r.count(12)?;
    for _ in 0..n {
        let slot = r.u32()?;
        let init = match (r.u32()?, r.u32()?) {
            (0, _) => StateInit::Continue,
            (1, _) => StateInit::Zero,
            (2, from) => StateInit::Copy(from),
            (t, _) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("unknown state start {t}"),
                ));
            }
        };
        let saves = (0..r.count(8)?)
            .map(|_| {
                Ok(StateSave {
                    after: r.u32()?,
                    slot: r.u32()?,
                })
            })
            .collect::<std::io::Result<_>>()?;
        b.states.push(StatePlan { slot, init, saves });
    }
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_comes_back_as_it_went() {
        let b = BatchInputs {
            token_ids: vec![5, 6, 7],
            positions: vec![0, 1, 9],
            slot_mapping: vec![16, 17, 40],
            seq_starts: vec![0, 2, 3],
            context_lens: vec![2, 10],
            block_tables: vec![1, 0, 2, 3],
            table_rows: vec![],
            groups: vec![],
            logits_rows: vec![1, 2],
            max_blocks_per_seq: 2,
            block_size: 16,
            states: vec![
                StatePlan::padding(),
                StatePlan {
                    slot: 3,
                    init: StateInit::Copy(9),
                    saves: vec![StateSave { after: 1, slot: 10 }],
                },
            ],
        };
        let mut stream = Vec::new();
        write_frame(&mut stream, Tag::Step, &encode_batch(&b)).expect("write");
        let (tag, payload) = read_frame(&mut stream.as_slice()).expect("read");
        assert_eq!(tag, Tag::Step);
        assert_eq!(decode_batch(&payload).expect("decode"), b);
    }

    #[test]
    fn cut_or_corrupt_frames_are_errors() {
        let mut stream = Vec::new();
        write_frame(
            &mut stream,
            Tag::Step,
            &encode_batch(&BatchInputs::default()),
        )
        .expect("write");
        for cut in [0, 5, 9, stream.len() - 1] {
            assert!(read_frame(&mut &stream[..cut]).is_err(), "cut at {cut}");
        }
        let mut bad = stream.clone();
        bad[0] = 99;
        assert!(read_frame(&mut bad.as_slice()).is_err());
        // A count larger than the bytes behind it.
        let mut w = Writer::default();
        w.u64(1 << 40);
        assert!(Reader(&w.0).u32s().is_err());
    }
}
