//! Loom model of idle-key eviction in the `metrics` layer (the protocol
//! notes in `src/integrations/metrics/evict.rs`), on the layer's own code:
//! its `Entry` (backed by a real `Counter`), the owned handle (`Local`),
//! registration (`Entry::list`), the pass's `Evicted::take_out` and
//! `Evicted::fold`, and the sweep's reads (`Evicted::passes`,
//! `Local::evicted`). Only the map (one key) and the inner recorder's
//! counter (one word) are the model's; the cache around the sweep's two
//! reads and the recorder around the pass are not built under loom.
//!
//! The claim: once a pass has evicted an entry, increments still made
//! through a thread's cached handle (before its sweep) and through a kept
//! handle (after its owner retired it) reach the inner counter exactly
//! once, because the pass folds the entry until `Arc::try_unwrap` hands it
//! the only reference; and a sweep that has read the pass's count sees the
//! entry's flag. Checked with the uniqueness test replaced by "its handle
//! list is empty" (the owners have all retired), the model fails: a kept
//! handle's increment lands after the last fold.

use super::thread;
use crate::integrations::metrics::entry::{Entry, Inner};
use crate::integrations::metrics::evict::{Evicted, IGNORE_HANDLES};
use crate::primitive::sync::atomic::{AtomicU64, Ordering};
use crate::primitive::sync::{Arc, Mutex};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The inner recorder's counter: one word.
struct Word(Arc<AtomicU64>);

impl Inner for Word {
    fn add(&self, delta: u64) {
        self.0.fetch_add(delta, Ordering::Relaxed);
    }
}

/// The main thread registers a handle of its own (as its cache would),
/// counts 1 through it and, having seen the eviction (or at its exit),
/// retires it and lets it go; a kept clone of the handle counts 2 from
/// another thread, through the entry; the third thread is the background
/// pass: it evicts the entry (flag under the fold lock, then the count
/// with Release) as a pass racing a `counter!` call can, kept handle and
/// all, and folds it until it holds the only reference. The inner counter
/// ends at exactly 3, and the entry is freed by the pass.
#[test]
fn evicted_entry_folded_until_unique_loses_nothing() {
    super::model(|| {
        let inner = Arc::new(AtomicU64::new(0));
        let entry = Arc::new(Entry::new(false, Word(inner.clone())));
        // Registration lists the handle; the owner's cache holds it.
        let cached = Entry::list(&entry).expect("not evicted yet");
        let map = Arc::new(Mutex::new(HashMap::from([(0u8, entry)])));
        let evicted = Arc::new(Evicted::new());
        let kept = cached.clone();
        let keeper = thread::spawn(move || {
            kept.increment(2);
            drop(kept);
        });
        let pass = {
            let (map, evicted) = (map.clone(), evicted.clone());
            thread::spawn(move || {
                IGNORE_HANDLES.with(|c| c.set(true));
                evicted.take_out(&map, Instant::now(), Duration::ZERO);
                IGNORE_HANDLES.with(|c| c.set(false));
                assert_eq!(evicted.len(), 1, "the idle key was not evicted");
                // `KeyTable::pass` and every flush, pass after pass.
                loop {
                    let mut panics = crate::unwind::FirstPanic::default();
                    evicted.fold(&mut panics);
                    panics.finish();
                    if evicted.len() == 0 {
                        break;
                    }
                    thread::yield_now();
                }
            })
        };
        cached.increment(1);
        // The sweep: the count, then the flag.
        if evicted.passes() != 0 {
            assert!(cached.evicted(), "a sweep missed an evicted entry");
        }
        // Sweep or exit alike: retire, then let go.
        cached.retire();
        drop(cached);
        keeper.join().unwrap();
        pass.join().unwrap();
        assert_eq!(inner.load(Ordering::Relaxed), 3, "a count lost or doubled");
    });
}
