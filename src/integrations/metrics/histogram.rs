//! [`HistogramReplay`]: a shardcount histogram into the current recorder.
//!
//! `histogram!` under the [`ShardedLayer`](super::ShardedLayer): each key
//! records into a sharded [`Histogram`](crate::Histogram), taken and
//! folded into the inner recorder's histogram on the layer's interval.
//!
//! Protocol (maintainers' notes): `Folds::entries` maps keys to entries,
//! inserted at registration. A fold holds the entry's `fold` lock from the
//! take to the last inner record, so a flush that returns has waited for a
//! fold in progress (as the counters' folds). The take is the histogram's
//! lossless one; what a fold took and could not hand on (the inner
//! recorder panicked) is recorded again before the panic goes on. A value
//! passed straight through by the thread that is folding the same entry
//! (the inner recorder recording into its own key) cannot take the fold
//! lock: it waits in `deferred`, which the same fold hands on after the
//! call returns. From inside another entry's fold it only tries the lock
//! (`entry::fold_lock`), and waits there too when the lock is taken.
//!
//! Eviction (`ShardedLayer::evict_idle_after`) is all under locks and
//! reference counts, no atomics of ours: a histogram handle is a plain
//! `Arc<Entry>`, handed out only by `handle` under the map's lock (or
//! cloned from another handle), never cached by the layer. A pass removes
//! an entry under the map's lock when its folds moved nothing for the idle
//! time and the map holds its only reference (`strong_count == 1`, read
//! under that lock: no handle exists, and none can be made from the map
//! before the removal). The removed entry goes to `evicted`, where every
//! flush folds it until the list holds it alone (`evict::fold_listed`: at
//! once, unless the count read was stale); that fold then happens-after every drop of a
//! handle, so it takes every record.

use super::entry::{hand_on, Handing, DEFERRED_ROUNDS};
use super::key::KeyMap;
use super::table::{Registered, Registrar};
use crate::contract::CountRef;
use crate::contract::DistributionFamily;
use crate::histogram::HistogramUnit;
use crate::histogram::{replay_since, Replayed};
use crate::merger::Quiet;
use crate::primitive::sync::{lock, try_lock, Arc, Mutex, MutexGuard};
use crate::unwind::FirstPanic;
use ::metrics::{HistogramFn, Key, Metadata, Recorder};
use std::cell::Cell;
use std::fmt;
use std::time::{Duration, Instant};

/// Values are kept in units of 10<sup>-9</sup> of the recorded unit.
const SCALE: f64 = 1e9;
/// The largest value kept sharded: `u64::MAX` units, about 1.8 × 10^10.
const MAX_SHARDED: f64 = u64::MAX as f64 / SCALE;

/// One key: the sharded histogram and (under `fold`) the inner
/// recorder's.
struct Entry {
    histogram: crate::Histogram,
    fold: Mutex<Activity>,
    /// Values passed straight through while this entry's fold ran on the
    /// recording thread (the recorder underneath recording into the key
    /// it is being handed): the fold lock is that thread's own, so they
    /// wait here for the next fold.
    deferred: Mutex<Vec<f64>>,
}

/// The inner recorder's histogram, and when an entry last moved records
/// (the counters' `Folded` fields of the same names).
struct Activity {
    inner: Registered<::metrics::Histogram>,
    /// Background passes since a fold last took records: from 1, the next
    /// records renew `inner` first (as a counter's, `entry.rs`).
    quiet_passes: u32,
    /// A fold took records since the last background pass looked.
    moved: bool,
    /// The last pass that saw records moved, or the entry's creation.
    active_at: Instant,
    /// When contention left the key's histogram (as a `Merger` tells).
    quiet: Quiet,
}

impl Handing for Activity {
    type Inner = Registered<::metrics::Histogram>;
    fn parts(&mut self) -> (&mut Self::Inner, &mut u32) {
        (&mut self.inner, &mut self.quiet_passes)
    }
    fn renew(inner: &mut Self::Inner) {
        inner.renew();
    }
}

