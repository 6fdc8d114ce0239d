//! `Merger`: merges watched counters back to their idle size once
//! contention has stayed away for a while, on the crate's one kind of
//! background thread (`worker::Worker`).
//!
//! # Protocol
//!
//! The handle and the pass share a `Mutex<State>`: the watched counters,
//! each with the per-row totals the last pass read and when it last saw
//! two or more rows change. A pass takes the list out of the mutex, works
//! on it unlocked (reads each counter's rows as a sum does, merges the
//! quiet ones, in one batch of `shard::merge_all`) and puts it back with
//! any counters watched meanwhile, so the handle's calls never wait for a
//! pass. No atomics of its own.
//!
//! *Contention*, once a counter has shards, is two or more of its rows
//! changing between two passes: each adding thread writes its own row,
//! so one thread adding alone (which the base word serves as well)
//! changes one. A counter is merged when no pass has seen that for `idle`;
//! a pending merge is tried again at the next pass.

use crate::contract::CountRef;
use crate::counter::Counter;
use crate::histogram::{Histogram, LabelledHistogram};
use crate::labels::{Label, LabelledCounter};
use crate::map::CounterMap;
use crate::primitive::sync::{lock, Arc, Mutex};
use crate::set::CounterSet;
use crate::shard::merge_all;
use crate::worker::{self, Worker};
use sealed::Batch;
use std::fmt;
use std::hash::Hash;
use std::time::{Duration, Instant};

mod sealed {
    use crate::shard::Part;

    /// The parts of a batch of merges (`shard::merge_all`): public only in
    /// name, as the trait that takes it, so no one outside can build one.
    pub struct Batch<'a>(pub(crate) Vec<Part<'a>>);

    impl std::fmt::Debug for Batch<'_> {
        /// How many parts it holds.
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_tuple("Batch").field(&self.0.len()).finish()
        }
    }

    pub trait Sealed {
        /// Appends the parts a batch merges this counter as (one revocation
        /// and two grace periods for the whole batch), or says `false`:
        /// merge it alone, with `Mergeable::merge`.
        fn merge_parts<'a>(&'a self, _batch: &mut Batch<'a>) -> bool {
            false
        }
    }
}

/// A counter type whose shards [`merge`](Mergeable::merge) folds back: the
/// types a [`Merger`] watches.
///
/// Sealed: implemented for [`Counter`], [`CounterSet`], [`Histogram`],
/// [`LabelledCounter`], [`LabelledHistogram`] and [`CounterMap`].
///
/// ```
/// use shardcount::{Counter, Mergeable};
/// fn done(c: &impl Mergeable) -> bool {
///     c.merge()
/// }
/// assert!(done(&Counter::new()));
/// ```
pub trait Mergeable: sealed::Sealed + Send + Sync {
    /// Folds the shards back and frees them: the type's own `merge`.
    fn merge(&self) -> bool;

    /// Appends one total per row (owned and shared, every table of the
    /// chain, in a fixed order while the chain does not change): what a
    /// [`Merger`] compares between passes.
    #[doc(hidden)]
    fn row_totals(&self, out: &mut Vec<u64>);
}

impl sealed::Sealed for Counter {
    fn merge_parts<'a>(&'a self, batch: &mut Batch<'a>) -> bool {
        batch.0.push(self.merge_part());
        true
    }
}
impl Mergeable for Counter {
    fn merge(&self) -> bool {
        Counter::merge(self)
    }
    fn row_totals(&self, out: &mut Vec<u64>) {
        self.row_totals(out);
    }
}

impl sealed::Sealed for CounterSet {
    fn merge_parts<'a>(&'a self, batch: &mut Batch<'a>) -> bool {
        batch.0.extend(self.merge_part());
        true
    }
}
impl Mergeable for CounterSet {
    fn merge(&self) -> bool {
        CounterSet::merge(self)
    }
    fn row_totals(&self, out: &mut Vec<u64>) {
        self.row_totals(out);
    }
}

impl sealed::Sealed for Histogram {
    fn merge_parts<'a>(&'a self, batch: &mut Batch<'a>) -> bool {
        batch.0.extend(self.rows().merge_part());
        true
    }
}
impl Mergeable for Histogram {
    fn merge(&self) -> bool {
        Histogram::merge(self)
    }
    fn row_totals(&self, out: &mut Vec<u64>) {
        self.rows().row_totals(out);
    }
}

