//! Shipping counts out of the process: an [`Exporter`] thread reads
//! registered counters, turns what they gained since the last read into
//! numbered batches of per-key deltas, and hands the batches to a [`Sink`]
//! that applies each batch exactly once.
//!
//! * What is read: any counter type, registered with
//!   [`Exporter::register`] as a `static` or an `Arc` (a
//!   [`CountRef`](crate::contract::CountRef)); a counter family (`CounterSet`, `CounterMap`) is one
//!   registration that exports every member, under keys made of the
//!   registration's key and the member's label. A [`Source`] is anything
//!   else that reports cumulative per-key values
//!   ([`Exporter::register_source`]).
//! * [`Sink`]: where batches go. [`MemorySink`] keeps totals in process (for
//!   tests and single-process use); `redis::RedisSink` (feature `redis`)
//!   folds them into Redis with a script that applies a batch exactly once.
//!
//! # How deltas are taken (no loss, nothing counted twice)
//!
//! Nothing here runs on the add path, and no fold lock is taken: the
//! exporter thread calls each source's read (for a counter, its exact
//! read, [`Count::read`](crate::Count::read): the same loads any reader
//! does) and keeps, per source and key, a *cursor*: the cumulative value
//! it already turned into deltas. The delta
//! it ships is `value - cursor` (wrapping, as a signed 64-bit number), and
//! the cursor moves to `value`. The deltas of a key telescope: whatever
//! reads happen in between, the deltas shipped so far add up to the last
//! value read. Once the counter is quiescent, a final read (a
//! [`flush`](Exporter::flush)) ships exactly what is left.
//!
//! A key that a whole read of its source leaves out is gone: its cursor
//! is dropped (so memory follows the keys a source has now), and what was
//! shipped for it stays in the sink. A key that comes back later counts
//! from zero on top of it. For a [`CounterMap`](crate::CounterMap), that
//! is a key removed (its adds since the last read go with the total
//! [`remove`](crate::CounterMap::remove) returns) or evicted by
//! [`evict_idle`](crate::CounterMap::evict_idle) (reported at its final
//! total until the next call, so nothing is left behind when the map is
//! read in between). A key removed and made again between two reads is
//! one key whose value fell, shipped as a negative delta, as after a
//! [`take`](crate::Counter::take); so is an evicted key that comes back
//! after the next `evict_idle` call but before the next read.
//!
//! # Batches, sequence numbers and exactly-once effect
//!
//! Deltas collected from sources are coalesced per key into `pending`, so
//! memory follows the number of distinct keys, never the number of adds:
//! one cursor per key, at most one pending and one frozen delta per key,
//! and the batches confirmed in the last [`ExportConfig::retain`] (one per
//! changed key per delivery, so about keys × deliveries in that window).
//! When nothing is in flight, the exporter freezes up to
//! [`ExportConfig::pipeline`] batches of at most [`ExportConfig::batch_keys`]
//! keys each from `pending`, numbers them with consecutive sequence numbers
//! (1, 2, ...) under its [`WriterId`], and delivers them together. A frozen
//! batch never changes (its number stands for its content) until the sink
//! confirms it; deltas arriving meanwhile coalesce into `pending` for later
//! batches. On any error the frozen batches are kept and sent again, after a
//! back-off with jitter (10 ms doubling up to 5 s), so delivery is
//! at-least-once; the sink's contract (below) turns that into an
//! exactly-once effect.
//!
//! # The sink's contract
//!
//! For each writer the sink stores the last sequence number it applied
//! (`last`, 0 for a writer it has never seen). For a batch numbered `seq`:
//!
//! * `seq <= last`: already applied (a resend after a lost reply); change
//!   nothing, answer [`Outcome::Duplicate`];
//! * `seq > last + 1`: a gap: the sink lost batches it had confirmed (a
//!   store restored from an old state); change nothing, answer
//!   [`Outcome::Gap`]. The exporter counts it ([`ExportStats::gaps`]),
//!   takes a fresh writer id, and sends again, renumbered from 1, the
//!   confirmed batches after `last` that it still retains (it keeps
//!   confirmed batches for [`ExportConfig::retain`], 3 s by default) ahead
//!   of the frozen ones. Lost batches older than that are counted in
//!   [`ExportStats::lost`];
//! * `seq == last + 1`: validate every key first; if any cannot take the
//!   delta, change nothing and answer [`Outcome::Rejected`] with those keys
//!   (the exporter drops their deltas, counted in
//!   [`ExportStats::rejected`], and sends the rest under the same number);
//!   else apply every delta and set `last = seq`, all atomically, and answer
//!   [`Outcome::Applied`].
//!
//! # What is exact, and what a crash loses
//!
//! Once a [`flush`](Exporter::flush) returns `Ok` at quiescence, the sink
//! holds exactly the sum of every add to every registered counter, however
//! often deliveries failed, replies were lost or the sink restarted, as
//! long as the sink keeps what it confirmed, or loses only batches it
//! confirmed within [`ExportConfig::retain`] (then they are sent again).
//! [`ExportStats::lost`] says when that was not enough. A process killed with `kill -9` loses
//! what it had not shipped: the counts added since the exporter's last
//! successful delivery, about one interval's worth when the sink is
//! reachable. Batches it had frozen but not had confirmed may or may not be
//! applied, each whole or not at all.
//!
//! # Example
//!
//! ```
//! use shardcount::export::{Exporter, MemorySink};
//! use shardcount::RoughCounter;
//! use std::time::{Duration, Instant};
//!
//! static HITS: RoughCounter = RoughCounter::new();
//! let sink = MemorySink::new();
//! let exporter = Exporter::new(sink.clone(), Duration::from_millis(10));
//! exporter.register("hits", &HITS);
//! HITS.add(5);
//! let report = exporter.flush(Instant::now() + Duration::from_secs(5)).unwrap();
//! assert_eq!(report.undelivered, 0);
//! assert_eq!(sink.get("hits"), 5);
//! assert_eq!(exporter.delivered(), 5);
//! ```

mod exporter;
mod histogram;
mod memory;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod redis;
#[cfg(feature = "redis-cluster")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis-cluster")))]
pub mod redis_cluster;
mod register;
mod sink;
mod source;

pub use exporter::{ExportConfig, ExportStats, Exporter, FlushError, FlushReport};
pub use histogram::HistogramSource;
pub use memory::MemorySink;
pub use sink::{Batch, Outcome, Sink, SinkError, WriterId};
pub use source::{Source, RESERVED_PREFIX};