impl Entry {
    /// Takes what was recorded and hands each bucket to the inner
    /// histogram as its representative value, `count` times; returns with
    /// the fold lock held.
    fn fold(&self) -> MutexGuard<'_, Activity> {
        let mut held = lock(&self.fold);
        let taken = self.histogram.take();
        let deferred = std::mem::take(&mut *lock(&self.deferred));
        if taken.count() == 0 && deferred.is_empty() {
            return held;
        }
        held.moved = true;
        // Handed on so far: deferred values, whole buckets, then records
        // of the next bucket.
        let (passed, buckets, records) = (Cell::new(0), Cell::new(0), Cell::new(0));
        let hand = |inner: &mut Registered<::metrics::Histogram>| {
            for &v in &deferred {
                inner.handle.record(v);
                passed.set(passed.get() + 1);
            }
            for (value, count) in taken.representatives() {
                // A bucket count above usize::MAX (never on 64-bit) in steps.
                while records.get() < count {
                    let n = usize::try_from(count - records.get()).unwrap_or(usize::MAX);
                    inner.handle.record_many(value as f64 / SCALE, n);
                    records.set(records.get() + n as u64);
                }
                buckets.set(buckets.get() + 1);
                records.set(0);
            }
        };
        // A panic puts back what was not handed (the call that panicked
        // counted as not handed): the next fold renews and hands it on.
        let undo = || {
            lock(&self.deferred).extend_from_slice(&deferred[passed.get()..]);
            for (value, count) in taken.representatives().skip(buckets.get()) {
                self.histogram.record_n(value, count - records.take());
            }
        };
        hand_on(std::ptr::from_ref(self).cast(), &mut *held, hand, undo);
        // Values the calls above passed through into this key (deferred:
        // this thread holds the lock) are handed on now, in this fold.
        for _ in 0..DEFERRED_ROUNDS {
            let values = std::mem::take(&mut *lock(&self.deferred));
            if values.is_empty() {
                break;
            }
            let passed = Cell::new(0);
            hand_on(
                std::ptr::from_ref(self).cast(),
                &mut *held,
                |i| {
                    for &v in &values {
                        i.handle.record(v);
                        passed.set(passed.get() + 1);
                    }
                },
                || lock(&self.deferred).extend_from_slice(&values[passed.get()..]),
            );
        }
        held
    }
}

impl HistogramFn for Entry {
    #[inline]
    fn record(&self, value: f64) {
        if (0.0..MAX_SHARDED).contains(&value) {
            self.histogram.record((value * SCALE).round() as u64);
        } else if let Some(mut held) =
            super::entry::fold_lock(std::ptr::from_ref(self).cast(), &self.fold)
        {
            // Negative, NaN or huge: passed on as it is, exactly (under the
            // fold lock, which holds the inner histogram), as a fold's
            // records: after a quiet pass, registered again first.
            // A panic reaches the caller; the value cannot go back (it fits
            // no bucket), but the renewal stays due.
            hand_on(
                std::ptr::from_ref(self).cast(),
                &mut *held,
                |i| i.handle.record(value),
                || {},
            );
            held.moved = true;
        } else {
            // From inside a fold (the recorder underneath recording into a
            // key): of this key, whose lock is this thread's, or of another
            // while this one's is taken. This key's fold hands it on.
            lock(&self.deferred).push(value);
        }
    }
}

/// Every histogram key the layer holds.
#[derive(Default)]
pub(super) struct Folds {
    entries: Mutex<KeyMap<Arc<Entry>>>,
    /// Entries taken out of `entries`, folded until freed (notes above).
    evicted: Mutex<Vec<Arc<Entry>>>,
}

impl Folds {
    /// The handle for `key`, registering it with the inner recorder on
    /// first use. Takes the map's lock: keep the handle for a hot path.
    pub(super) fn handle<R: Recorder>(
        &self,
        inner: &R,
        registrar: &std::sync::Weak<dyn Registrar>,
        key: &Key,
        metadata: &Metadata<'_>,
    ) -> ::metrics::Histogram {
        if let Some(e) = lock(&self.entries).get(key) {
            return ::metrics::Histogram::from_arc(Arc::clone(e));
        }
        // Registered without our lock held, as for counters; a racing
        // registration of the same key wins.
        let inner = inner.register_histogram(key, metadata);
        let inner = Registered::new(inner, key, metadata, registrar);
        let mut entries = lock(&self.entries);
        let e = entries.entry(key.clone()).or_insert_with(|| {
            Arc::new(Entry {
                deferred: Mutex::new(Vec::new()),
                histogram: crate::Histogram::new(),
                fold: Mutex::new(Activity {
                    inner,
                    quiet_passes: 0,
                    moved: false,
                    active_at: Instant::now(),
                    quiet: Quiet::new(Instant::now()),
                }),
            })
        });
        ::metrics::Histogram::from_arc(Arc::clone(e))
    }

    /// Folds every key, evicted ones included; a panic is kept in
    /// `panics` and the other keys are folded all the same.
    pub(super) fn flush(&self, panics: &mut FirstPanic) {
        self.fold_keys(None, panics);
        self.fold_evicted(panics);
    }