impl<L: Label> sealed::Sealed for LabelledCounter<L> {
    fn merge_parts<'a>(&'a self, batch: &mut Batch<'a>) -> bool {
        batch.0.extend(self.rows().merge_part());
        true
    }
}
impl<L: Label> Mergeable for LabelledCounter<L> {
    fn merge(&self) -> bool {
        LabelledCounter::merge(self)
    }
    fn row_totals(&self, out: &mut Vec<u64>) {
        self.rows().row_totals(out);
    }
}

impl<L: Label> sealed::Sealed for LabelledHistogram<L> {
    fn merge_parts<'a>(&'a self, batch: &mut Batch<'a>) -> bool {
        batch
            .0
            .extend(self.rows().iter().filter_map(CounterSet::merge_part));
        true
    }
}
impl<L: Label> Mergeable for LabelledHistogram<L> {
    fn merge(&self) -> bool {
        LabelledHistogram::merge(self)
    }
    fn row_totals(&self, out: &mut Vec<u64>) {
        for set in self.rows() {
            set.row_totals(out);
        }
    }
}

// Alone: its merge holds the map's index lock, so no chunk is freed
// while it runs.
impl<K: Hash + Eq + Clone + Send + Sync> sealed::Sealed for CounterMap<K> {}
impl<K: Hash + Eq + Clone + Send + Sync> Mergeable for CounterMap<K> {
    fn merge(&self) -> bool {
        CounterMap::merge(self)
    }
    fn row_totals(&self, out: &mut Vec<u64>) {
        self.row_totals(out);
    }
}

/// A watched counter, behind the [`CountRef`] that keeps it alive.
trait Watch: Send {
    fn row_totals(&self, out: &mut Vec<u64>);
    fn merge(&self) -> bool;
    fn merge_parts<'a>(&'a self, batch: &mut Batch<'a>) -> bool;
}

impl<R> Watch for R
where
    R: CountRef,
    R::Target: Mergeable,
{
    fn row_totals(&self, out: &mut Vec<u64>) {
        (**self).row_totals(out);
    }
    fn merge(&self) -> bool {
        (**self).merge()
    }
    fn merge_parts<'a>(&'a self, batch: &mut Batch<'a>) -> bool {
        sealed::Sealed::merge_parts(&**self, batch)
    }
}

/// One watched counter and what the passes saw of it.
struct Watched {
    target: Box<dyn Watch>,
    quiet: Quiet,
}

#[derive(Default)]
struct State {
    /// The counters, but for those a pass has taken out to look at.
    watched: Vec<Watched>,
    /// How many counters were watched: `watched.len()` but for a pass's.
    count: usize,
    /// Merges completed, for `merges()`.
    merges: u64,
    /// Merges the last pass left pending, for `pending()`.
    pending: usize,
}

/// A background thread that merges watched counters (see [`Mergeable`])
/// once contention has stayed away from them for `idle`: memory follows
/// load without a call to `merge` in the caller's code.
///
/// Every `idle / 4` (at least 1 ms) it reads each watched counter's rows,
/// as a sum does. Once a counter has shards, contention is two or more of
/// its rows changing between two passes (each adding thread writes its
/// own row); when no pass has seen that for `idle`, it calls `merge`, and
/// again at later passes while the merge is pending (see
/// [`Counter::merge`]: on x86_64 Linux a merge completes while the threads
/// that added sleep; elsewhere it waits for every thread that added to a
/// sharded counter to add again, exit or call [`quiesce`](crate::quiesce()),
/// so in a tokio or rayon service make the pool's idle workers call it,
/// or merges stay [`pending`](Self::pending)). A counter that grows again is
/// merged again after its next quiet `idle`. Dropping the `Merger` stops
/// the thread and waits for it.
///
/// Cost: one read of each watched counter's rows per pass, on the
/// merger's thread; nothing on the add path. The counters a pass finds
/// quiet are merged in one batch: one revocation of the threads' row ids
/// and two grace periods for all of them, not for each (a [`CounterMap`]
/// merges alone, under its own lock).
///
/// ```
/// use shardcount::{Counter, Merger};
/// use std::time::Duration;
///
/// static HITS: Counter = Counter::with_max_shards(4);
/// let merger = Merger::new(Duration::from_millis(20));
/// merger.watch(&HITS);
/// HITS.split(4); // as a burst would grow it
/// std::thread::spawn(|| HITS.inc()).join().unwrap();
/// while merger.merges() == 0 {
///     std::thread::sleep(Duration::from_millis(5)); // quiet: merged soon
/// }
/// assert_eq!(HITS.shards(), 0);
/// assert_eq!(HITS.sum(), 1);
/// ```
pub struct Merger {
    state: Arc<Mutex<State>>,
    idle: Duration,
    /// Stops and joins the thread when the merger is dropped.
    _worker: Worker,
}

