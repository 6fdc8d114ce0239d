//! `Folder`: one background thread that folds registered
//! [`RoughCounter`]s every interval, so their `approx()` catches up with
//! threads that went idle.
//!
//! # Protocol
//!
//! The thread is a `worker::Worker` (stop, wake, join and the
//! rule for a tiny interval are its). The handle and the pass share a
//! `Mutex<State>`: the registered counters (as strong references to their
//! shared blocks) and the pass count. A pass copies the list of counters
//! and lets go of the lock, then folds each with `flush_all` (whose
//! orderings are described in `rough.rs`). It takes the lock again only to
//! drop counters that were dropped and to count the pass. So the handle's
//! calls wait at most for a list copy, never for a pass, however short the
//! interval. No atomics of its own: the mutex orders everything.

use super::rough_counter::{CoreRef, RoughCounter};
use crate::primitive::sync::{Arc, Mutex, MutexGuard};
use crate::worker::{self, Worker};
use std::fmt;
use std::time::Duration;

struct State {
    counters: Vec<CoreRef>,
    /// Completed fold passes, for `passes()`.
    passes: u64,
}

/// A background thread that folds registered [`RoughCounter`]s every
/// `interval`.
///
/// After it has run, [`RoughCounter::approx`] reflects every add older than
/// about two intervals (one interval of waiting plus the pass), even for
/// threads that stopped adding and never reach a batch. It holds a reference
/// to each registered counter's shared block and lets go at the first pass
/// after the counter is dropped. Dropping the `Folder` stops the thread and
/// waits for it.
///
/// # Example
///
/// ```
/// use shardcount::{Folder, RoughCounter};
/// use std::time::Duration;
///
/// static HITS: RoughCounter = RoughCounter::new();
/// let folder = Folder::new(Duration::from_millis(5));
/// folder.register(&HITS);
/// HITS.add(3); // far below the batch: only a fold makes approx() see it
/// while HITS.approx() != 3 {
///     std::thread::sleep(Duration::from_millis(1));
/// }
/// drop(folder); // stops and joins the thread
/// ```
pub struct Folder {
    state: Arc<Mutex<State>>,
    interval: Duration,
    /// Stops and joins the thread when the folder is dropped.
    _worker: Worker,
}

impl Folder {
    /// The shortest interval a folder runs at: any interval below 1 ms,
    /// zero included, runs every 1 ms, as every background thread of this
    /// crate does. The thread sleeps between passes instead of spinning a
    /// core.
    ///
    /// ```
    /// use std::time::Duration;
    /// let folder = shardcount::Folder::new(Duration::from_nanos(10));
    /// assert_eq!(folder.interval(), shardcount::Folder::MIN_INTERVAL);
    /// assert_eq!(shardcount::Folder::MIN_INTERVAL, Duration::from_millis(1));
    /// ```
    pub const MIN_INTERVAL: Duration = worker::MIN_WAIT;

    /// Starts the background thread, folding every `interval`. Any
    /// interval below 1 ms, zero included, runs every 1 ms
    /// ([`MIN_INTERVAL`](Self::MIN_INTERVAL)).
    ///
    /// # Panics
    ///
    /// If the thread cannot be spawned.
    ///
    /// ```
    /// use shardcount::Folder;
    /// use std::time::Duration;
    /// let folder = Folder::new(Duration::from_secs(1));
    /// assert_eq!(folder.interval(), Duration::from_secs(1));
    /// assert_eq!(Folder::new(Duration::ZERO).interval(), Duration::from_millis(1));
    /// ```
    #[must_use]
    pub fn new(interval: Duration) -> Folder {
        let interval = worker::effective(interval);
        let state = Arc::new(Mutex::new(State {
            counters: Vec::new(),
            passes: 0,
        }));
        let worker = Worker::spawn("shardcount-folder", interval, {
            let state = Arc::clone(&state);
            move || pass(&state)
        });
        Folder {
            state,
            interval,
            _worker: worker,
        }
    }

    /// Adds `counter` to the counters folded every interval. Registering a
    /// counter twice folds it twice per pass, which is harmless. Returns at
    /// once: a pass in progress does not hold the folder's lock.
    ///
    /// ```
    /// use shardcount::{Folder, RoughCounter};
    /// let folder = Folder::new(std::time::Duration::from_secs(1));
    /// let c = RoughCounter::new();
    /// folder.register(&c);
    /// ```
    pub fn register(&self, counter: &RoughCounter) {
        let r = counter.core_ref();
        lock(&self.state).counters.push(r);
    }

    /// The interval this folder runs at: the one it was started with, or
    /// [`MIN_INTERVAL`](Self::MIN_INTERVAL) (1 ms) if that was shorter.
    ///
    /// ```
    /// use std::time::Duration;
    /// let folder = shardcount::Folder::new(Duration::from_millis(50));
    /// assert_eq!(folder.interval(), Duration::from_millis(50));
    /// ```
    #[must_use]
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// How many fold passes have completed. A diagnostic.
    ///
    /// ```
    /// let folder = shardcount::Folder::new(std::time::Duration::from_millis(1));
    /// while folder.passes() < 2 {
    ///     std::thread::sleep(std::time::Duration::from_millis(1));
    /// }
    /// ```
    #[must_use]
    pub fn passes(&self) -> u64 {
        lock(&self.state).passes
    }

    /// How many counters are registered (dropped counters leave at the next
    /// pass). A diagnostic.
    ///
    /// ```
    /// let folder = shardcount::Folder::new(std::time::Duration::from_secs(1));
    /// folder.register(&shardcount::RoughCounter::new());
    /// assert_eq!(folder.registered(), 1);
    /// ```
    #[must_use]
    pub fn registered(&self) -> usize {
        lock(&self.state).counters.len()
    }
}

/// Locks the state; a panic elsewhere cannot leave it inconsistent (every
/// update is a single push, retain or increment), so poisoning is ignored.
fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    crate::primitive::sync::lock(state)
}

/// One fold of every registered counter.
fn pass(state: &Mutex<State>) {
    // Fold without the lock, so the handle's calls never wait for a pass;
    // a counter registered meanwhile is folded from the next one.
    let counters = lock(state).counters.clone();
    let dropped = counters.iter().filter(|c| !c.fold_all()).count();
    let mut state = lock(state);
    if dropped > 0 {
        state.counters.retain(CoreRef::is_live);
    }
    state.passes += 1;
}

impl fmt::Debug for Folder {
    /// Shows the interval and the number of registered counters.
    ///
    /// ```
    /// let folder = shardcount::Folder::new(std::time::Duration::from_secs(1));
    /// assert_eq!(format!("{folder:?}"), "Folder { interval: 1s, registered: 0 }");
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Folder")
            .field("interval", &self.interval)
            .field("registered", &self.registered())
            .finish()
    }
}
