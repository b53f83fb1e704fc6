//! SipHash-1-3 over 64-bit words: the keyed hash of the shapes, fed whole words (a tag, a
//! child's hash, a count) and byte strings (as their 8-byte words and a last word that
//! holds their length), without the per-call overhead of `std::hash::Hasher`'s byte
//! interface. The word count goes into the last block, so two different sequences of
//! words collide only as SipHash's outputs do: with keys this process drew at random and
//! never shows, content a user chooses cannot be made to collide.

/// Keys of one process's hashes: the hasher's state after each tag word, drawn once.
#[derive(Debug, Clone)]
pub(super) struct Keys {
    tagged: [Sip; TAGS],
}

/// Tags are `0..TAGS`.
pub(super) const TAGS: usize = 9;

impl Keys {
    pub fn random() -> Self {
        let (k0, k1): (u64, u64) = (rand::random(), rand::random());
        let start = Sip {
            v0: k0 ^ 0x736f_6d65_7073_6575,
            v1: k1 ^ 0x646f_7261_6e64_6f6d,
            v2: k0 ^ 0x6c79_6765_6e65_7261,
            v3: k1 ^ 0x7465_6462_7974_6573,
            words: 0,
        };
        Keys {
            tagged: std::array::from_fn(|tag| {
                let mut h = start.clone();
                h.word(tag as u64);
                h
            }),
        }
    }

    /// A hasher that took `tag` (below [`TAGS`]) as its first word.
    #[inline]
    pub fn hasher(&self, tag: u64) -> Sip {
        self.tagged[tag as usize % TAGS].clone()
    }

    /// The hash of a string (`tag` first).
    pub fn str(&self, tag: u64, s: &str) -> u64 {
        let mut h = self.hasher(tag);
        h.bytes(s.as_bytes());
        h.finish()
    }
}

/// One hash being computed.
#[derive(Debug, Clone)]
pub(super) struct Sip {
    v0: u64,
    v1: u64,
    v2: u64,
    v3: u64,
    words: u64,
}

impl Sip {
    #[inline(always)]
    fn round(&mut self) {
        self.v0 = self.v0.wrapping_add(self.v1);
        self.v1 = self.v1.rotate_left(13) ^ self.v0;
        self.v0 = self.v0.rotate_left(32);
        self.v2 = self.v2.wrapping_add(self.v3);
        self.v3 = self.v3.rotate_left(16) ^ self.v2;
        self.v0 = self.v0.wrapping_add(self.v3);
        self.v3 = self.v3.rotate_left(21) ^ self.v0;
        self.v2 = self.v2.wrapping_add(self.v1);
        self.v1 = self.v1.rotate_left(17) ^ self.v2;
        self.v2 = self.v2.rotate_left(32);
    }

    /// One word of input.
    #[inline(always)]
    pub fn word(&mut self, m: u64) {
        self.v3 ^= m;
        self.round();
        self.v0 ^= m;
        self.words = self.words.wrapping_add(1);
    }

    /// A byte string: its 8-byte words, then its tail with its length in the top byte.
    pub fn bytes(&mut self, b: &[u8]) {
        let mut chunks = b.chunks_exact(8);
        // The state in locals through the loop (kept in registers).
        let mut s = self.clone();
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            let m = u64::from_le_bytes(w);
            s.v3 ^= m;
            s.round();
            s.v0 ^= m;
        }
        s.words = s.words.wrapping_add((b.len() / 8) as u64);
        *self = s;
        let mut w = 0u64;
        for (i, b) in chunks.remainder().iter().enumerate() {
            w |= u64::from(*b) << (8 * i);
        }
        self.word(w ^ ((b.len() as u64) << 56));
        // Lengths that agree modulo 256 differ in the number of words, which the last
        // block holds.
    }

    pub fn finish(mut self) -> u64 {
        let n = self.words;
        self.word(n ^ (0xfe << 56));
        self.v2 ^= 0xff;
        self.round();
        self.round();
        self.round();
        self.v0 ^ self.v1 ^ self.v2 ^ self.v3
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn different_inputs_hash_differently() {
        let k = Keys::random();
        let mut seen = std::collections::HashSet::new();
        for s in ["", "a", "ab", "abcdefgh", "abcdefghi", "abcdefgh\0", "\0"] {
            assert!(seen.insert(k.str(3, s)), "{s:?}");
        }
        assert_ne!(k.str(3, "x"), k.str(4, "x"));
        let words = |ws: &[u64]| {
            let mut h = k.hasher(0);
            for w in ws {
                h.word(*w);
            }
            h.finish()
        };
        assert_ne!(words(&[1]), words(&[1, 0]));
        assert_ne!(words(&[]), words(&[0]));
        assert_eq!(words(&[5, 6]), words(&[5, 6]));
        assert_ne!(Keys::random().str(3, "x"), k.str(3, "x"));
    }
}