impl Merger {
    /// Starts the background thread: counters watched by it are merged
    /// once no pass has seen contention on them for `idle`. Passes run
    /// every `idle / 4`, at least every 1 ms (as every background thread
    /// of this crate: [`Folder::MIN_INTERVAL`](crate::Folder::MIN_INTERVAL)).
    ///
    /// ```
    /// let m = shardcount::Merger::new(std::time::Duration::from_secs(10));
    /// assert_eq!(m.idle(), std::time::Duration::from_secs(10));
    /// ```
    #[must_use]
    pub fn new(idle: Duration) -> Merger {
        let state = Arc::new(Mutex::new(State::default()));
        let shared = Arc::clone(&state);
        let worker = Worker::spawn(
            "shardcount-merger",
            worker::effective(idle / 4),
            move || pass(&shared, idle),
        );
        Merger {
            state,
            idle,
            _worker: worker,
        }
    }

    /// Watches `target`: a `&'static` counter or an `Arc` of one (a
    /// [`CountRef`]), kept until the merger is dropped.
    ///
    /// ```
    /// use shardcount::{CounterSet, Merger};
    /// use std::sync::Arc;
    ///
    /// let m = Merger::new(std::time::Duration::from_secs(1));
    /// let set = Arc::new(CounterSet::new(4));
    /// m.watch(Arc::clone(&set));
    /// assert_eq!(m.watched(), 1);
    /// ```
    pub fn watch<R>(&self, target: R)
    where
        R: CountRef,
        R::Target: Mergeable,
    {
        let mut s = lock(&self.state);
        s.watched.push(Watched {
            target: Box::new(target),
            quiet: Quiet::new(Instant::now()),
        });
        s.count += 1;
    }

    /// How many counters it watches, a pass running or not.
    ///
    /// ```
    /// let m = shardcount::Merger::new(std::time::Duration::from_secs(1));
    /// assert_eq!(m.watched(), 0);
    /// ```
    #[must_use]
    pub fn watched(&self) -> usize {
        lock(&self.state).count
    }

    /// How many merges it has completed, added when the pass that did them
    /// ends: to wait for a merge, wait on this.
    ///
    /// ```
    /// let m = shardcount::Merger::new(std::time::Duration::from_secs(1));
    /// assert_eq!(m.merges(), 0);
    /// ```
    #[must_use]
    pub fn merges(&self) -> u64 {
        lock(&self.state).merges
    }

    /// How many watched counters the last pass found quiet but could not
    /// merge yet: their merge is pending (see [`Counter::merge`]). Where
    /// [`merges_need_quiesce`](crate::merges_need_quiesce()) is `true`, a
    /// count that stays above zero while the service idles means its
    /// pool's workers do not call [`quiesce`](crate::quiesce()) when they
    /// park; on x86_64 Linux it is a thread that added and keeps running
    /// without adding through its slow path (busy with other work).
    ///
    /// ```
    /// let m = shardcount::Merger::new(std::time::Duration::from_secs(1));
    /// assert_eq!(m.pending(), 0);
    /// ```
    #[must_use]
    pub fn pending(&self) -> usize {
        lock(&self.state).pending
    }

    /// The quiet time after which a watched counter is merged.
    #[must_use]
    pub fn idle(&self) -> Duration {
        self.idle
    }
}

impl fmt::Debug for Merger {
    /// The idle time, the counters watched, the merges done and pending.
    ///
    /// ```
    /// let m = shardcount::Merger::new(std::time::Duration::from_secs(1));
    /// assert_eq!(
    ///     format!("{m:?}"),
    ///     "Merger { idle: 1s, watched: 0, merges: 0, pending: 0 }"
    /// );
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = lock(&self.state);
        f.debug_struct("Merger")
            .field("idle", &self.idle)
            .field("watched", &state.count)
            .field("merges", &state.merges)
            .field("pending", &state.pending)
            .finish()
    }
}

