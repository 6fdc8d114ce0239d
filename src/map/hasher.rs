//! The keyed hash of a `CounterMap`'s index.
//!
//! # Design
//!
//! One step is a folded multiply: the 128-bit product of two 64-bit words,
//! its halves xored, so every input bit reaches the middle bits and, after
//! the fold, the low bits that pick a bin. The state starts at a secret
//! word; each `write` folds the input into it with two more secret words:
//!
//! * bytes: up to 16 at once, as two (possibly overlapping) 8- or 4-byte
//!   reads, so every byte counts; longer inputs take 16 bytes a step. The
//!   length enters the state as a secret multiple of it, so inputs of
//!   different lengths whose reads agree still differ.
//! * integers: one step and a second fold (a `u8`: one step).
//!
//! `finish` returns the state. A `str` key costs two steps (its bytes, then
//! the `0xff` that `str`'s `Hash` appends): a few nanoseconds, where
//! SipHash-1-3 takes tens for a short URL.
//!
//! # Seeds and hostile keys
//!
//! The three secret words come from std's `RandomState`, fresh for every
//! map (under loom: fixed, so that a model replays the same probes). The
//! hash is not a cryptographic PRF: whoever learns the seeds (or the hash
//! values, which never leave the map) can make keys collide. Without them
//! we know no way to plan a key stream that collides more often than
//! chance. What collisions cost is bounded by the map, not by the hash:
//! see "Hostile keys" on `CounterMap`.

use std::hash::{BuildHasher, Hasher};

/// The 128-bit product of `a` and `b`, its halves xored.
#[inline(always)]
fn fold_mul(a: u64, b: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    (p as u64) ^ ((p >> 64) as u64)
}

/// `n` bytes of `b` from `at`, little-endian (`n` is 4 or 8). Fixed-size
/// array conversions, so that a build without cross-crate LTO still gets
/// one load, not a `memcpy` call.
#[inline(always)]
fn read(b: &[u8], at: usize, n: usize) -> u64 {
    if n == 8 {
        let w: [u8; 8] = b[at..at + 8].try_into().expect("8 bytes");
        u64::from_le_bytes(w)
    } else {
        let w: [u8; 4] = b[at..at + 4].try_into().expect("4 bytes");
        u64::from(u32::from_le_bytes(w))
    }
}

/// Builds [`KeyHasher`]s with one map's secret seeds.
#[derive(Clone, Copy)]
pub(crate) struct KeyedState {
    seed: [u64; 3],
}

impl KeyedState {
    /// Fresh secret seeds.
    #[cfg(not(shardcount_loom))]
    pub(crate) fn new() -> Self {
        let s = std::collections::hash_map::RandomState::new();
        KeyedState {
            seed: [s.hash_one(1u8), s.hash_one(2u8), s.hash_one(3u8)],
        }
    }

    /// Fixed seeds: a model must take the same probes in every replay.
    #[cfg(shardcount_loom)]
    pub(crate) fn new() -> Self {
        KeyedState {
            seed: [
                0x243f_6a88_85a3_08d3,
                0x1319_8a2e_0370_7344,
                0xa409_3822_299f_31d0,
            ],
        }
    }
}

impl BuildHasher for KeyedState {
    type Hasher = KeyHasher;

    #[inline]
    fn build_hasher(&self) -> KeyHasher {
        KeyHasher {
            acc: self.seed[0],
            k: [self.seed[1], self.seed[2]],
        }
    }
}

/// The hasher itself (see the module notes).
pub(crate) struct KeyHasher {
    acc: u64,
    k: [u64; 2],
}

impl KeyHasher {
    /// Folds two words into the state.
    #[inline(always)]
    fn step(&mut self, a: u64, b: u64) {
        self.acc = fold_mul(a ^ self.acc ^ self.k[0], b ^ self.k[1]);
    }
}

