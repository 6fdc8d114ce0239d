//! `MemorySink`: the sink contract in process, behind one mutex.

use super::sink::{Batch, Outcome, Sink, SinkError, WriterId};
use crate::primitive::sync::{lock, Arc, Mutex};
use std::collections::HashMap;

#[derive(Default)]
struct State {
    totals: HashMap<String, i64>,
    last: HashMap<WriterId, u64>,
    down: bool,
    applied: u64,
}

/// A [`Sink`] that keeps per-key totals in process, with the same
/// exactly-once contract as the Redis sink (last sequence per writer).
/// Clones share the totals, so a test or an in-process aggregator can read
/// what an [`Exporter`](super::exporter::Exporter) delivered.
///
/// ```
/// use shardcount::export::{Batch, MemorySink, Outcome, Sink, WriterId};
/// let mut sink = MemorySink::new();
/// let b = Batch::new(WriterId(9), 1, vec![("k".into(), 2)]);
/// assert_eq!(sink.deliver(&[b.clone()]).unwrap(), [Outcome::Applied]);
/// assert_eq!(sink.deliver(&[b]).unwrap(), [Outcome::Duplicate]); // a resend
/// assert_eq!(sink.get("k"), 2);
/// ```
#[derive(Clone, Default, Debug)]
pub struct MemorySink {
    state: Arc<Mutex<State>>,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemorySink")
            .field("keys", &self.totals.len())
            .field("writers", &self.last.len())
            .field("down", &self.down)
            .finish()
    }
}

impl MemorySink {
    /// An empty sink.
    ///
    /// ```
    /// assert_eq!(shardcount::export::MemorySink::new().get("x"), 0);
    /// ```
    #[must_use]
    pub fn new() -> MemorySink {
        MemorySink::default()
    }

    /// The total of `key` (0 if never written).
    ///
    /// ```
    /// assert_eq!(shardcount::export::MemorySink::new().get("x"), 0);
    /// ```
    #[must_use]
    pub fn get(&self, key: &str) -> i64 {
        lock(&self.state).totals.get(key).copied().unwrap_or(0)
    }

    /// Every key's total.
    ///
    /// ```
    /// assert!(shardcount::export::MemorySink::new().totals().is_empty());
    /// ```
    #[must_use]
    pub fn totals(&self) -> HashMap<String, i64> {
        lock(&self.state).totals.clone()
    }

    /// How many batches were applied (duplicates not counted).
    ///
    /// ```
    /// assert_eq!(shardcount::export::MemorySink::new().applied_batches(), 0);
    /// ```
    #[must_use]
    pub fn applied_batches(&self) -> u64 {
        lock(&self.state).applied
    }

    /// While `down`, every delivery fails (to test an unreachable sink).
    ///
    /// ```
    /// use shardcount::export::{Batch, MemorySink, Sink, WriterId};
    /// let mut sink = MemorySink::new();
    /// sink.set_down(true);
    /// assert!(sink.deliver(&[Batch::new(WriterId(1), 1, vec![])]).is_err());
    /// ```
    pub fn set_down(&self, down: bool) {
        lock(&self.state).down = down;
    }
}

impl Sink for MemorySink {
    fn deliver(&mut self, batches: &[Batch]) -> Result<Vec<Outcome>, SinkError> {
        let mut s = lock(&self.state);
        if s.down {
            return Err(SinkError::new("MemorySink is down"));
        }
        let mut out = Vec::with_capacity(batches.len());
        for b in batches {
            let last = s.last.get(&b.writer()).copied().unwrap_or(0);
            if b.seq() <= last {
                out.push(Outcome::Duplicate);
                continue;
            }
            if b.seq() != last + 1 {
                out.push(Outcome::Gap { last });
                continue;
            }
            let bad: Vec<String> = b
                .deltas()
                .iter()
                .filter(|(k, d)| {
                    s.totals
                        .get(k)
                        .copied()
                        .unwrap_or(0)
                        .checked_add(*d)
                        .is_none()
                })
                .map(|(k, _)| k.clone())
                .collect();
            if !bad.is_empty() {
                out.push(Outcome::Rejected { keys: bad });
                continue;
            }
            for (k, d) in b.deltas() {
                *s.totals.entry(k.clone()).or_insert(0) += d;
            }
            s.last.insert(b.writer(), b.seq());
            s.applied += 1;
            out.push(Outcome::Applied);
        }
        Ok(out)
    }
}
