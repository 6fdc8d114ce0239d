//! Loom model of idle-key eviction in the `metrics` layer (the protocol
//! notes in `src/integrations/metrics.rs`, section "Eviction"). Loom never
//! builds the integration (its thread-local caches, `Weak` and clock), so
//! the entry, the owned handle and the fold are written out here, step for
//! step and ordering for ordering, as the integration has them: the
//! backing counter is one word (its take a swap, exact as `Counter::take`
//! is) and the inner recorder's counter another.
//!
//! The claim: once a pass has evicted an entry, increments still made
//! through a thread's cached handle (before its sweep) and through a kept
//! handle (after its owner retired it) reach the inner counter exactly
//! once, because the pass folds the entry until `Arc::try_unwrap` hands it
//! the only reference. Checked with the uniqueness test replaced by "its
//! handle list is empty" (the owners have all retired), the model fails:
//! a kept handle's increment lands after the last fold.

use crate::primitive::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use crate::primitive::sync::{lock, Arc, Mutex};
use loom::thread;

/// `Entry`: the backing counter, the owned handles with the word each
/// had at the last fold, the eviction flag and the inner counter.
struct Entry {
    counter: AtomicU64,
    fold: Mutex<Vec<(Arc<Local>, u64)>>,
    evicted: AtomicBool,
    inner: Arc<AtomicU64>,
}

/// `Local`: the owner's id (0 once retired) and its word.
struct Local {
    owner: AtomicU64,
    own: AtomicU64,
    entry: Arc<Entry>,
}

impl Local {
    /// `CounterFn for Local::increment`, by the thread with id `me`.
    fn increment(&self, me: u64, value: u64) {
        if self.owner.load(Ordering::Relaxed) == me {
            let own = &self.own;
            own.store(
                own.load(Ordering::Relaxed).wrapping_add(value),
                Ordering::Relaxed,
            );
        } else {
            // `Entry::add`: the backing counter's add (an RMW).
            self.entry.counter.fetch_add(value, Ordering::Relaxed);
        }
    }

    /// `Local::retire`, by the owner after its last store to `own`.
    fn retire(&self) {
        self.owner.store(0, Ordering::Release);
    }
}

impl Entry {
    /// `Entry::fold`: the counter's take, every listed word's growth
    /// (a retired handle's once more, then dropped from the list), into
    /// the inner counter.
    fn fold(&self) {
        let mut locals = lock(&self.fold);
        let mut delta = self.counter.swap(0, Ordering::Relaxed);
        locals.retain_mut(|(local, seen)| {
            let retired = local.owner.load(Ordering::Acquire) == 0;
            let word = local.own.load(Ordering::Relaxed);
            delta = delta.wrapping_add(word.wrapping_sub(*seen));
            *seen = word;
            !retired
        });
        if delta != 0 {
            self.inner.fetch_add(delta, Ordering::Relaxed);
        }
    }
}

/// The owner (id 1) counts 1 through its cached handle and, having seen
/// the eviction (or at its exit), retires the handle and lets it go; a
/// kept clone of the handle counts 2 from another thread (id 2), through
/// the entry; the main thread is the background pass: it evicts the
/// entry (flag under the fold lock, then the count with Release) and
/// folds it until it holds the only reference. The inner counter ends at
/// exactly 3, and the entry is freed by the pass.
#[test]
fn evicted_entry_folded_until_unique_loses_nothing() {
    loom::model(|| {
        let inner = Arc::new(AtomicU64::new(0));
        let evictions = Arc::new(AtomicU64::new(0));
        let entry = Arc::new(Entry {
            counter: AtomicU64::new(0),
            fold: Mutex::new(Vec::new()),
            evicted: AtomicBool::new(false),
            inner: inner.clone(),
        });
        let local = Arc::new(Local {
            owner: AtomicU64::new(1),
            own: AtomicU64::new(0),
            entry: entry.clone(),
        });
        // Registration lists the handle; the owner's cache holds it.
        lock(&entry.fold).push((local.clone(), 0));
        let kept = local.clone();
        let owner = {
            let evictions = evictions.clone();
            thread::spawn(move || {
                let cached = local;
                cached.increment(1, 1);
                // The sweep: the count with Acquire, then the flag.
                if evictions.load(Ordering::Acquire) != 0 {
                    assert!(cached.entry.evicted.load(Ordering::Relaxed));
                }
                // Sweep or exit alike: retire, then let go.
                cached.retire();
                drop(cached);
            })
        };
        let keeper = thread::spawn(move || {
            kept.increment(2, 2);
            drop(kept);
        });
        // The pass evicts: out of the map (here: the main thread's
        // reference is the map's), flagged, counted.
        {
            let _held = lock(&entry.fold);
            entry.evicted.store(true, Ordering::Relaxed);
        }
        evictions.fetch_add(1, Ordering::Release);
        // `Shared::fold_evicted`, pass after pass.
        let mut held = entry;
        loop {
            held.fold();
            match Arc::try_unwrap(held) {
                Ok(last) => {
                    last.fold();
                    break;
                }
                Err(again) => {
                    held = again;
                    thread::yield_now();
                }
            }
        }
        owner.join().unwrap();
        keeper.join().unwrap();
        assert_eq!(inner.load(Ordering::Relaxed), 3, "a count lost or doubled");
    });
}
