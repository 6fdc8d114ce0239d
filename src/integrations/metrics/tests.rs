//! Tests that drive a whole recorder (a [`ShardedRecorder`] over an inner
//! recorder that tallies), one submodule per concept they check. They live
//! here, at the top of the folder, so that no file of it imports from one
//! above it (issue 48); tests that need only their own file's items stay
//! beside its code (`absolute.rs`, `key.rs`).
//!
//! The helpers first: an inner recorder that tallies, a recorder over it
//! that evicts, passes that make every key idle, and counts of what the
//! layer still holds.

use super::{ShardedLayer, ShardedRecorder};
use crate::primitive::sync::lock;
use ::metrics::Histogram;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `impl Recorder for $t` whose descriptions and gauges do nothing: each
/// counter and histogram is what its expression makes, with `$this` the
/// recorder and `$key` the key.
macro_rules! recorder {
    ($t:ty, |$this:ident, $key:ident| counter: $c:expr, histogram: $h:expr $(,)?) => {
        impl ::metrics::Recorder for $t {
            fn describe_counter(
                &self,
                _: ::metrics::KeyName,
                _: Option<::metrics::Unit>,
                _: ::metrics::SharedString,
            ) {
            }
            fn describe_gauge(
                &self,
                _: ::metrics::KeyName,
                _: Option<::metrics::Unit>,
                _: ::metrics::SharedString,
            ) {
            }
            fn describe_histogram(
                &self,
                _: ::metrics::KeyName,
                _: Option<::metrics::Unit>,
                _: ::metrics::SharedString,
            ) {
            }
            #[allow(unused_variables)]
            fn register_counter(
                &self,
                $key: &::metrics::Key,
                _: &::metrics::Metadata<'_>,
            ) -> ::metrics::Counter {
                let $this = self;
                $c
            }
            fn register_gauge(
                &self,
                _: &::metrics::Key,
                _: &::metrics::Metadata<'_>,
            ) -> ::metrics::Gauge {
                ::metrics::Gauge::noop()
            }
            #[allow(unused_variables)]
            fn register_histogram(
                &self,
                $key: &::metrics::Key,
                _: &::metrics::Metadata<'_>,
            ) -> ::metrics::Histogram {
                let $this = self;
                $h
            }
        }
    };
}

/// A tally inner recorder: every key's counter is one shared word.
#[derive(Default)]
struct Tally(Arc<AtomicU64>);

recorder!(Tally, |this, key|
    counter: ::metrics::Counter::from_arc(Arc::clone(&this.0)),
    histogram: Histogram::noop(),
);

/// A recorder over a [`Tally`] that folds on its own only every hour
/// and evicts nothing, and the tally's total.
fn tallied() -> (ShardedRecorder<Tally>, Arc<AtomicU64>) {
    let inner = Tally::default();
    let total = Arc::clone(&inner.0);
    (
        ShardedLayer::new()
            .with_interval(Duration::from_secs(3600))
            .wrap(inner),
        total,
    )
}