    /// The background pass at `now`: a flush that notes which keys moved
    /// and merges those whose rows stayed quiet for `merge_idle`, and with
    /// `idle`, the eviction of keys idle that long.
    pub(super) fn pass(
        &self,
        now: Instant,
        idle: Option<Duration>,
        merge_idle: Duration,
        panics: &mut FirstPanic,
    ) {
        self.fold_keys(Some((now, merge_idle)), panics);
        if let Some(idle) = idle {
            // Held over the map's lock: a flush finds every entry in one.
            let mut list = lock(&self.evicted);
            lock(&self.entries).retain(|_, e| {
                // Only the map holds it: no handle, and none can be made
                // while we hold the map's lock.
                if Arc::strong_count(e) != 1 {
                    return true;
                }
                let Some(held) = try_lock(&e.fold) else {
                    return true;
                };
                if held.moved || now.saturating_duration_since(held.active_at) < idle {
                    return true;
                }
                drop(held);
                list.push(Arc::clone(e));
                false
            });
        }
        self.fold_evicted(panics);
    }

    /// Folds every key in `entries`; with a pass's `now`, a key whose
    /// folds took records since the last pass is active at `now`, and the
    /// keys whose histograms stayed quiet for the merge idle time are
    /// merged, in one batch.
    fn fold_keys(&self, pass: Option<(Instant, Duration)>, panics: &mut FirstPanic) {
        let entries: Vec<Arc<Entry>> = lock(&self.entries).values().cloned().collect();
        let mut quiet = Vec::new();
        for e in &entries {
            panics.run(|| {
                let mut held = e.fold();
                let Some((now, merge_idle)) = pass else {
                    return;
                };
                if std::mem::take(&mut held.moved) {
                    held.active_at = now;
                } else {
                    held.quiet_passes = held.quiet_passes.saturating_add(1);
                }
                let rows = e.histogram.rows();
                if held.quiet.look(|out| rows.row_totals(out), now, merge_idle) {
                    quiet.push(&e.histogram);
                }
            });
        }
        if !quiet.is_empty() {
            crate::histogram::Histogram::merge_batch(quiet);
        }
    }

    /// Folds every evicted entry and frees those nothing else holds
    /// (`evict::fold_listed`).
    fn fold_evicted(&self, panics: &mut FirstPanic) {
        super::evict::fold_listed(&mut lock(&self.evicted), |e| drop(e.fold()), panics);
    }

    /// How many shard rows the keys' histograms hold in all.
    pub(super) fn shards(&self) -> usize {
        let entries: Vec<Arc<Entry>> = lock(&self.entries).values().cloned().collect();
        entries.iter().map(|e| e.histogram.shards()).sum()
    }

    /// How many keys the map holds: for the tests.
    #[cfg(test)]
    pub(super) fn keys(&self) -> usize {
        lock(&self.entries).len()
    }

    /// How many evicted entries are still held: for the tests.
    #[cfg(test)]
    pub(super) fn evicted(&self) -> usize {
        lock(&self.evicted).len()
    }
}

/// A histogram or a labelled family of them
/// ([`DistributionFamily`]), held
/// through a shared pointer, replayed into the current recorder's
/// histogram `name` on each [`replay`](Self::replay): one `record` per
/// value recorded since the last replay, each inside the bucket it was
/// counted in, all adding up to the recorded sum, with one `metrics`
/// label per label name of the family. Values are in the family's unit
/// (seconds for [`HistogramUnit::Seconds`]).
///
/// The `metrics` facade takes one value at a time, so this is exact where
/// a fold of bucket midpoints (the [`ShardedLayer`](super::ShardedLayer)'s)
/// is within 1/32: the count always; the sum (up to `f64` addition)
/// whenever no read caught a record halfway, and otherwise as soon as the
/// records replayed after it leave room in their buckets for the
/// difference, which is carried, never dropped; and the bucket counts when the exporter's buckets are the family's
/// [`le_set`](Self::le_set) (`PrometheusBuilder::set_buckets`). It costs
/// one `record` per value at replay time. Replay into the recorder that
/// renders: under a `ShardedLayer`, its [`inner`](super::ShardedRecorder::inner)
/// one (the layer's own histograms would fold the values to midpoints).
///
/// ```
/// use metrics_exporter_prometheus::PrometheusBuilder;
/// use shardcount::integrations::metrics::HistogramReplay;
/// use shardcount::{Label, LabelledHistogram};
/// use std::time::Duration;
///
/// #[derive(Clone, Copy, Label)]
/// enum Route { Home, Checkout }
/// static LATENCY: LabelledHistogram<Route> = LabelledHistogram::for_durations();
///
/// let replay = HistogramReplay::new("latency_seconds", &LATENCY);
/// let recorder = PrometheusBuilder::new()
///     .set_buckets(&replay.le_set())
///     .unwrap()
///     .build_recorder();
/// LATENCY.record_duration(Route::Checkout, Duration::from_millis(3));
/// metrics::with_local_recorder(&recorder, || assert_eq!(replay.replay(), 1));
/// let text = recorder.handle().render();
/// assert!(text.contains("latency_seconds_sum{route=\"checkout\"} 0.003\n"), "{text}");
/// ```
pub struct HistogramReplay<P> {
    name: &'static str,
    family: P,
    /// Each member's labels and its read at the last replay.
    members: Mutex<Vec<(Vec<::metrics::Label>, Replayed)>>,
}