/// One pass: see the module docs.
fn pass(state: &Mutex<State>, idle: Duration) {
    let mut watched = std::mem::take(&mut lock(state).watched);
    let now = Instant::now();
    let quiet: Vec<usize> = (0..watched.len())
        .filter(|&i| {
            let w = &mut watched[i];
            let target = &w.target;
            w.quiet.look(|out| target.row_totals(out), now, idle)
        })
        .collect();
    let done = merge_quiet(&watched, &quiet);
    let merges = done.iter().filter(|&&d| d).count() as u64;
    let pending = done.len() - merges as usize;
    for (&i, _) in quiet.iter().zip(&done).filter(|(_, &d)| d) {
        watched[i].quiet.merged();
    }
    let mut s = lock(state);
    // Counters watched during the pass came after the ones taken out.
    watched.append(&mut s.watched);
    s.watched = watched;
    s.merges += merges;
    s.pending = pending;
}

/// Merges the quiet counters (`quiet`, indexes into `watched`): those that
/// can, in one batch (one revocation and two grace periods for all, not
/// each), the others alone. Whether each is done, in `quiet`'s order.
fn merge_quiet(watched: &[Watched], quiet: &[usize]) -> Vec<bool> {
    let mut batch = Batch(Vec::new());
    // Each table once (a counter may be watched twice): its first part.
    let mut first = std::collections::HashMap::new();
    // Each quiet counter's parts by index, or `None`: merged alone.
    let spans: Vec<Option<Vec<usize>>> = quiet
        .iter()
        .map(|&i| {
            let start = batch.0.len();
            if !watched[i].target.merge_parts(&mut batch) {
                return None;
            }
            let mut mine = Vec::new();
            let mut k = start;
            while k < batch.0.len() {
                let table = std::ptr::from_ref(batch.0[k].table);
                match first.get(&table) {
                    Some(&at) => {
                        mine.push(at);
                        batch.0.remove(k);
                    }
                    None => {
                        first.insert(table, k);
                        mine.push(k);
                        k += 1;
                    }
                }
            }
            Some(mine)
        })
        .collect();
    let parts = &mut batch.0;
    if !parts.is_empty() {
        merge_all(parts);
    }
    quiet
        .iter()
        .zip(spans)
        .map(|(&i, span)| match span {
            Some(mine) => mine.iter().all(|&k| parts[k].done),
            None => watched[i].target.merge(),
        })
        .collect()
}

/// What a pass remembers of one sharded counter, to tell when contention
/// has left it (module docs): its row totals at the last look, and when a
/// look last saw two or more of them change. A `Merger`'s watched
/// counters, and the `metrics` layer's keys, each keep one.
pub(crate) struct Quiet {
    last: Vec<u64>,
    scratch: Vec<u64>,
    busy_at: Instant,
}

impl Quiet {
    pub(crate) fn new(now: Instant) -> Quiet {
        Quiet {
            last: Vec::new(),
            scratch: Vec::new(),
            busy_at: now,
        }
    }

    /// Looks at the counter whose row totals `read` appends (none: no
    /// shards), at `now`: whether no look has seen two of its rows change
    /// for `idle`, so that it should be merged (again at the next look
    /// while its merge is pending).
    pub(crate) fn look(
        &mut self,
        read: impl FnOnce(&mut Vec<u64>),
        now: Instant,
        idle: Duration,
    ) -> bool {
        let rows = &mut self.scratch;
        rows.clear();
        read(rows);
        if rows.is_empty() {
            // No shards: nothing to merge; quiet from here.
            self.last.clear();
            self.busy_at = now;
            return false;
        }
        let changed = if rows.len() == self.last.len() {
            rows.iter().zip(&self.last).filter(|(a, b)| a != b).count()
        } else {
            usize::MAX // grown (or first seen): busy
        };
        std::mem::swap(&mut self.last, rows);
        if changed >= 2 {
            self.busy_at = now;
            return false;
        }
        now.saturating_duration_since(self.busy_at) >= idle
    }

    /// The counter was merged: the next shards it grows are new.
    pub(crate) fn merged(&mut self) {
        self.last.clear();
    }
}
