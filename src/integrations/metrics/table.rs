//! [`KeyTable`]: a recorder's keys and the passes over them, which the
//! recorder, its background thread and its flush handles share: the
//! counter keys' entries, the evicted ones, the histogram keys' folds, and
//! the idle times the passes go by.
//!
//! Protocol (maintainers' notes). Locks order everything, beyond the
//! counters' own atomics, the owned handles' words (`entry.rs`) and
//! eviction's flag and count (`evict.rs`, which also has the lock order).
//!
//! * `KeyTable::entries: Mutex<map>` maps each key to its `Entry` (the
//!   shardcount counter, the inner recorder's counter handle and a fold
//!   lock). Registration (`recorder.rs`) inserts; only eviction removes.
//! * A flush folds every key; the background thread's pass also notes
//!   which keys moved, merges the counters no longer contended and takes
//!   out the idle keys (`evict.rs`).

use super::entry::{Backing, Entry, Inner};
use super::evict::Evicted;
use super::histogram;
use super::key::KeyMap;
use crate::counter::Counter;
use crate::primitive::sync::{lock, Arc, Mutex};
use crate::unwind::FirstPanic;
use ::metrics::{Key, Level, Metadata, Recorder};
use std::sync::Weak;
use std::time::{Duration, Instant};

/// A counter key's entry, folding into the inner recorder's counter.
pub(super) type CounterEntry = Entry<Registered<::metrics::Counter>>;

/// The folds hand their deltas to the inner recorder's counter, and after
/// a quiet pass register the key there again first.
impl Inner for Registered<::metrics::Counter> {
    #[inline]
    fn add(&self, delta: u64) {
        self.handle.increment(delta);
    }

    fn renew(&mut self) {
        if let Some(inner) = self.inner.upgrade() {
            self.handle = self
                .meta
                .with(|meta| inner.register_counter(&self.key, meta));
        }
    }

    fn absolute(&self, value: u64) {
        self.handle.absolute(value);
    }
}