impl<P> HistogramReplay<P>
where
    P: CountRef,
    P::Target: DistributionFamily,
{
    /// A replay of `family` as the histogram `name`. Records made before
    /// this call are replayed by the first [`replay`](Self::replay).
    ///
    /// ```
    /// use shardcount::integrations::metrics::HistogramReplay;
    /// let h = std::sync::Arc::new(shardcount::Histogram::new());
    /// let r = HistogramReplay::new("sizes_bytes", h.clone());
    /// h.record(4);
    /// assert_eq!(r.replay(), 1); // into the no-op recorder: none installed
    /// ```
    pub fn new(name: &'static str, family: P) -> Self {
        let mut members = Vec::new();
        family.read_each_distribution(|texts, _| {
            let labels = P::Target::LABEL_NAMES
                .iter()
                .zip(texts)
                .map(|(n, t)| ::metrics::Label::new(*n, (*t).to_string()))
                .collect();
            members.push((labels, Replayed::default()));
        });
        HistogramReplay {
            name,
            family,
            members: Mutex::new(members),
        }
    }

    /// The family's exported `le` bounds, `+Inf` left out, in its unit:
    /// the buckets to give the exporter. Every bucket count is then exact
    /// for user bounds and [`DEFAULT_LE`](crate::DEFAULT_LE); at the
    /// round [`DEFAULT_DURATION_LE`](crate::DEFAULT_DURATION_LE) bounds of
    /// a duration histogram, a replayed record from the internal bucket
    /// that holds a bound may count on either side of it.
    ///
    /// ```
    /// use shardcount::integrations::metrics::HistogramReplay;
    /// let h = std::sync::Arc::new(shardcount::Histogram::with_bounds(&[10, 100]));
    /// assert_eq!(HistogramReplay::new("x", h).le_set(), [10.0, 100.0]);
    /// ```
    #[must_use]
    pub fn le_set(&self) -> Vec<f64> {
        let mut les = None;
        self.family.read_each_distribution(|_, s| {
            les.get_or_insert_with(|| s.export_buckets().filter_map(|(le, _)| le).collect());
        });
        les.unwrap_or_default()
    }

    /// Records into the current recorder (`metrics::with_recorder`) every
    /// value recorded since the last replay; returns how many. Replays are
    /// serialised. As [`opentelemetry::HistogramReplay::replay`](crate::integrations::opentelemetry::HistogramReplay::replay)
    /// for a record caught halfway, and for takes and resets (do not take
    /// or reset a histogram you replay).
    pub fn replay(&self) -> u64 {
        static META: Metadata<'static> =
            Metadata::new(module_path!(), ::metrics::Level::INFO, Some(module_path!()));
        let mut members = lock(&self.members);
        let mut i = 0;
        let mut replayed = 0;
        ::metrics::with_recorder(|recorder| {
            self.family.read_each_distribution(|_, now| {
                let Some((labels, kept)) = members.get_mut(i) else {
                    return;
                };
                i += 1;
                let unit = now.unit();
                let key = Key::from_parts(self.name, labels.clone());
                let h = recorder.register_histogram(&key, &META);
                replayed += replay_since(kept, now, |v| match unit {
                    HistogramUnit::Seconds => h.record(v as f64 / 1e9),
                    _ => h.record(v as f64),
                });
            });
        });
        replayed
    }
}

impl<P: CountRef> fmt::Debug for HistogramReplay<P>
where
    P::Target: fmt::Debug,
{
    /// The name and the family's `Debug`.
    ///
    /// ```
    /// use shardcount::integrations::metrics::HistogramReplay;
    /// let r = HistogramReplay::new("x", std::sync::Arc::new(shardcount::Histogram::new()));
    /// assert!(format!("{r:?}").starts_with("HistogramReplay { name: \"x\""));
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HistogramReplay")
            .field("name", &self.name)
            .field("family", &&*self.family)
            .finish_non_exhaustive()
    }
}