/// A recorder over a [`Tally`] that evicts keys idle for a minute and
/// folds on its own only every hour, and the tally's total.
fn evicting(rough: bool) -> (ShardedRecorder<Tally>, Arc<AtomicU64>) {
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
fn pass_idle<R>(r: &ShardedRecorder<R>) {
    let now = Instant::now();
    r.shared.pass(now);
    r.shared.pass(now + Duration::from_secs(3600));
}

/// How many evicted counter entries the recorder still holds.
fn evicted<R>(r: &ShardedRecorder<R>) -> usize {
    r.shared.evicted.len()
}

/// How many owned handles the map's entries list.
fn owned_handles<R>(r: &ShardedRecorder<R>) -> usize {
    lock(&r.shared.entries).values().map(|e| e.handles()).sum()
}

/// Through the recorder: owned handles' words and their folds (`entry.rs`).
mod entry {
    use crate::primitive::sync::atomic::Ordering;
    use crate::primitive::sync::lock;
    use ::metrics::{Key, Metadata, Recorder};

    /// The owner counts in its handle's own word (no locked add), and a fold
    /// moves that word's growth, once.
    #[test]
    fn the_owner_counts_in_its_own_word_and_folds_move_it_once() {
        let (r, total) = super::tallied();
        let meta = Metadata::new("t", ::metrics::Level::INFO, None);
        let key = Key::from_name("own");
        let h = r.register_counter(&key, &meta);
        h.increment(5);
        let word = {
            let entries = lock(&r.shared.entries);
            let e = entries.get(&key).expect("registered");
            let folded = lock(&e.fold);
            folded.locals[0].0 .0.own.load(Ordering::Relaxed)
        };
        assert_eq!(word, 5, "the owner's increment is in its own word");
        r.flush();
        r.flush();
        assert_eq!(total.load(std::sync::atomic::Ordering::Relaxed), 5);
        h.increment(2);
        r.flush();
        assert_eq!(total.load(std::sync::atomic::Ordering::Relaxed), 7);
    }
}

/// Through the recorder: idle-key eviction (`evict.rs`).
mod evict {
    use super::super::evict::IGNORE_HANDLES;
    use super::super::ShardedLayer;
    use super::{evicted, evicting, owned_handles, pass_idle, Tally};
    use std::sync::atomic::Ordering::Relaxed;
    use std::time::{Duration, Instant};

    /// An idle key is taken out by a pass; the thread's next `counter!`
    /// sweeps its cache, which retires its handle, and registers the key
    /// again; the old entry is folded once more and freed. Every count
    /// reaches the inner counter once.
    #[test]
    fn an_idle_key_is_evicted_folded_and_registered_again() {
        for rough in [false, true] {
            let (r, total) = evicting(rough);
            ::metrics::with_local_recorder(&r, || ::metrics::counter!("idle").increment(5));
            r.shared.pass(Instant::now());
            assert_eq!(r.keys(), 1, "evicted before its idle time");
            assert_eq!(total.load(Relaxed), 5);
            pass_idle(&r);
            assert_eq!(r.keys(), 0, "an idle key is evicted");
            assert_eq!(evicted(&r), 1, "held by this thread's cache");
            ::metrics::with_local_recorder(&r, || ::metrics::counter!("idle").increment(7));
            assert_eq!(r.keys(), 1, "registered again");
            r.flush();
            assert_eq!(evicted(&r), 0, "the swept handle let go of the old entry");
            assert_eq!(total.load(Relaxed), 12);
            assert_eq!(owned_handles(&r), 1);
        }
    }

    /// A handle kept outside the layer keeps its key in: it stays on its
    /// fast path. Dropped, the key goes at the next idle pass.
    #[test]
    fn a_kept_handle_keeps_its_key() {
        let (r, total) = evicting(false);
        let kept = ::metrics::with_local_recorder(&r, || ::metrics::counter!("kept"));
        kept.increment(1);
        pass_idle(&r);
        assert_eq!(r.keys(), 1, "evicted while a handle is kept");
        kept.increment(2);
        drop(kept);
        pass_idle(&r);
        assert_eq!(r.keys(), 0);
        r.flush();
        assert_eq!(total.load(Relaxed), 3);
    }

    /// A pass that evicts a key while a handle for it is kept (as one
    /// racing a `counter!` call can): increments through the handle, by
    /// its owner before and after its cache's sweep and by another thread,
    /// all reach the inner counter once; the evicted entry is freed when
    /// the handle goes.
    #[test]
    fn a_kept_handle_of_an_evicted_key_counts_exactly() {
        let (r, total) = evicting(false);
        let kept = ::metrics::with_local_recorder(&r, || ::metrics::counter!("kept"));
        kept.increment(1);
        IGNORE_HANDLES.with(|c| c.set(true));
        pass_idle(&r);
        IGNORE_HANDLES.with(|c| c.set(false));
        assert_eq!((r.keys(), evicted(&r)), (0, 1));
        kept.increment(2); // the owner's word, not swept yet
        r.flush();
        assert_eq!(total.load(Relaxed), 3);
        std::thread::scope(|s| {
            let sent = kept.clone();
            s.spawn(move || sent.increment(4)); // through the entry's counter
        });
        // The owner's next `counter!` sweeps: its handle is retired, the
        // key registered again.
        ::metrics::with_local_recorder(&r, || ::metrics::counter!("kept").increment(8));
        kept.increment(16); // retired: through the old entry's counter
        r.flush();
        assert_eq!(total.load(Relaxed), 31);
        assert_eq!(evicted(&r), 1, "freed while a handle is kept");
        drop(kept);
        r.flush();
        assert_eq!(evicted(&r), 0, "kept after its last handle went");
        assert_eq!(total.load(Relaxed), 31);
    }

    /// Passes that evict the key whenever they can (every key is idle to
    /// them, kept handles ignored) race two threads counting through
    /// `counter!` in bursts and pauses: the inner total ends exact.
    #[test]
    fn evictions_racing_counter_calls_lose_nothing() {
        const ROUNDS: u64 = 200;
        const BURST: u64 = 100;
        for rough in [false, true] {
            let inner = Tally::default();
            let total = std::sync::Arc::clone(&inner.0);
            let layer = ShardedLayer::new()
                .with_interval(Duration::from_secs(3600))
                .evict_idle_after(Duration::ZERO);
            let r = if rough { layer.rough() } else { layer }.wrap(inner);
            let done = std::sync::atomic::AtomicUsize::new(0);
            let passes = std::thread::scope(|s| {
                for t in 0..2u64 {
                    let (r, done) = (&r, &done);
                    s.spawn(move || {
                        ::metrics::with_local_recorder(r, || {
                            for round in 0..ROUNDS {
                                for _ in 0..BURST {
                                    ::metrics::counter!("raced").increment(1);
                                }
                                if (round + t) % 3 == 0 {
                                    std::thread::yield_now();
                                }
                                if round == ROUNDS / 2 {
                                    // Not done before a pass has evicted.
                                    let deadline = Instant::now() + Duration::from_secs(10);
                                    while r.shared.evicted.passes_hint() == 0 {
                                        assert!(Instant::now() < deadline, "no eviction");
                                        std::thread::yield_now();
                                    }
                                }
                            }
                        });
                        done.fetch_add(1, Relaxed);
                    });
                }
                IGNORE_HANDLES.with(|c| c.set(true));
                let mut passes = 0u64;
                while done.load(Relaxed) < 2 {
                    pass_idle(&r);
                    passes += 1;
                }
                IGNORE_HANDLES.with(|c| c.set(false));
                passes
            });
            // The threads' caches are gone only after their destructors.
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                r.flush();
                if evicted(&r) == 0 || Instant::now() > deadline {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            assert!(passes > 0);
            assert_eq!(total.load(Relaxed), 2 * ROUNDS * BURST, "rough: {rough}");
            assert_eq!(
                evicted(&r),
                0,
                "evicted entries kept after every handle went"
            );
        }
    }
}

/// Through the recorder: each thread's cache of handles (`cache.rs`).
mod cache {
    use super::owned_handles;
    use std::time::Duration;

    /// Threads that come and go leave no owned handle behind once a fold
    /// has taken their last counts: memory follows the live threads.
    #[test]
    fn exited_threads_owned_handles_are_folded_then_dropped() {
        let (r, total) = super::tallied();
        for _ in 0..20 {
            std::thread::scope(|s| {
                for _ in 0..2 {
                    s.spawn(|| {
                        ::metrics::with_local_recorder(&r, || {
                            for _ in 0..100 {
                                ::metrics::counter!("churn", "k" => "v").increment(1);
                            }
                        });
                    });
                }
            });
        }
        // A scope's join can return before the threads' caches are gone;
        // the caches go with the thread-local destructors, just after.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            r.flush();
            if owned_handles(&r) == 0 || std::time::Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(owned_handles(&r), 0, "handles of exited threads kept");
        assert_eq!(total.load(std::sync::atomic::Ordering::Relaxed), 4000);
    }
}

/// Through the recorder: `FlushHandle` (`handle.rs`).
mod handle {
    use std::sync::atomic::Ordering::Relaxed;

    /// A handle taken before the recorder moves flushes it where it went,
    /// and a clone flushes the same recorder.
    #[test]
    fn a_handle_flushes_the_recorder_after_it_moved() {
        let (r, total) = super::tallied();
        let flush = r.flush_handle();
        let moved = Box::new(r);
        ::metrics::with_local_recorder(&*moved, || ::metrics::counter!("moved").increment(4));
        flush.clone().flush();
        assert_eq!(total.load(Relaxed), 4);
        assert_eq!(format!("{flush:?}"), "FlushHandle { keys: 1 }");
    }
}

/// Through the recorder: histogram keys under the layer (`histogram.rs`).
mod histogram {
    use super::super::ShardedLayer;
    use super::pass_idle;
    use ::metrics::Histogram;
    use std::sync::atomic::AtomicU64;
    use std::sync::atomic::Ordering::Relaxed;
    use std::time::{Duration, Instant};

    /// An inner recorder whose histograms count the values recorded.
    #[derive(Default)]
    struct Records(std::sync::Arc<Values>);

    #[derive(Default)]
    struct Values(AtomicU64);

    impl ::metrics::HistogramFn for Values {
        fn record(&self, _: f64) {
            self.0.fetch_add(1, Relaxed);
        }
    }

    recorder!(Records, |this, key|
        counter: ::metrics::Counter::noop(),
        histogram: Histogram::from_arc(std::sync::Arc::clone(&this.0)),
    );

    /// Histogram keys: an idle key with no handle kept is folded and freed
    /// at once; a kept handle keeps its key; one recorded again after its
    /// eviction is registered again. Every record is folded once.
    #[test]
    fn idle_histogram_keys_are_evicted_unless_a_handle_is_kept() {
        let inner = Records::default();
        let records = std::sync::Arc::clone(&inner.0);
        let r = ShardedLayer::new()
            .with_interval(Duration::from_secs(3600))
            .evict_idle_after(Duration::from_secs(60))
            .wrap(inner);
        let kept = ::metrics::with_local_recorder(&r, || {
            ::metrics::histogram!("gone").record(1.0);
            ::metrics::histogram!("gone").record(2.0);
            ::metrics::histogram!("kept")
        });
        kept.record(3.0);
        r.shared.pass(Instant::now());
        assert_eq!(
            r.shared.histograms.keys(),
            2,
            "evicted before its idle time"
        );
        pass_idle(&r);
        assert_eq!(r.shared.histograms.keys(), 1, "only the kept key stays");
        assert_eq!(r.shared.histograms.evicted(), 0, "freed at once");
        assert_eq!(records.0.load(Relaxed), 3);
        ::metrics::with_local_recorder(&r, || ::metrics::histogram!("gone").record(4.0));
        kept.record(5.0);
        r.flush();
        assert_eq!(r.shared.histograms.keys(), 2);
        assert_eq!(records.0.load(Relaxed), 5);
    }
}

/// Through the recorder: the layer's settings (`layer.rs`).
mod layer {
    use super::super::ShardedLayer;
    use super::Tally;
    use metrics_util::layers::Layer;
    use std::time::Duration;

    /// Each setter keeps the others, and the recorder built carries them.
    #[test]
    fn settings_compose_and_reach_the_recorder() {
        let idle = Duration::from_secs(60);
        let layer = ShardedLayer::new()
            .evict_idle_after(idle)
            .rough()
            .with_interval(Duration::from_secs(3600));
        assert!(layer.is_rough());
        assert_eq!(layer.idle_eviction(), Some(idle));
        let r = layer.layer(Tally::default());
        assert_eq!(r.interval(), Duration::from_secs(3600));
        assert_eq!(r.idle_eviction(), Some(idle));
    }
}

/// Through the recorder: `publish` under the layer (`publish.rs`).
mod publish {
    use super::super::publish::publish;
    use crate::Counter;
    use std::sync::atomic::Ordering::Relaxed;

    /// Under the layer, a published count reaches the inner counter as its
    /// `absolute`, after the key's increments are folded: the inner counter
    /// (a word whose `absolute` is a `fetch_max`) ends at the larger.
    #[test]
    fn a_published_count_reaches_the_inner_counter_through_absolute() {
        let (r, total) = super::tallied();
        let c = Counter::new();
        c.add(9);
        ::metrics::with_local_recorder(&r, || {
            ::metrics::counter!("published").increment(2);
            publish("published", &c);
        });
        assert_eq!(total.load(Relaxed), 9);
        c.add(1);
        ::metrics::with_local_recorder(&r, || publish("published", &c));
        assert_eq!(total.load(Relaxed), 10);
    }
}

/// Through the recorder: registration in `ShardedRecorder` (`recorder.rs`).
mod recorder {
    use super::owned_handles;
    use ::metrics::{Key, Metadata, Recorder};
    use std::sync::atomic::Ordering::Relaxed;

    /// Each thread that registers a key gets a handle of its own, listed
    /// in the key's one entry; a flush folds them all.
    #[test]
    fn each_thread_registers_a_handle_of_its_own_in_one_entry() {
        let (r, total) = super::tallied();
        let meta = Metadata::new("t", ::metrics::Level::INFO, None);
        let key = Key::from_name("shared");
        let both = std::sync::Barrier::new(2);
        let here = r.register_counter(&key, &meta);
        std::thread::scope(|s| {
            s.spawn(|| {
                let there = r.register_counter(&key, &meta);
                there.increment(3);
                both.wait(); // registered and counted
                both.wait(); // counted here; its cache lives until now
            });
            here.increment(4);
            both.wait();
            assert_eq!((r.keys(), owned_handles(&r)), (1, 2));
            both.wait();
        });
        r.flush();
        assert_eq!(total.load(Relaxed), 7);
    }
}

/// Through the recorder: a recorder underneath that panics in a fold
/// (`entry.rs`, `evict.rs`, `histogram.rs`) loses nothing.
mod panics {
    use super::super::evict::IGNORE_HANDLES;
    use super::super::ShardedLayer;
    use super::pass_idle;
    use ::metrics::{Histogram, Key, Metadata, Recorder};
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use std::sync::atomic::AtomicU64;
    use std::sync::atomic::Ordering::Relaxed;
    use std::sync::Arc;
    use std::time::Duration;

    /// Makes the `n`th call from now panic, once (0: none).
    #[derive(Default)]
    struct Trip(AtomicU64);

    impl Trip {
        fn arm(&self, n: u64) {
            self.0.store(n, Relaxed);
        }

        fn tick(&self) {
            if self.0.fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1)) == Ok(1) {
                panic!("the recorder underneath panics");
            }
        }
    }

    /// What the recorder underneath was handed, and its trips.
    #[derive(Default)]
    struct Handed {
        counts: AtomicU64,
        records: AtomicU64,
        registered: AtomicU64,
        registers: Trip,
        adds: Trip,
    }

    impl ::metrics::CounterFn for Handed {
        fn increment(&self, n: u64) {
            self.adds.tick();
            self.counts.fetch_add(n, Relaxed);
        }
        fn absolute(&self, _: u64) {}
    }

    impl ::metrics::HistogramFn for Handed {
        fn record(&self, _: f64) {
            self.record_many(0.0, 1);
        }
        fn record_many(&self, _: f64, n: usize) {
            self.adds.tick();
            self.records.fetch_add(n as u64, Relaxed);
        }
    }

    #[derive(Default)]
    struct Flaky(Arc<Handed>);

    recorder!(Flaky, |this, key|
        counter: {
            this.0.registers.tick();
            ::metrics::Counter::from_arc(Arc::clone(&this.0))
        },
        histogram: {
            this.0.registers.tick();
            this.0.registered.fetch_add(1, Relaxed);
            Histogram::from_arc(Arc::clone(&this.0))
        },
    );

    fn flush_panics<R>(r: &super::super::ShardedRecorder<R>) {
        let flushed = catch_unwind(AssertUnwindSafe(|| r.flush()));
        assert!(flushed.is_err(), "the trip did not fire");
    }

    /// A fold whose renewal (after a quiet pass) or whose increment panics
    /// hands its delta back: the next flush renews and delivers it, once.
    #[test]
    fn a_delta_the_recorder_underneath_panics_on_is_delivered_later() {
        for rough in [false, true] {
            let inner = Flaky::default();
            let handed = Arc::clone(&inner.0);
            let layer = ShardedLayer::new().with_interval(Duration::from_secs(3600));
            let r = if rough { layer.rough() } else { layer }.wrap(inner);
            let count =
                |n| ::metrics::with_local_recorder(&r, || ::metrics::counter!("k").increment(n));
            count(5);
            r.flush();
            pass_idle(&r); // quiet: the next delta renews first
            count(7);
            handed.registers.arm(1);
            flush_panics(&r);
            assert_eq!(handed.counts.load(Relaxed), 5);
            r.flush();
            assert_eq!(handed.counts.load(Relaxed), 12, "rough: {rough}");
            count(3);
            handed.adds.arm(1);
            flush_panics(&r);
            r.flush();
            assert_eq!(handed.counts.load(Relaxed), 15, "rough: {rough}");
        }
    }

    /// Evicted keys still held by a handle: a fold of one that panics
    /// leaves the others listed, so their counts are delivered later.
    #[test]
    fn a_panicking_fold_of_one_evicted_key_keeps_the_others() {
        let inner = Flaky::default();
        let handed = Arc::clone(&inner.0);
        let r = ShardedLayer::new()
            .with_interval(Duration::from_secs(3600))
            .evict_idle_after(Duration::from_secs(60))
            .wrap(inner);
        let meta = Metadata::new("t", ::metrics::Level::INFO, None);
        let kept: Vec<_> = ["a", "b", "c"]
            .map(|k| r.register_counter(&Key::from_name(k), &meta))
            .into();
        IGNORE_HANDLES.with(|i| i.set(true));
        pass_idle(&r);
        IGNORE_HANDLES.with(|i| i.set(false));
        assert_eq!((r.keys(), super::evicted(&r)), (0, 3));
        for h in &kept {
            h.increment(1);
        }
        handed.adds.arm(1);
        flush_panics(&r);
        assert_eq!(super::evicted(&r), 3, "every evicted key still listed");
        r.flush();
        assert_eq!(handed.counts.load(Relaxed), 3);
        drop(kept);
        // A registration sweeps this thread's cache, the entries' last holder.
        drop(r.register_counter(&Key::from_name("d"), &meta));
        r.flush();
        assert_eq!(super::evicted(&r), 0, "freed once nothing holds them");
    }

    /// A histogram fold whose renewal panics, or whose hand-over panics
    /// after a first bucket went: what was not handed goes back, and is
    /// handed once later.
    #[test]
    fn records_the_recorder_underneath_panics_on_are_delivered_later() {
        let inner = Flaky::default();
        let handed = Arc::clone(&inner.0);
        let r = ShardedLayer::new()
            .with_interval(Duration::from_secs(3600))
            .wrap(inner);
        let record = |v, n| {
            ::metrics::with_local_recorder(&r, || {
                for _ in 0..n {
                    ::metrics::histogram!("h").record(v);
                }
            })
        };
        record(1.0, 2);
        r.flush();
        pass_idle(&r);
        record(1.0, 3);
        handed.registers.arm(1);
        flush_panics(&r);
        assert_eq!(handed.records.load(Relaxed), 2);
        r.flush();
        assert_eq!(handed.records.load(Relaxed), 5);
        record(1.0, 3);
        record(1000.0, 4);
        handed.adds.arm(2); // the second bucket's hand-over
        flush_panics(&r);
        assert_eq!(handed.records.load(Relaxed), 5 + 3);
        r.flush();
        assert_eq!(handed.records.load(Relaxed), 5 + 3 + 4);
    }

    /// A value passed straight through (negative: it fits no bucket) whose
    /// renewal panics reaches the caller as the panic, and leaves the
    /// renewal due: the key's next records go to a renewed handle.
    #[test]
    fn a_passed_value_whose_renewal_panics_leaves_the_renewal_due() {
        let inner = Flaky::default();
        let handed = Arc::clone(&inner.0);
        let r = ShardedLayer::new()
            .with_interval(Duration::from_secs(3600))
            .wrap(inner);
        let record =
            |v| ::metrics::with_local_recorder(&r, || ::metrics::histogram!("p").record(v));
        record(1.0);
        r.flush();
        pass_idle(&r);
        let registered = handed.registered.load(Relaxed);
        handed.registers.arm(1);
        let passed = catch_unwind(AssertUnwindSafe(|| record(-1.0)));
        assert!(passed.is_err(), "the trip did not fire");
        record(2.0);
        r.flush();
        assert_eq!(
            handed.registered.load(Relaxed),
            registered + 1,
            "renewed after the panic"
        );
        assert_eq!(handed.records.load(Relaxed), 2);
    }

    /// An inner recorder whose counter for key `bad` panics at every
    /// increment, and that tallies every other counter and histogram.
    #[derive(Default)]
    struct Refuses(Arc<Handed>);

    /// The handle `Refuses` gives key `bad`.
    struct Refused;

    impl ::metrics::CounterFn for Refused {
        fn increment(&self, _: u64) {
            panic!("the recorder underneath refuses this key");
        }
        fn absolute(&self, _: u64) {}
    }

    recorder!(Refuses, |this, key|
        counter: {
            if key.name() == "bad" {
                ::metrics::Counter::from_arc(Arc::new(Refused))
            } else {
                ::metrics::Counter::from_arc(Arc::clone(&this.0))
            }
        },
        histogram: Histogram::from_arc(Arc::clone(&this.0)),
    );

    /// A key whose every fold panics delays no other key: flushes and
    /// passes fold every other counter and histogram, then panic.
    #[test]
    fn a_key_the_recorder_underneath_always_refuses_delays_no_other() {
        let inner = Refuses::default();
        let handed = Arc::clone(&inner.0);
        let r = ShardedLayer::new()
            .with_interval(Duration::from_secs(3600))
            .wrap(inner);
        let count = |bad, good, h| {
            ::metrics::with_local_recorder(&r, || {
                ::metrics::counter!("bad").increment(bad);
                for k in ["a", "b", "c"] {
                    ::metrics::counter!(k).increment(good);
                }
                ::metrics::histogram!("h").record(h);
            })
        };
        count(1, 2, 1.0);
        flush_panics(&r);
        assert_eq!(handed.counts.load(Relaxed), 6, "every good key folded");
        assert_eq!(handed.records.load(Relaxed), 1, "the histogram folded");
        count(1, 3, 2.0);
        let passed = catch_unwind(AssertUnwindSafe(|| {
            r.shared.pass(std::time::Instant::now())
        }));
        assert!(passed.is_err(), "the refusal reaches the pass");
        assert_eq!(handed.counts.load(Relaxed), 15);
        assert_eq!(handed.records.load(Relaxed), 2);
        count(1, 4, 3.0);
        let dropped = catch_unwind(AssertUnwindSafe(move || drop(r)));
        assert!(
            dropped.is_err(),
            "the last flush's refusal reaches the drop"
        );
        assert_eq!(handed.counts.load(Relaxed), 27);
        assert_eq!(handed.records.load(Relaxed), 3);
    }

    /// Dropped while its thread unwinds, a recorder whose last flush
    /// panics lets the first panic go on (a second one would abort the
    /// process, and this test binary with it).
    #[test]
    fn a_recorder_dropped_while_unwinding_lets_the_first_panic_go_on() {
        let r = ShardedLayer::new()
            .with_interval(Duration::from_secs(3600))
            .wrap(Refuses::default());
        ::metrics::with_local_recorder(&r, || ::metrics::counter!("bad").increment(1));
        let unwound = catch_unwind(AssertUnwindSafe(move || {
            let _dropped_while_unwinding = r;
            std::panic::panic_any("the first panic");
        }));
        let panic = unwound.expect_err("the closure panics");
        assert_eq!(panic.downcast_ref::<&str>(), Some(&"the first panic"));
    }
}

