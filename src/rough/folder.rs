//! `Folder`: one background thread that folds registered
//! [`RoughCounter`]s every interval, so their `approx()` catches up with
//! threads that went idle.
//!
//! # Protocol
//!
//! The handle and its thread share a `Mutex<State>` and a `Condvar`. The
//! state holds the registered counters (as strong references to their shared
//! blocks), a `stop` flag and the pass count. The thread waits on the condvar
//! for one interval, copies the list of counters and lets go of the lock, then
//! folds each with `flush_all` (whose orderings are described in `rough.rs`).
//! It takes the lock again only to drop counters that were dropped and to
//! count the pass. So the handle's calls wait at most for a list copy, never
//! for a pass, however short the interval. Intervals below
//! [`Folder::MIN_INTERVAL`] are raised to it, so the thread always sleeps
//! between passes. Dropping the handle sets `stop`, wakes the thread and
//! joins it. No atomics of its own: the mutex orders everything here.

use super::{RoughCounter, SharedRef};
use crate::primitive::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::fmt;
use std::sync::PoisonError;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

struct State {
    counters: Vec<SharedRef>,
    stop: bool,
    /// Completed fold passes, for `passes()`.
    passes: u64,
}

struct Inner {
    state: Mutex<State>,
    wake: Condvar,
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
    inner: Arc<Inner>,
    interval: Duration,
    thread: Option<JoinHandle<()>>,
}

impl Folder {
    /// The shortest interval a folder runs at: a shorter one is raised to
    /// this, so the thread sleeps between passes instead of spinning a core.
    ///
    /// ```
    /// use std::time::Duration;
    /// let folder = shardcount::Folder::new(Duration::from_nanos(10));
    /// assert_eq!(folder.interval(), shardcount::Folder::MIN_INTERVAL);
    /// assert_eq!(shardcount::Folder::MIN_INTERVAL, Duration::from_millis(1));
    /// ```
    pub const MIN_INTERVAL: Duration = Duration::from_millis(1);

    /// Starts the background thread, folding every `interval` (at least
    /// [`MIN_INTERVAL`](Self::MIN_INTERVAL)).
    ///
    /// # Panics
    ///
    /// If `interval` is zero (a folder that never waits is a mistake, not a
    /// setting), or if the thread cannot be spawned.
    ///
    /// ```
    /// let folder = shardcount::Folder::new(std::time::Duration::from_secs(1));
    /// assert_eq!(folder.interval(), std::time::Duration::from_secs(1));
    /// ```
    #[must_use]
    pub fn new(interval: Duration) -> Folder {
        assert!(
            !interval.is_zero(),
            "shardcount: Folder::new(Duration::ZERO): the interval must be positive"
        );
        let interval = interval.max(Self::MIN_INTERVAL);
        let inner = Arc::new(Inner {
            state: Mutex::new(State {
                counters: Vec::new(),
                stop: false,
                passes: 0,
            }),
            wake: Condvar::new(),
        });
        let thread = std::thread::Builder::new()
            .name("shardcount-folder".into())
            .spawn({
                let inner = Arc::clone(&inner);
                move || run(&inner, interval)
            })
            .expect("shardcount: could not spawn the folder thread");
        Folder {
            inner,
            interval,
            thread: Some(thread),
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
        let r = counter.shared_ref();
        lock(&self.inner).counters.push(r);
    }

    /// The interval this folder runs at: the one it was started with, or
    /// [`MIN_INTERVAL`](Self::MIN_INTERVAL) if that was shorter.
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
        lock(&self.inner).passes
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
        lock(&self.inner).counters.len()
    }
}

/// Locks the state; a panic elsewhere cannot leave it inconsistent (every
/// update is a single push, retain or flag store), so poisoning is ignored.
fn lock(inner: &Inner) -> MutexGuard<'_, State> {
    crate::primitive::sync::lock(&inner.state)
}

fn run(inner: &Inner, interval: Duration) {
    let mut state = lock(inner);
    loop {
        // None: an interval too long to represent as an instant means never
        // (until stopped).
        let deadline = Instant::now().checked_add(interval);
        loop {
            if state.stop {
                return;
            }
            state = match deadline {
                None => inner
                    .wake
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner),
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        break;
                    }
                    inner
                        .wake
                        .wait_timeout(state, deadline - now)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
            };
        }
        // Fold without the lock, so the handle's calls never wait for a
        // pass; a counter registered meanwhile is folded from the next one.
        let counters = state.counters.clone();
        drop(state);
        let dropped = counters.iter().filter(|c| !c.fold_all()).count();
        state = lock(inner);
        if dropped > 0 {
            state.counters.retain(SharedRef::is_live);
        }
        state.passes += 1;
    }
}

impl Drop for Folder {
    fn drop(&mut self) {
        lock(&self.inner).stop = true;
        self.inner.wake.notify_all();
        if let Some(t) = self.thread.take() {
            // The thread only folds; if it panicked, there is nothing to
            // report from a destructor.
            let _ = t.join();
        }
    }
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
