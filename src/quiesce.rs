//! [`quiesce`]: a thread about to sleep lets merges complete without it.

/// Declares that the calling thread adds nothing before its next add, so
/// that a pending [`merge`](crate::Counter::merge) need not wait for it.
///
/// A merge frees a counter's shards once every thread that has added to
/// a sharded counter (a `Counter`, `CounterSet`, `Histogram` or labelled
/// type that contention split) has since added to one again, exited, or
/// called `quiesce`. A pool thread that parks when load falls does none
/// of the first two, so without this its pool holds every merge pending
/// (and the memory a burst grew) until it works again. Call it where the
/// pool lets a thread go idle:
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
