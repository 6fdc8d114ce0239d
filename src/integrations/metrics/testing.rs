//! Test helpers shared by the layer's files: an inner recorder that
//! tallies, a recorder over it that evicts, passes that make every key
//! idle, and counts of what the layer still holds.

use super::recorder::ShardedRecorder;
use super::ShardedLayer;
use crate::primitive::sync::lock;
use ::metrics::{Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A tally inner recorder: every key's counter is one shared word.
#[derive(Default)]
pub(super) struct Tally(pub(super) Arc<AtomicU64>);

impl Recorder for Tally {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, _: &Key, _: &Metadata<'_>) -> ::metrics::Counter {
        ::metrics::Counter::from_arc(Arc::clone(&self.0))
    }
    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }
    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

/// A recorder over a [`Tally`] that evicts keys idle for a minute and
/// folds on its own only every hour, and the tally's total.
pub(super) fn evicting(rough: bool) -> (ShardedRecorder<Tally>, Arc<AtomicU64>) {
    let inner = Tally::default();
    let total = Arc::clone(&inner.0);
    let layer = ShardedLayer::new()
        .with_interval(Duration::from_secs(3600))
        .evict_idle_after(Duration::from_secs(60));
    let r = if rough { layer.rough() } else { layer }.wrap(inner);
    (r, total)
}

/// A pass now (which marks the keys that moved since the last one
/// active now), then one at a time far enough ahead that every key is
/// idle.
pub(super) fn pass_idle<R>(r: &ShardedRecorder<R>) {
    let now = Instant::now();
    r.shared.pass(now);
    r.shared.pass(now + Duration::from_secs(3600));
}

/// How many evicted counter entries the recorder still holds.
pub(super) fn evicted<R>(r: &ShardedRecorder<R>) -> usize {
    r.shared.evicted.len()
}

/// How many owned handles the map's entries list.
pub(super) fn owned_handles<R>(r: &ShardedRecorder<R>) -> usize {
    lock(&r.shared.entries).values().map(|e| e.handles()).sum()
}