/// Through the recorder: a recorder underneath that counts its own work
/// through the facade, reaching this layer again from inside a fold.
mod reentry {
    use super::super::{ShardedLayer, ShardedRecorder};
    use ::metrics::{Counter, CounterFn, Histogram, Key, Recorder};
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    use std::sync::{mpsc, Arc, Mutex};
    use std::time::Duration;

    /// Every counter adds what it is handed to one total, and counts the
    /// call as `inner_ops` through the facade (as exporters' self-metrics
    /// do).
    struct SelfCounting(Arc<AtomicU64>);

    struct Counted(Arc<AtomicU64>);

    impl CounterFn for Counted {
        fn increment(&self, n: u64) {
            self.0.fetch_add(n, Relaxed);
            ::metrics::counter!("inner_ops").increment(1);
        }
        fn absolute(&self, _: u64) {
            ::metrics::counter!("inner_ops").increment(1);
        }
    }

    recorder!(SelfCounting, |this, key|
        counter: Counter::from_arc(Arc::new(Counted(Arc::clone(&this.0)))),
        histogram: Histogram::from_arc(Arc::new(Echo(Arc::clone(&this.0)))),
    );

    /// A histogram that counts what it is handed in the same total, and
    /// records each value it is handed at or above 0 once more, as -1,
    /// into `h` through the facade (a value the layer passes straight
    /// through).
    struct Echo(Arc<AtomicU64>);

