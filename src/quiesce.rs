//! A thread's owner id from the user's side: [`quiesce`] gives it back
//! before a sleep, so that busy threads get the small ids (and, where
//! [`merges_need_quiesce`], so that merges complete without the thread);
//! [`scrape`] holds one for a run of reads, so that they skip the pin.

/// Whether, in this process, a thread that sleeps after adding to a
/// sharded counter holds [merges](crate::Counter::merge) pending until it
/// adds again, exits or calls [`quiesce`]. Asked once and cached.
///
/// * **`false` on x86_64 Linux** where `/proc/self/task` is readable: a
///   merge reads each such thread's state there, and a thread asleep in
///   the kernel (a parked tokio worker, a sleeping rayon thread, one
///   blocked on a lock, a channel or a socket) is outside every add,
///   since an add makes no system call. So pools need no hook: a merge
///   completes within moments of the burst. Adds pay nothing for this.
///   A thread that runs without adding is sent a `SIGURG` by a merge (at
///   most four), whose handler answers for it (the README says what that
///   asks of a process). One that blocked `SIGURG` when it first added to
///   a sharded counter (a server reading its signals from a `signalfd`
///   blocks them in every thread) is not sent it: while it runs, it holds
///   merges pending as below. (One that blocks it only later may be sent
///   one, which stays pending.)
/// * **`true` elsewhere** (other systems and architectures, no `/proc`,
///   or the variable `SHARDCOUNT_QUIESCE_ONLY` set, which tests use to run
///   this path on Linux, and which a process that serves its own page
///   faults with `userfaultfd` on the counters' memory must set): a merge
///   waits for each thread that holds an owner id, so pool threads should
///   call [`quiesce`] as they park.
///
/// ```
/// // Either answer is correct; what it decides is whether pools need
/// // the park hook for merges to complete.
/// if shardcount::merges_need_quiesce() {
///     println!("call shardcount::quiesce when pool threads park");
/// }
/// ```
pub fn merges_need_quiesce() -> bool {
    !crate::thread::owner::sleepers_seen()
}

/// Declares that the calling thread adds nothing before its next add, so
/// that a pending [`merge`](crate::Counter::merge) need not wait for it,
/// and gives back its owner id.
///
/// A merge frees a counter's shards once every thread that has added to
/// a sharded counter (a `Counter`, `CounterSet`, `Histogram` or labelled
/// type that contention split) has since added to one again, exited,
/// called `quiesce`, or, where [`merges_need_quiesce`] is `false` (x86_64
/// Linux), is asleep in the kernel. So there the call
/// is optional; elsewhere a pool thread that parks when load falls does
/// none of the first three, and without this its pool holds every merge
/// pending (and the memory a burst grew) until it works again. On every
/// system it lets busy threads take the small owner ids, which name the
/// rows every table has. Call it where the pool lets a thread go idle:
///
/// * **tokio**: `Builder::on_thread_park(shardcount::quiesce)`: each
///   worker declares itself idle as it parks, and merges complete while
///   the runtime sleeps, even with a trickle of tasks waking a worker now
///   and then.
/// * **rayon** has no park hook: after a burst, before merging (or before
///   a [`Merger`](crate::Merger) is due), run
///   `pool.broadcast(|_| shardcount::quiesce())`, which runs it once on
///   every worker.
/// * A thread of your own: before it blocks for a long time.
///
/// The thread gives back its owner id (which names its own row in every
/// sharded counter), as its exit would: besides holding merges, an idle
/// thread's id would push busy threads beyond the rows a counter has
/// (one per core), onto shared rows with locked adds. It never changes a
/// count, and calling it at any other moment is harmless: the thread's
/// next add to a sharded counter leases an id again (a process-wide lock,
/// once) and its row cache refills over its next few adds. The crate's
/// own background threads (a `Merger`, a `Folder`, an exporter) call it
/// before each sleep. A thread that has not added to a sharded counter is
/// unaffected.
///
/// ```
/// use shardcount::Counter;
/// use std::sync::mpsc::channel;
///
/// let c = std::sync::Arc::new(Counter::with_max_shards(4));
/// c.split(4);
/// let (go, wait) = channel::<()>();
/// let worker = {
///     let c = c.clone();
///     std::thread::spawn(move || {
///         for () in wait {
///             (0..1000).for_each(|_| c.inc());
///             shardcount::quiesce(); // about to wait for more work
///         }
///     })
/// };
/// go.send(()).unwrap();
/// while c.sum() < 1000 {
///     std::thread::yield_now();
/// }
/// // Once the worker has called quiesce, nothing holds the merge back,
/// // though the worker is alive and waiting.
/// let merged = (0..10_000).any(|_| {
///     c.merge() || {
///         std::thread::sleep(std::time::Duration::from_millis(1));
///         false
///     }
/// });
/// assert!(merged);
/// assert_eq!((c.shards(), c.sum()), (0, 1000));
/// go.send(()).unwrap(); // it adds again, as before
/// drop(go);
/// worker.join().unwrap();
/// assert_eq!(c.sum(), 2000);
/// ```
pub fn quiesce() {
    crate::thread::owner::quiesce();
}

