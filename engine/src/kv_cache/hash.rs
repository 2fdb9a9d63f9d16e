//! Prefix-cache block hashes, and a cheap hasher for maps keyed by ids or block hashes.
//!
//! A full block's hash is `SipHash-1-3-128(key, parent_hash ‖ token_ids)`, the tokens as
//! little-endian `u32`s. Chaining the parent makes a block's hash name its whole prefix, so one
//! map lookup per block walks the longest cached prefix.
//!
//! Collisions: a hit maps a request onto another request's KV, so a collision would silently
//! corrupt output. Two defences, no token comparison needed:
//! - 128 bits: with `n` distinct blocks ever hashed, a chance collision has probability about
//!   `n² / 2¹²⁹` (10¹² blocks → ~10⁻¹⁵).
//! - A secret key, random per process by default: a client cannot craft two prompts that
//!   collide in order to read another client's cached prefix (SipHash is a keyed PRF).
//!
//! The hash is deterministic for a given key (`KvCacheManager::with_hash_key`); scheduling
//! decisions never depend on hash values, only on hit or miss.

use std::hash::{BuildHasher, Hasher};

/// The hash of a full block and, through its parent, of every token before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockHash(pub u128);

/// The parent of a request's first block.
pub const ROOT_HASH: BlockHash = BlockHash(0);

/// A 128-bit SipHash key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HashKey {
    pub k0: u64,
    pub k1: u64,
}

impl HashKey {
    /// A fresh key from the OS-seeded thread RNG.
    pub fn random() -> Self {
        Self {
            k0: rand::random(),
            k1: rand::random(),
        }
    }
}

/// SipHash state with `C` compression and `D` finalization rounds.
#[derive(Clone, Copy)]
struct Sip<const C: usize, const D: usize> {
    v: [u64; 4],
}

impl<const C: usize, const D: usize> Sip<C, D> {
    fn new(key: HashKey, wide: bool) -> Self {
        let mut v = [
            key.k0 ^ 0x736f_6d65_7073_6575,
            key.k1 ^ 0x646f_7261_6e64_6f6d,
            key.k0 ^ 0x6c79_6765_6e65_7261,
            key.k1 ^ 0x7465_6462_7974_6573,
        ];
        if wide {
            v[1] ^= 0xee;
        }
        Self { v }
    }

    #[inline(always)]
    fn round(&mut self) {
        let [v0, v1, v2, v3] = &mut self.v;
        *v0 = v0.wrapping_add(*v1);
        *v1 = v1.rotate_left(13) ^ *v0;
        *v0 = v0.rotate_left(32);
        *v2 = v2.wrapping_add(*v3);
        *v3 = v3.rotate_left(16) ^ *v2;
        *v0 = v0.wrapping_add(*v3);
        *v3 = v3.rotate_left(21) ^ *v0;
        *v2 = v2.wrapping_add(*v1);
        *v1 = v1.rotate_left(17) ^ *v2;
        *v2 = v2.rotate_left(32);
    }

    #[inline(always)]
    fn compress(&mut self, m: u64) {
        self.v[3] ^= m;
        for _ in 0..C {
            self.round();
        }
        self.v[0] ^= m;
    }

    fn fold(&self) -> u64 {
        self.v[0] ^ self.v[1] ^ self.v[2] ^ self.v[3]
    }

    /// `last` is the final word: the 0..7 tail bytes with `len mod 256` in the top byte.
    #[cfg(test)]
    fn finish64(mut self, last: u64) -> u64 {
        self.compress(last);
        self.v[2] ^= 0xff;
        for _ in 0..D {
            self.round();
        }
        self.fold()
    }

    /// The 128-bit output as `lo | hi << 64`, where `lo` is the reference's first 8 bytes.
    fn finish128(mut self, last: u64) -> u128 {
        self.compress(last);
        self.v[2] ^= 0xee;
        for _ in 0..D {
            self.round();
        }
        let lo = self.fold();
        self.v[1] ^= 0xdd;
        for _ in 0..D {
            self.round();
        }
        let hi = self.fold();
        u128::from(lo) | (u128::from(hi) << 64)
    }
}

/// The hash of one full block: `tokens` under the prefix named by `parent`.
pub fn hash_block(key: HashKey, parent: BlockHash, tokens: &[u32]) -> BlockHash {
    // Message bytes: parent (16, little-endian) then each token (4, little-endian), fed as
    // whole 64-bit words; this is byte-for-byte the reference SipHash of that string.
    let mut s = Sip::<1, 3>::new(key, true);
    s.compress(parent.0 as u64);
    s.compress((parent.0 >> 64) as u64);
    let mut pairs = tokens.chunks_exact(2);
    for p in &mut pairs {
        s.compress(u64::from(p[0]) | (u64::from(p[1]) << 32));
    }
    let len_bytes = 16 + 4 * tokens.len() as u64;
    let tail = pairs.remainder().first().map_or(0, |&t| u64::from(t));
    BlockHash(s.finish128(tail | (len_bytes << 56)))
}

/// Multiplicative hasher for maps keyed by request ids and block hashes (already uniform).
/// Not DoS-resistant on its own: keys are engine-assigned ids or keyed SipHash outputs.
#[derive(Debug, Clone, Copy, Default)]
pub struct FastHasher(u64);

const MUL: u64 = 0x9e37_79b9_7f4a_7c15;