/// What the layer needs of the recorder underneath once a key is
/// registered: to register it again (the recorder as a trait object, so
/// that the keys need not name its type).
pub(super) trait Registrar: Send + Sync {
    fn register_counter(&self, key: &Key, meta: &Metadata<'_>) -> ::metrics::Counter;
    fn register_histogram(&self, key: &Key, meta: &Metadata<'_>) -> ::metrics::Histogram;
}

impl<R: Recorder + Send + Sync> Registrar for R {
    fn register_counter(&self, key: &Key, meta: &Metadata<'_>) -> ::metrics::Counter {
        Recorder::register_counter(self, key, meta)
    }
    fn register_histogram(&self, key: &Key, meta: &Metadata<'_>) -> ::metrics::Histogram {
        Recorder::register_histogram(self, key, meta)
    }
}

/// The folds hand their records to the inner recorder's histogram, and
/// after a quiet pass register the key there again first.
impl Registered<::metrics::Histogram> {
    pub(super) fn renew(&mut self) {
        if let Some(inner) = self.inner.upgrade() {
            self.handle = self
                .meta
                .with(|meta| inner.register_histogram(&self.key, meta));
        }
    }
}

/// A key's handle from the recorder underneath, with what it takes to ask
/// for it again.
pub(super) struct Registered<H> {
    pub(super) handle: H,
    key: Key,
    meta: Meta,
    /// Weak: the recorder underneath is the `ShardedRecorder`'s, and goes
    /// with it (keys live on in threads' caches and kept handles).
    inner: Weak<dyn Registrar>,
}

impl<H> Registered<H> {
    pub(super) fn new(
        handle: H,
        key: &Key,
        meta: &Metadata<'_>,
        inner: &Weak<dyn Registrar>,
    ) -> Self {
        Registered {
            handle,
            key: key.clone(),
            meta: Meta::of(meta),
            inner: Weak::clone(inner),
        }
    }
}

/// A key's metadata, owned (a registration lends it for the call only).
struct Meta {
    target: String,
    level: Level,
    module_path: Option<String>,
}

impl Meta {
    fn of(meta: &Metadata<'_>) -> Self {
        Meta {
            target: meta.target().to_owned(),
            level: *meta.level(),
            module_path: meta.module_path().map(str::to_owned),
        }
    }

    fn with<T>(&self, f: impl FnOnce(&Metadata<'_>) -> T) -> T {
        f(&Metadata::new(
            &self.target,
            self.level,
            self.module_path.as_deref(),
        ))
    }
}

/// A recorder's keys and the passes over them: what a recorder, its
/// background thread and its flush handles share.
pub(super) struct KeyTable {
    pub(super) entries: Mutex<KeyMap<Arc<CounterEntry>>>,
    /// Entries taken out of `entries`, folded until freed (`evict.rs`).
    pub(super) evicted: Evicted<Registered<::metrics::Counter>>,
    /// The recorder underneath, to register keys with (`Registered`).
    pub(super) inner: Weak<dyn Registrar>,
    /// [`ShardedLayer::evict_idle_after`](super::ShardedLayer::evict_idle_after).
    evict_idle: Option<Duration>,
    /// How long no pass may see two rows of a key's counter change before
    /// the pass merges it (`MERGE_AFTER` intervals).
    merge_idle: Duration,
    pub(super) histograms: histogram::Folds,
}

/// Passes without contention on a key's counter (two of its rows
/// changing) before a pass merges it back to one word.
const MERGE_AFTER: u32 = 10;

impl KeyTable {
    /// An empty table for a recorder whose background thread passes every
    /// `interval`, evicting keys idle for `evict_idle` if set.
    pub(super) fn new(
        interval: Duration,
        evict_idle: Option<Duration>,
        inner: Weak<dyn Registrar>,
    ) -> Self {
        KeyTable {
            inner,
            entries: Mutex::new(KeyMap::default()),
            evicted: Evicted::new(),
            evict_idle,
            merge_idle: interval * MERGE_AFTER,
            histograms: histogram::Folds::default(),
        }
    }

    /// How many counter keys the map holds.
    pub(super) fn keys(&self) -> usize {
        lock(&self.entries).len()
    }

    /// Folds every key, evicted ones included. Copies the list first, so
    /// registration never waits for a pass. A key whose fold panics (the
    /// recorder underneath did) delays no other: every fold runs, then the
    /// first panic goes on.
    pub(super) fn flush(&self) {
        let mut panics = FirstPanic::default();
        self.fold_keys(None, &mut panics);
        self.evicted.fold(&mut panics);
        self.histograms.flush(&mut panics);
        panics.finish();
    }

    /// The background thread's pass at `now`: a flush, which also notes
    /// which keys moved, then the eviction of keys idle for long enough.
    pub(super) fn pass(&self, now: Instant) {
        let mut panics = FirstPanic::default();
        self.fold_keys(Some(now), &mut panics);
        if let Some(idle) = self.evict_idle {
            self.evicted.take_out(&self.entries, now, idle);
        }
        self.evicted.fold(&mut panics);
        self.histograms
            .pass(now, self.evict_idle, self.merge_idle, &mut panics);
        panics.finish();
    }

    /// Folds every key in `entries`; with `now`, a key whose folds moved a
    /// delta since the last pass is active at `now`.
    fn fold_keys(&self, now: Option<Instant>, panics: &mut FirstPanic) {
        let entries: Vec<Arc<CounterEntry>> = lock(&self.entries).values().cloned().collect();
        let mut quiet = Vec::new();
        for e in &entries {
            panics.run(|| {
                let mut folded = e.fold();
                let Some(now) = now else {
                    return;
                };
                if std::mem::take(&mut folded.moved) {
                    folded.active_at = now;
                } else {
                    folded.quiet_passes = folded.quiet_passes.saturating_add(1);
                }
                if let Backing::Exact(c) = e.backing() {
                    if folded
                        .quiet
                        .look(|out| c.row_totals(out), now, self.merge_idle)
                    {
                        quiet.push(c);
                    }
                }
            });
        }
        if !quiet.is_empty() {
            Counter::merge_batch(quiet);
        }
    }
}