impl Hasher for KeyHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let len = bytes.len();
        let (a, b) = if len > 16 {
            // 16-byte blocks, then the last 16 bytes (overlapping the
            // previous block unless the length is a multiple of 16).
            let mut rest = bytes;
            while rest.len() > 16 {
                self.step(read(rest, 0, 8), read(rest, 8, 8));
                rest = &rest[16..];
            }
            (read(bytes, len - 16, 8), read(bytes, len - 8, 8))
        } else if len >= 8 {
            (read(bytes, 0, 8), read(bytes, len - 8, 8))
        } else if len >= 4 {
            (read(bytes, 0, 4), read(bytes, len - 4, 4))
        } else if len > 0 {
            let three = u64::from(bytes[0]) << 16
                | u64::from(bytes[len / 2]) << 8
                | u64::from(bytes[len - 1]);
            (three, 0)
        } else {
            (0, 0)
        };
        // For one length the reads above are a one-to-one image of the
        // bytes; the length enters through a secret multiple, so that two
        // inputs of different lengths fold alike only by the seeds, never
        // for every map (as a plain `len` xored into a word would).
        self.acc ^= (len as u64).wrapping_mul(self.k[1] | 1);
        self.step(a, b);
    }

    /// One step: `str`'s `Hash` ends with a `0xff` written here, after
    /// its bytes have mixed the state (and a `u8` key has 256 values).
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.step(u64::from(i), 0);
    }

    #[inline]
    fn write_u16(&mut self, i: u16) {
        self.write_u64(u64::from(i));
    }

    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.write_u64(u64::from(i));
    }

    /// Two folds: one folded multiply of a small integer xored with a
    /// seed left its low bits clustered for some seeds (up to 14 of 10,000
    /// sequential keys in one of 16,384 bins, where chance gives about
    /// 6); a second fold by another seed spreads them as chance does.
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.step(i, 0);
        self.acc = fold_mul(self.acc ^ self.k[1], self.k[0] | 1);
    }

    #[inline]
    fn write_u128(&mut self, i: u128) {
        self.step(i as u64, (i >> 64) as u64);
        self.acc = fold_mul(self.acc ^ self.k[1], self.k[0] | 1);
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.acc
    }
}

#[cfg(all(test, not(shardcount_loom)))]
mod tests {
    use super::KeyedState;
    use std::collections::HashSet;
    use std::hash::BuildHasher;

    /// Every byte of inputs from 0 to 40 bytes long counts: flipping any
    /// one bit changes the hash, and no two lengths of zeros collide.
    #[test]
    fn every_byte_and_the_length_count() {
        let s = KeyedState::new();
        let mut zeros = HashSet::new();
        for len in 0..=40usize {
            let base = vec![0u8; len];
            assert!(zeros.insert(s.hash_one(&base[..])), "zeros of length {len}");
            let h = s.hash_one(&base[..]);
            for at in 0..len {
                for bit in 0..8 {
                    let mut v = base.clone();
                    v[at] ^= 1 << bit;
                    assert_ne!(s.hash_one(&v[..]), h, "length {len}, byte {at}, bit {bit}");
                }
            }
        }
    }

    /// URL-like keys and small integers spread over the low bits (the
    /// bin) about as well as chance, for every seed tried: no bin of
    /// 16,384 takes more than a handful of 10,000 keys. (With one fold for
    /// integers, 4 seeds in 300 put 11 to 14 in one bin.)
    #[test]
    fn url_keys_and_integers_spread_over_the_low_bits() {
        for _ in 0..50 {
            spread_once();
        }
    }

    fn spread_once() {
        let s = KeyedState::new();
        let urls = (0..10_000).map(|i| s.hash_one(format!("/page/{i}")));
        let ints = (0..10_000u64).map(|i| s.hash_one(i));
        for (what, hashes) in [("urls", urls.collect::<Vec<_>>()), ("ints", ints.collect())] {
            let mut per_bin = vec![0u32; 1 << 14];
            for h in hashes {
                per_bin[h as usize & ((1 << 14) - 1)] += 1;
            }
            let worst = *per_bin.iter().max().unwrap();
            // Chance gives about 6; a hash that ignores bytes gives hundreds.
            assert!(worst <= 10, "{what}: {worst} keys in one bin");
        }
    }

    /// Two maps' seeds differ, so a key set that collides in one does not
    /// in the next.
    #[test]
    fn seeds_differ_per_map() {
        let (a, b) = (KeyedState::new(), KeyedState::new());
        assert_ne!(a.hash_one("/"), b.hash_one("/"));
    }
}