impl Hasher for FastHasher {
    fn finish(&self) -> u64 {
        // hashbrown takes its 7 tag bits from the top: keep the well-mixed bits there.
        self.0.rotate_left(26)
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(5) ^ x).wrapping_mul(MUL);
    }

    fn write_u128(&mut self, x: u128) {
        self.write_u64(x as u64 ^ (x >> 64) as u64);
    }
}

#[derive(Debug, Clone, Copy, Default)]
pub struct FastBuild;

impl BuildHasher for FastBuild {
    type Hasher = FastHasher;
    fn build_hasher(&self) -> FastHasher {
        FastHasher(0)
    }
}

pub type FastMap<K, V> = std::collections::HashMap<K, V, FastBuild>;

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng, rngs::StdRng};

    /// Reference byte-oriented SipHash-c-d, to check the word-fed `hash_block` against.
    fn sip_bytes<const C: usize, const D: usize>(key: HashKey, msg: &[u8], wide: bool) -> u128 {
        let mut s = Sip::<C, D>::new(key, wide);
        let mut words = msg.chunks_exact(8);
        for w in &mut words {
            let mut b = [0u8; 8];
            b.copy_from_slice(w);
            s.compress(u64::from_le_bytes(b));
        }
        let mut tail = [0u8; 8];
        tail[..words.remainder().len()].copy_from_slice(words.remainder());
        let last = u64::from_le_bytes(tail) | ((msg.len() as u64) << 56);
        if wide {
            s.finish128(last)
        } else {
            u128::from(s.finish64(last))
        }
    }

    const REF_KEY: HashKey = HashKey {
        k0: 0x0706_0504_0302_0100,
        k1: 0x0f0e_0d0c_0b0a_0908,
    };

    #[test]
    fn siphash24_64_matches_std() {
        let mut rng = StdRng::seed_from_u64(1);
        for len in 0..70 {
            let msg: Vec<u8> = (0..len).map(|_| rng.random()).collect();
            let key = HashKey {
                k0: rng.random(),
                k1: rng.random(),
            };
            #[allow(deprecated)]
            let mut std_sip = std::hash::SipHasher::new_with_keys(key.k0, key.k1);
            std_sip.write(&msg);
            assert_eq!(
                sip_bytes::<2, 4>(key, &msg, false),
                u128::from(std_sip.finish())
            );
        }
    }

    #[test]
    fn siphash24_128_matches_reference_vectors() {
        // vectors_sip128[0..4] of the SipHash reference implementation (key 00..0f,
        // message 00..len-1), as bytes.
        let want: [[u8; 16]; 4] = [
            [
                0xa3, 0x81, 0x7f, 0x04, 0xba, 0x25, 0xa8, 0xe6, 0x6d, 0xf6, 0x72, 0x14, 0xc7, 0x55,
                0x02, 0x93,
            ],
            [
                0xda, 0x87, 0xc1, 0xd8, 0x6b, 0x99, 0xaf, 0x44, 0x34, 0x76, 0x59, 0x11, 0x9b, 0x22,
                0xfc, 0x45,
            ],
            [
                0x81, 0x77, 0x22, 0x8d, 0xa4, 0xa4, 0x5d, 0xc7, 0xfc, 0xa3, 0x8b, 0xde, 0xf6, 0x0a,
                0xff, 0xe4,
            ],
            [
                0x9c, 0x70, 0xb6, 0x0c, 0x52, 0x67, 0xa9, 0x4e, 0x5f, 0x33, 0xb6, 0xb0, 0x29, 0x85,
                0xed, 0x51,
            ],
        ];
        for (len, want) in want.iter().enumerate() {
            let msg: Vec<u8> = (0..len as u8).collect();
            let got = sip_bytes::<2, 4>(REF_KEY, &msg, true);
            assert_eq!(&got.to_le_bytes(), want, "message length {len}");
        }
    }

    #[test]
    fn hash_block_is_siphash13_128_of_the_bytes() {
        let mut rng = StdRng::seed_from_u64(2);
        for n in 0..40 {
            let tokens: Vec<u32> = (0..n).map(|_| rng.random()).collect();
            let parent = BlockHash(rng.random());
            let mut msg = parent.0.to_le_bytes().to_vec();
            for t in &tokens {
                msg.extend_from_slice(&t.to_le_bytes());
            }
            let want = sip_bytes::<1, 3>(REF_KEY, &msg, true);
            assert_eq!(
                hash_block(REF_KEY, parent, &tokens),
                BlockHash(want),
                "{n} tokens"
            );
        }
    }

    #[test]
    fn hash_depends_on_parent_tokens_order_and_key() {
        let k = REF_KEY;
        let h = hash_block(k, ROOT_HASH, &[1, 2, 3, 4]);
        assert_eq!(h, hash_block(k, ROOT_HASH, &[1, 2, 3, 4]));
        assert_ne!(h, hash_block(k, ROOT_HASH, &[2, 1, 3, 4]));
        assert_ne!(h, hash_block(k, BlockHash(1), &[1, 2, 3, 4]));
        assert_ne!(h, hash_block(k, ROOT_HASH, &[1, 2, 3]));
        let other = HashKey { k0: 1, k1: 2 };
        assert_ne!(h, hash_block(other, ROOT_HASH, &[1, 2, 3, 4]));
    }
}