    impl ::metrics::HistogramFn for Echo {
        fn record(&self, v: f64) {
            self.0.fetch_add(1, Relaxed);
            if v >= 0.0 {
                ::metrics::histogram!("h").record(-1.0);
            }
        }
    }

    /// Runs `f` on a thread of its own with `r` as its local recorder; a
    /// hang fails at the timeout (the thread is left behind, not joined).
    fn on_a_new_thread<R: Recorder + Send + Sync + 'static>(
        r: &Arc<R>,
        f: impl FnOnce(&R) + Send + 'static,
    ) {
        let (r, (tx, rx)) = (Arc::clone(r), mpsc::channel());
        std::thread::spawn(move || {
            ::metrics::with_local_recorder(&*r, || f(&r));
            tx.send(()).unwrap();
        });
        assert_eq!(rx.recv_timeout(Duration::from_secs(60)), Ok(()), "hung");
    }

    /// A fold of `inner_ops` whose inner increment registers `inner_ops`
    /// from a thread that has no handle for it yet: the registration must
    /// not wait for the fold lock its own thread holds (it hung), and the
    /// count it makes is folded later.
    #[test]
    fn a_recorder_underneath_counting_through_the_layer_never_waits_for_itself() {
        let total = Arc::new(AtomicU64::new(0));
        let r = Arc::new(
            ShardedLayer::new()
                .with_interval(Duration::from_secs(3600))
                .wrap(SelfCounting(Arc::clone(&total))),
        );
        on_a_new_thread(&r, |r| {
            ::metrics::counter!("work").increment(5);
            r.flush(); // inner_ops + 1, in this thread's own handle
        });
        assert_eq!(total.load(Relaxed), 5);
        // A fresh thread folds inner_ops: its inner increment registers it.
        on_a_new_thread(&r, |r| r.flush());
        assert_eq!(total.load(Relaxed), 6);
        // ... and `absolute` on a handle sent from elsewhere, likewise.
        let (tx, rx) = mpsc::channel();
        on_a_new_thread(&r, move |_| {
            tx.send(::metrics::counter!("inner_ops")).unwrap()
        });
        let kept = rx.recv().unwrap();
        on_a_new_thread(&r, move |_| kept.absolute(0));
        on_a_new_thread(&r, |r| r.flush());
        // `absolute` folds the 1 counted inside the last fold, and counts
        // 2 more (that fold's increment and the absolute itself), which
        // the last flush hands on.
        assert_eq!(total.load(Relaxed), 6 + 1 + 2);
    }

    /// A fold of histogram `h` whose recorder records into `h` again a
    /// value the layer passes straight through: it could not take the
    /// fold lock its own thread held (it hung), so the same fold hands it
    /// on, once, after the records it followed.
    #[test]
    fn a_value_passed_through_from_inside_its_keys_fold_is_handed_on_once() {
        let total = Arc::new(AtomicU64::new(0));
        let r = Arc::new(
            ShardedLayer::new()
                .with_interval(Duration::from_secs(3600))
                .wrap(SelfCounting(Arc::clone(&total))),
        );
        on_a_new_thread(&r, |r| {
            ::metrics::histogram!("h").record(1.0);
            r.flush();
        });
        assert_eq!(total.load(Relaxed), 2, "1.0, then its echo");
        on_a_new_thread(&r, |r| r.flush());
        assert_eq!(total.load(Relaxed), 2);
    }

    /// A recorder of "at least" counters (an increment adds, an
    /// `absolute` raises), one word per key name (`a`, else `b`). Handed a
    /// delta for a key named in `sets`, the counter sets the key that rule
    /// names to a value, through the facade, once.
    struct Setting {
        words: Arc<[AtomicU64; 2]>,
        sets: Vec<(&'static str, &'static str, u64)>,
    }

    struct AtLeast {
        word: usize,
        words: Arc<[AtomicU64; 2]>,
        then: Option<(&'static str, u64)>,
        done: std::sync::atomic::AtomicBool,
    }

    impl CounterFn for AtLeast {
        fn increment(&self, n: u64) {
            self.words[self.word].fetch_add(n, Relaxed);
            if let Some((key, v)) = self.then {
                if !self.done.swap(true, Relaxed) {
                    ::metrics::counter!(key).absolute(v);
                }
            }
        }
        fn absolute(&self, v: u64) {
            self.words[self.word].fetch_max(v, Relaxed);
        }
    }

    recorder!(Setting, |this, key|
        counter: {
            let then = this.sets.iter().find(|s| s.0 == key.name());
            Counter::from_arc(Arc::new(AtLeast {
                word: usize::from(key.name() != "a"),
                words: Arc::clone(&this.words),
                then: then.map(|&(_, key, v)| (key, v)),
                done: std::sync::atomic::AtomicBool::new(false),
            }))
        },
        histogram: Histogram::noop(),
    );

    fn setting(sets: Vec<(&'static str, &'static str, u64)>) -> (Arc<[AtomicU64; 2]>, Setting) {
        let words = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
        (Arc::clone(&words), Setting { words, sets })
    }

    /// An `absolute` on the key being folded, from inside its fold, could
    /// not take the fold lock its own thread held (it hung): it is passed
    /// on in that same fold, after the delta it followed and before any
    /// later one (an at-least counter: 1, then 100, then 5 more is 105).
    #[test]
    fn an_absolute_from_inside_its_keys_fold_is_passed_on_in_order() {
        let (words, inner) = setting(vec![("a", "a", 100)]);
        let r = Arc::new(
            ShardedLayer::new()
                .with_interval(Duration::from_secs(3600))
                .wrap(inner),
        );
        on_a_new_thread(&r, |r| {
            ::metrics::counter!("a").increment(1);
            r.flush();
            ::metrics::counter!("a").increment(5);
            r.flush();
        });
        assert_eq!(words[0].load(Relaxed), 105);
    }

    /// Folds nest: `a`'s fold sets `b`, whose fold sets `a`, which this
    /// thread is still folding. The marks are a stack, so that `absolute`
    /// waits for `a`'s fold instead of its lock (it hung).
    #[test]
    fn nested_folds_never_wait_for_an_outer_ones_lock() {
        let (words, inner) = setting(vec![("a", "b", 10), ("b", "a", 20)]);
        let r = Arc::new(
            ShardedLayer::new()
                .with_interval(Duration::from_secs(3600))
                .wrap(inner),
        );
        on_a_new_thread(&r, |r| {
            ::metrics::counter!("b").increment(1);
            ::metrics::counter!("a").increment(1);
            r.flush();
            r.flush();
        });
        assert_eq!((words[0].load(Relaxed), words[1].load(Relaxed)), (20, 10));
    }

    /// A recorder whose counters, at their first `absolute`, wait until
    /// the other key's counter is at its own (both folds' locks held) and
    /// then set the other key through the facade: `a` sets `b` to 10, `b`
    /// sets `a` to 20. Every `absolute` raises the key's word.
    struct Crossing {
        words: Arc<[AtomicU64; 2]>,
        both: Arc<std::sync::Barrier>,
    }

    struct Crosses {
        word: usize,
        words: Arc<[AtomicU64; 2]>,
        both: Arc<std::sync::Barrier>,
        done: std::sync::atomic::AtomicBool,
    }

    impl CounterFn for Crosses {
        fn increment(&self, n: u64) {
            self.words[self.word].fetch_add(n, Relaxed);
        }
        fn absolute(&self, v: u64) {
            self.words[self.word].fetch_max(v, Relaxed);
            if !self.done.swap(true, Relaxed) {
                self.both.wait();
                match self.word {
                    0 => ::metrics::counter!("b").absolute(10),
                    _ => ::metrics::counter!("a").absolute(20),
                }
            }
        }
    }

    /// The same for histograms: a value recorded, then at the first, `-1`
    /// into the other key (a value the layer passes straight through,
    /// under that key's fold lock). Counts values in the key's word.
    impl ::metrics::HistogramFn for Crosses {
        fn record(&self, _: f64) {
            self.words[self.word].fetch_add(1, Relaxed);
            if !self.done.swap(true, Relaxed) {
                self.both.wait();
                ::metrics::histogram!(if self.word == 0 { "b" } else { "a" }).record(-1.0);
            }
        }
    }

    impl Crossing {
        fn crosses(&self, key: &Key) -> Arc<Crosses> {
            Arc::new(Crosses {
                word: usize::from(key.name() != "a"),
                words: Arc::clone(&self.words),
                both: Arc::clone(&self.both),
                done: std::sync::atomic::AtomicBool::new(false),
            })
        }
    }

    recorder!(Crossing, |this, key|
        counter: Counter::from_arc(this.crosses(key)),
        histogram: Histogram::from_arc(this.crosses(key)),
    );

    /// Runs `f(key, v)` for `("a", a)` and `("b", b)` on two threads with
    /// `r` as their local recorder, together; a hang fails at the timeout.
    fn on_two_threads<R: Recorder + Send + Sync + 'static>(
        r: &Arc<R>,
        (a, b): (u64, u64),
        f: fn(&'static str, u64),
    ) {
        let (tx, rx) = mpsc::channel();
        for (key, v) in [("a", a), ("b", b)] {
            let (r, tx) = (Arc::clone(r), tx.clone());
            std::thread::spawn(move || {
                ::metrics::with_local_recorder(&*r, || f(key, v));
                tx.send(()).unwrap();
            });
        }
        for _ in 0..2 {
            assert_eq!(rx.recv_timeout(Duration::from_secs(60)), Ok(()), "hung");
        }
    }

    fn crossing() -> (Arc<[AtomicU64; 2]>, Arc<ShardedRecorder<Crossing>>) {
        let words = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
        let r = ShardedLayer::new()
            .with_interval(Duration::from_secs(3600))
            .wrap(Crossing {
                words: Arc::clone(&words),
                both: Arc::new(std::sync::Barrier::new(2)),
            });
        (words, Arc::new(r))
    }

    /// Two threads each inside one key's fold, each setting the other's
    /// key from there: neither waits for the other's fold lock (they
    /// waited for each other for ever); each value is passed on by that
    /// key's fold in progress or the next one.
    #[test]
    fn folds_on_two_threads_setting_each_others_keys_never_wait_for_each_other() {
        let (words, r) = crossing();
        on_two_threads(&r, (1, 2), |key, v| ::metrics::counter!(key).absolute(v));
        r.flush();
        assert_eq!((words[0].load(Relaxed), words[1].load(Relaxed)), (20, 10));
    }

    /// The same for histograms: each thread passes a value through into
    /// its key, under its fold lock, and from there one into the other's.
    /// Each key gets both, once.
    #[test]
    fn values_passed_through_across_two_threads_folds_never_wait_for_each_other() {
        let (words, r) = crossing();
        on_two_threads(&r, (0, 0), |key, _| ::metrics::histogram!(key).record(-5.0));
        r.flush();
        assert_eq!((words[0].load(Relaxed), words[1].load(Relaxed)), (2, 2));
    }

    /// Inner counters with `set` semantics for `absolute`. Key `b`'s first
    /// `increment` (a fold's add) signals `in_b` and waits for `go`. Key
    /// `a`'s first `absolute` runs, through the facade, `b += 5; b = 10`,
    /// then sends `go`.
    struct Gate {
        b: Arc<AtomicU64>,
        in_b: Mutex<Option<mpsc::Sender<()>>>,
        go: Arc<Mutex<Option<mpsc::Receiver<()>>>>,
        go_tx: Arc<Mutex<Option<mpsc::Sender<()>>>>,
    }
    struct BInner {
        word: Arc<AtomicU64>,
        in_b: Mutex<Option<mpsc::Sender<()>>>,
        go: Arc<Mutex<Option<mpsc::Receiver<()>>>>,
    }
    impl CounterFn for BInner {
        fn increment(&self, n: u64) {
            self.word.fetch_add(n, Relaxed);
            if let Some(tx) = self.in_b.lock().unwrap().take() {
                tx.send(()).unwrap();
                let rx = self.go.lock().unwrap().take().unwrap();
                rx.recv().unwrap();
            }
        }
        fn absolute(&self, v: u64) {
            self.word.store(v, Relaxed);
        }
    }
    struct AInner {
        go_tx: Arc<Mutex<Option<mpsc::Sender<()>>>>,
    }
    impl CounterFn for AInner {
        fn increment(&self, _: u64) {}
        fn absolute(&self, _: u64) {
            if let Some(tx) = self.go_tx.lock().unwrap().take() {
                ::metrics::counter!("b").increment(5);
                ::metrics::counter!("b").absolute(10);
                tx.send(()).unwrap();
            }
        }
    }
    recorder!(Gate, |this, key|
        counter: if key.name() == "b" {
            Counter::from_arc(Arc::new(BInner {
                word: Arc::clone(&this.b),
                in_b: Mutex::new(this.in_b.lock().unwrap().take()),
                go: Arc::clone(&this.go),
            }))
        } else {
            Counter::from_arc(Arc::new(AInner { go_tx: Arc::clone(&this.go_tx) }))
        },
        histogram: Histogram::noop(),
    );

    /// Program order on one thread (from inside `a`'s fold): `b += 5`, then
    /// `b = 10`, while a flush on another thread folds `b` and waits for
    /// the first thread: the `absolute` is deferred, and the fold in
    /// progress hands on the +5 before it, so `b` ends at 10 (it handed
    /// the +5 in the next fold, after the `absolute`: 15).
    #[test]
    fn an_absolute_deferred_behind_another_threads_fold_follows_the_increments_before_it() {
        let b = Arc::new(AtomicU64::new(0));
        let (in_tx, in_rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel();
        let r = Arc::new(
            ShardedLayer::new()
                .with_interval(Duration::from_secs(3600))
                .wrap(Gate {
                    b: Arc::clone(&b),
                    in_b: Mutex::new(Some(in_tx)),
                    go: Arc::new(Mutex::new(Some(go_rx))),
                    go_tx: Arc::new(Mutex::new(Some(go_tx))),
                }),
        );
        ::metrics::with_local_recorder(&*r, || ::metrics::counter!("b").increment(1));
        let flusher = {
            let r = Arc::clone(&r);
            std::thread::spawn(move || r.flush())
        };
        in_rx
            .recv_timeout(Duration::from_secs(60))
            .expect("flush folding b");
        let (done_tx, done_rx) = mpsc::channel();
        {
            let r = Arc::clone(&r);
            std::thread::spawn(move || {
                ::metrics::with_local_recorder(&*r, || ::metrics::counter!("a").absolute(1));
                done_tx.send(()).unwrap();
            });
        }
        done_rx.recv_timeout(Duration::from_secs(60)).expect("hung");
        flusher.join().unwrap();
        r.flush();
        assert_eq!(b.load(Relaxed), 10, "b += 5; b = 10 must leave b at 10");
    }

    /// Each key's counter, at its first `absolute`, waits until the other
    /// key's is at its own (both fold locks held), then counts its work
    /// through the facade into the other key, `CALLS` times.
    struct Chatty {
        words: Arc<[AtomicU64; 2]>,
        both: Arc<std::sync::Barrier>,
    }

    struct Chat {
        word: usize,
        words: Arc<[AtomicU64; 2]>,
        both: Arc<std::sync::Barrier>,
        done: std::sync::atomic::AtomicBool,
    }

    const CALLS: u64 = 20;

    impl CounterFn for Chat {
        fn increment(&self, n: u64) {
            self.words[self.word].fetch_add(n, Relaxed);
        }
        fn absolute(&self, v: u64) {
            self.words[self.word].fetch_max(v, Relaxed);
            if !self.done.swap(true, Relaxed) {
                self.both.wait();
                for _ in 0..CALLS {
                    ::metrics::counter!(if self.word == 0 { "b" } else { "a" }).increment(1);
                }
            }
        }
    }

    recorder!(Chatty, |this, key|
        counter: Counter::from_arc(Arc::new(Chat {
            word: usize::from(key.name() != "a"),
            words: Arc::clone(&this.words),
            both: Arc::clone(&this.both),
            done: std::sync::atomic::AtomicBool::new(false),
        })),
        histogram: Histogram::noop(),
    );

    /// Two crossing folds whose recorders each count `CALLS` times into
    /// the other's key, a lock that stays taken: each thread waits for it
    /// once, then defers at once (every call waited the full 50 ms), and
    /// every count arrives.
    #[test]
    fn crossing_folds_wait_once_per_recorder_call_not_once_per_facade_call() {
        let words = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
        let r = Arc::new(
            ShardedLayer::new()
                .with_interval(Duration::from_secs(3600))
                .wrap(Chatty {
                    words: Arc::clone(&words),
                    both: Arc::new(std::sync::Barrier::new(2)),
                }),
        );
        let (tx, rx) = mpsc::channel();
        for (key, v) in [("a", 1), ("b", 2)] {
            let (r, tx) = (Arc::clone(&r), tx.clone());
            std::thread::spawn(move || {
                ::metrics::with_local_recorder(&*r, || ::metrics::counter!(key).absolute(v));
                tx.send(super::super::entry::RAN_OUT.with(std::cell::Cell::get))
                    .unwrap();
            });
        }
        for _ in 0..2 {
            let ran_out = rx.recv_timeout(Duration::from_secs(60)).expect("hung");
            assert!(ran_out <= 1, "{ran_out} waits ran out on one thread");
        }
        r.flush();
        let got = (words[0].load(Relaxed), words[1].load(Relaxed));
        assert_eq!(got, (1 + CALLS, 2 + CALLS));
    }

    /// A key registered from inside its own fold by a thread that lives on
    /// is still evicted once idle: that thread's handle is unlisted and
    /// uncached, so it does not hold the key in the map.
    #[test]
    fn a_key_registered_from_inside_its_fold_is_still_evicted_when_idle() {
        let total = Arc::new(AtomicU64::new(0));
        let r = Arc::new(
            ShardedLayer::new()
                .with_interval(Duration::from_secs(3600))
                .evict_idle_after(Duration::from_secs(60))
                .wrap(SelfCounting(Arc::clone(&total))),
        );
        on_a_new_thread(&r, |r| {
            ::metrics::counter!("work").increment(5);
            r.flush(); // inner_ops + 1
        });
        let (folded, (go, wait)) = (mpsc::channel(), mpsc::channel::<()>());
        let there = Arc::clone(&r);
        let lives = std::thread::spawn(move || {
            ::metrics::with_local_recorder(&*there, || there.flush()); // re-enters
            folded.0.send(()).unwrap();
            wait.recv().unwrap();
        });
        folded.1.recv().unwrap();
        r.flush();
        super::pass_idle(&r);
        super::pass_idle(&r);
        assert_eq!(r.keys(), 0, "every idle key evicted while the thread lives");
        go.send(()).unwrap();
        lives.join().unwrap();
    }
}