/// Runs `f`, a run of reads (a scrape, an export), with the calling thread
/// holding an owner id, and gives the id back afterwards if it took it
/// (as [`quiesce`] does; also when `f` panics). Returns what `f` returns.
///
/// A thread that holds an id reads a sharded `Counter`, `CounterSet` or
/// histogram without pinning it (a merge waits for the holder instead),
/// which makes a `Counter::sum` of a 2-row counter about 2.3x cheaper
/// than the pinned read of a thread that never adds (measured on an AMD
/// EPYC host). On Linux reading threads get an id of their own at their
/// first read anyway (a reader's: `Counter::sum`), so this matters
/// elsewhere. Inside `f` a merge may have to wait for the scrape to end;
/// nothing else changes: counts, reads' guarantees and adds are as
/// outside. Wrap each scrape, not the thread's whole life: where merges
/// need quiesce, a thread that sleeps holding an id holds merges back.
///
/// ```
/// use shardcount::Counter;
/// static C: Counter = Counter::new();
/// C.split(2);
/// std::thread::spawn(|| C.add(5)).join().unwrap();
/// // An exporter's thread, which never adds: its sums skip the pin.
/// let scraped = std::thread::spawn(|| shardcount::scrape(|| C.sum()))
///     .join()
///     .unwrap();
/// assert_eq!(scraped, 5);
/// assert!(C.merge()); // the scrape gave its id back
/// ```
pub fn scrape<R>(f: impl FnOnce() -> R) -> R {
    /// Gives back an id the scrape took, however `f` ends.
    struct Taken(bool);
    impl Drop for Taken {
        fn drop(&mut self) {
            if self.0 {
                crate::thread::owner::quiesce();
            }
        }
    }
    let taken = Taken(!crate::thread::owner::leased() && crate::thread::owner::lease() != 0);
    let r = f();
    drop(taken);
    r
}

#[cfg(all(test, not(shardcount_loom)))]
mod tests {
    use super::scrape;
    use crate::thread::owner;

    /// Inside a scrape the thread holds an id (its reads skip the pin);
    /// after it, or after a panic in it, it holds none again; a thread
    /// that held one before keeps it.
    #[test]
    fn a_scrape_holds_an_id_inside_and_gives_back_only_what_it_took() {
        std::thread::spawn(|| {
            assert!(!owner::leased());
            assert!(scrape(owner::holds));
            assert!(!owner::leased(), "the id the scrape took is kept");
            let panicked = std::panic::catch_unwind(|| scrape(|| panic!("in f")));
            assert!(panicked.is_err());
            assert!(!owner::leased(), "a panic in the scrape kept the id");
            assert_ne!(owner::lease(), 0);
            assert!(scrape(owner::holds));
            assert!(
                owner::leased(),
                "the scrape gave back an id it did not take"
            );
        })
        .join()
        .unwrap();
    }
}
