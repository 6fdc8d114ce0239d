//! Which place numbers hold a key, and which a new key takes.

use super::store::CHUNK;
use std::collections::BTreeSet;

/// Which place numbers hold a key: guarded by the index's lock (it lives
/// in the index's `Writer`). Place number `s` is counter `s % CHUNK` of
/// chunk `s / CHUNK` (the key's `Place`).
#[derive(Default)]
pub(super) struct Places {
    /// Unused numbers of allocated chunks below `high`, lowest first: each
    /// counter at zero (taken when its key left).
    pub(super) free: BTreeSet<usize>,
    /// Chunks below `high`'s chunk that were freed, lowest first.
    free_chunks: BTreeSet<usize>,
    /// Numbers `high..` were never handed out (or lie in freed chunks past
    /// every allocated one).
    pub(super) high: usize,
    /// Keys per chunk, for chunks below `high`'s.
    pub(super) keys: Vec<usize>,
    /// Of those, held by a handle (never moved nor removed, so a chunk
    /// that holds one is never freed): compaction looks past such chunks.
    pub(super) held: Vec<usize>,
}

impl Places {
    /// A number for a new key: the lowest free one, else the first of the
    /// lowest freed chunk, else the next never used (its chunk may need
    /// allocating: `ensure_chunk`).
    pub(super) fn take(&mut self) -> usize {
        let s = if let Some(s) = self.free.pop_first() {
            s
        } else if let Some(c) = self.free_chunks.pop_first() {
            self.free.extend(c * CHUNK + 1..(c + 1) * CHUNK);
            c * CHUNK
        } else {
            let s = self.high;
            self.high += 1;
            if s.is_multiple_of(CHUNK) {
                self.keys.push(0);
                self.held.push(0);
            }
            s
        };
        self.keys[s / CHUNK] += 1;
        s
    }

    /// Gives back `s` (its counter at zero); returns its chunk if that
    /// chunk now holds no key and is to be freed.
    pub(super) fn give_back(&mut self, s: usize) -> Option<usize> {
        let c = s / CHUNK;
        self.keys[c] -= 1;
        self.free.insert(s);
        if self.keys[c] > 0 {
            return None;
        }
        for x in c * CHUNK..((c + 1) * CHUNK).min(self.high) {
            self.free.remove(&x);
        }
        self.free_chunks.insert(c);
        // Freed chunks at the top lower `high`.
        while let Some(&top) = self.free_chunks.last() {
            if (top + 1) * CHUNK < self.high {
                break;
            }
            self.free_chunks.remove(&top);
            self.high = top * CHUNK;
            self.keys.truncate(top);
            self.held.truncate(top);
        }
        Some(c)
    }

    /// Notes that the key at `s` is held from now on (once per key).
    pub(super) fn hold(&mut self, s: usize) {
        self.held[s / CHUNK] += 1;
    }
}
