//! `histogram!` under the [`ShardedLayer`](super::ShardedLayer): each key
//! records into a sharded [`Histogram`](crate::Histogram), taken and
//! folded into the inner recorder's histogram on the layer's interval.
//!
//! Protocol (maintainers' notes): `Folds::entries` maps keys to entries,
//! inserted at registration, never removed while the recorder lives. A
//! fold holds the entry's `fold` lock from the take to the last inner
//! record, so a flush that returns has waited for a fold in progress (as
//! the counters' folds). The take is the histogram's lossless one.

use super::KeyMap;
use crate::primitive::sync::{lock, Arc, Mutex};
use ::metrics::{HistogramFn, Key, Metadata, Recorder};

/// Values are kept in units of 10<sup>-9</sup> of the recorded unit.
const SCALE: f64 = 1e9;
/// The largest value kept sharded: `u64::MAX` units, about 1.8 × 10^10.
const MAX_SHARDED: f64 = u64::MAX as f64 / SCALE;

/// One key: the sharded histogram and the inner recorder's.
struct Entry {
    histogram: crate::Histogram,
    inner: ::metrics::Histogram,
    fold: Mutex<()>,
}

impl Entry {
    /// Takes what was recorded and hands each bucket to the inner
    /// histogram as its representative value, `count` times.
    fn fold(&self) {
        let _held = lock(&self.fold);
        let taken = self.histogram.take();
        for (value, count) in taken.representatives() {
            // A bucket count above usize::MAX (never on 64-bit) in steps.
            let mut left = count;
            while left > 0 {
                let n = usize::try_from(left).unwrap_or(usize::MAX);
                self.inner.record_many(value as f64 / SCALE, n);
                left -= n as u64;
            }
        }
    }
}

impl HistogramFn for Entry {
    #[inline]
    fn record(&self, value: f64) {
        if (0.0..MAX_SHARDED).contains(&value) {
            self.histogram.record((value * SCALE).round() as u64);
        } else {
            // Negative, NaN or huge: passed on as it is, exactly.
            self.inner.record(value);
        }
    }
}

/// Every histogram key the layer has seen.
#[derive(Default)]
pub(super) struct Folds {
    entries: Mutex<KeyMap<Arc<Entry>>>,
}

impl Folds {
    /// The handle for `key`, registering it with the inner recorder on
    /// first use. Takes the map's lock: keep the handle for a hot path.
    pub(super) fn handle<R: Recorder>(
        &self,
        inner: &R,
        key: &Key,
        metadata: &Metadata<'_>,
    ) -> ::metrics::Histogram {
        if let Some(e) = lock(&self.entries).get(key) {
            return ::metrics::Histogram::from_arc(Arc::clone(e));
        }
        // Registered without our lock held, as for counters; a racing
        // registration of the same key wins.
        let inner = inner.register_histogram(key, metadata);
        let mut entries = lock(&self.entries);
        let e = entries.entry(key.clone()).or_insert_with(|| {
            Arc::new(Entry {
                histogram: crate::Histogram::new(),
                inner,
                fold: Mutex::new(()),
            })
        });
        ::metrics::Histogram::from_arc(Arc::clone(e))
    }

    /// Folds every key.
    pub(super) fn flush(&self) {
        let entries: Vec<Arc<Entry>> = lock(&self.entries).values().cloned().collect();
        entries.iter().for_each(|e| e.fold());
    }
}
