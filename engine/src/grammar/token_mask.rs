//! A row's allowed tokens as a bitmask: one bit a token id, 32 to a `u32` word
//! (`words[t / 32] >> (t % 32) & 1`), the layout llguidance computes and the CUDA sampler
//! uploads. [`TokenMask::apply`] is the host twin of `sample.cu`'s `sample_token_mask`.

use std::sync::Arc;

/// The tokens a row may take next; ids at or past `len` are forbidden.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenMask {
    /// `len.div_ceil(32)` words, the bits at or past `len` clear.
    words: Vec<u32>,
    len: usize,
}

/// What the grammar asks of one row to sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RowMask {
    /// Nothing to mask: the text is free here (`auto`'s text before a call opens), or the
    /// row follows a draft the grammar forbids (its token is never used).
    Free,
    /// Only these tokens.
    Tokens(Arc<TokenMask>),
}

impl RowMask {
    /// The mask, if there is one.
    pub fn tokens(&self) -> Option<&Arc<TokenMask>> {
        match self {
            RowMask::Free => None,
            RowMask::Tokens(m) => Some(m),
        }
    }
}

impl TokenMask {
    /// A mask over `len` ids from its words (as many as `len` needs; missing ones are zero,
    /// extra ones and bits past `len` are dropped).
    pub fn from_words(mut words: Vec<u32>, len: usize) -> Self {
        words.resize(len.div_ceil(32), 0);
        if !len.is_multiple_of(32)
            && let Some(last) = words.last_mut()
        {
            *last &= (1u32 << (len % 32)) - 1;
        }
        Self { words, len }
    }

    /// A mask over `len` ids allowing exactly `ids` (those below `len`).
    pub fn allowing(len: usize, ids: impl IntoIterator<Item = u32>) -> Self {
        let mut m = Self::from_words(Vec::new(), len);
        for t in ids {
            m.allow(t);
        }
        m
    }

    /// Allow `t` too (nothing when it is past `len`).
    pub fn allow(&mut self, t: u32) {
        if (t as usize) < self.len {
            self.words[t as usize / 32] |= 1 << (t % 32);
        }
    }

    /// Forbid `t`.
    pub fn forbid(&mut self, t: u32) {
        if (t as usize) < self.len {
            self.words[t as usize / 32] &= !(1 << (t % 32));
        }
    }

    pub fn allows(&self, t: u32) -> bool {
        (t as usize) < self.len && self.words[t as usize / 32] >> (t % 32) & 1 == 1
    }

    /// The ids the mask covers.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// How many ids are allowed.
    pub fn count(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// The words covering `vocab` ids, as the device reads them: this mask's, cut or padded
    /// with zeros (ids past `len` forbidden).
    pub fn words_for(&self, vocab: usize) -> Vec<u32> {
        let mut w = self.words.clone();
        w.resize(vocab.div_ceil(32), 0);
        w
    }

    /// Every logit whose token the mask forbids becomes -inf; allowed ones keep their value.
    pub fn apply(&self, logits: &mut [f32]) {
        for (t, l) in logits.iter_mut().enumerate() {
            if !self.allows(t as u32) {
                *l = f32::NEG_INFINITY;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_past_len_are_forbidden_whatever_the_words_say() {
        let m = TokenMask::from_words(vec![u32::MAX, u32::MAX], 37);
        assert_eq!(m.count(), 37);
        assert!(m.allows(36) && !m.allows(37) && !m.allows(63) && !m.allows(1000));
        assert_eq!(m.words_for(70), vec![u32::MAX, 0x1f, 0]);
        let mut l = vec![1.0f32; 40];
        m.apply(&mut l);
        assert!(l[..37].iter().all(|&v| v == 1.0));
        assert!(l[37..].iter().all(|&v| v == f32::NEG_INFINITY));
    }

    #[test]
    fn allowing_sets_only_those_ids() {
        let m = TokenMask::allowing(33, [0, 32, 33, 500]);
        assert_eq!(m.count(), 2);
        assert!(m.allows(0) && m.allows(32) && !m.allows(33) && !m.allows(1));
        let mut l = vec![3.0f32, 2.0, f32::NAN];
        m.apply(&mut l);
        assert_eq!(l[0], 3.0);
        assert!(l[1..].iter().all(|&v| v == f32::NEG_INFINITY));
    }
}
