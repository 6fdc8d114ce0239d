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
mod register;

pub use exporter::{ExportConfig, ExportStats, Exporter, FlushError, FlushReport};
pub use histogram::HistogramSource;
pub use memory::MemorySink;

use std::error::Error;
use std::fmt;

/// Keys that start with this are reserved for sinks' own bookkeeping (the
/// Redis sink keeps its writers hash at `<prefix>__writers`), so no counter
/// can overwrite it.
///
/// [`Exporter::register`] panics on such a key. A [`Source`] that reports
/// one has that key's deltas dropped and counted in
/// [`ExportStats::rejected`], never delivered.
///
/// ```
/// assert_eq!(shardcount::export::RESERVED_PREFIX, "__");
/// ```
pub const RESERVED_PREFIX: &str = "__";

/// Something the exporter reads: cumulative values under key names.
///
/// `read` calls `f` once per key with the key's cumulative value as of now
/// (wrapping `u64`, as the counters' `sum()`); the exporter ships the change
/// since its previous read of the same key. A key that appears for the first
/// time starts from 0; a key reported more than once in one read counts as
/// the sum of its values. Values must be cumulative (never reset): a value that
/// goes down is shipped as a negative delta. Keys starting with
/// [`RESERVED_PREFIX`] are not delivered: their deltas count as rejected.
///
/// The crate's counter types need none: [`Exporter::register`] takes them
/// (families included). A `Source` is for anything else, registered with
/// [`Exporter::register_source`]; one source may report many keys, and the
/// exporter keeps one cursor per key, so its memory follows the number of
/// keys.
///
/// ```
/// use shardcount::export::{Exporter, MemorySink, Source};
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use std::sync::Arc;
/// use std::time::{Duration, Instant};
///
/// struct Pair([AtomicU64; 2]);
/// impl Source for Pair {
///     fn read(&self, f: &mut dyn FnMut(&str, u64)) {
///         f("left", self.0[0].load(Ordering::Relaxed));
///         f("right", self.0[1].load(Ordering::Relaxed));
///     }
/// }
///
/// let pair = Arc::new(Pair([AtomicU64::new(0), AtomicU64::new(0)]));
/// let sink = MemorySink::new();
/// let exporter = Exporter::new(sink.clone(), Duration::from_secs(60));
/// exporter.register_source(pair.clone());
/// pair.0[1].fetch_add(7, Ordering::Relaxed);
/// exporter.flush(Instant::now() + Duration::from_secs(5)).unwrap();
/// assert_eq!((sink.get("left"), sink.get("right")), (0, 7));
/// ```
pub trait Source: Send + Sync + 'static {
    /// Calls `f` with each key and its cumulative value.
    fn read(&self, f: &mut dyn FnMut(&str, u64));

    /// Whether the source may still change. Once it returns `false`, the
    /// exporter reads it one last time and lets go of it.
    fn is_live(&self) -> bool {
        true
    }
}

impl<S: Source + ?Sized> Source for std::sync::Arc<S> {
    fn read(&self, f: &mut dyn FnMut(&str, u64)) {
        (**self).read(f);
    }
    fn is_live(&self) -> bool {
        (**self).is_live()
    }
}

/// An exporter's identity towards a sink: 128 bits, unique per exporter and
/// process start, shown as 32 hex digits.
///
/// It is read from `/dev/urandom`; where that fails, it is made from the
/// time in nanoseconds, the process id and a per-process counter (unique on
/// one host, not across hosts). A sink keeps the last sequence number
/// applied per writer id, so two exporters must never share one: each
/// [`Exporter`] draws its own.
///
/// ```
/// use shardcount::export::WriterId;
/// let (a, b) = (WriterId::random(), WriterId::random());
/// assert_ne!(a, b);
/// assert_eq!(a.to_string().len(), 32);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct WriterId(pub u128);

impl WriterId {
    /// A fresh id (see the type docs for its source).
    #[must_use]
    pub fn random() -> WriterId {
        use std::io::Read;
        let mut bytes = [0u8; 16];
        let from_os = std::fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut bytes))
            .is_ok();
        if from_os && bytes != [0; 16] {
            return WriterId(u128::from_le_bytes(bytes));
        }
        use crate::primitive::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        // Relaxed: only uniqueness of the returned values matters.
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        WriterId((u128::from(nanos) << 64) | (u128::from(std::process::id()) << 32) | u128::from(n))
    }
}

impl fmt::Display for WriterId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// A numbered set of per-key deltas from one writer: the unit a [`Sink`]
/// applies exactly once.
///
/// ```
/// use shardcount::export::{Batch, WriterId};
/// let b = Batch::new(WriterId(1), 1, vec![("hits".into(), 3), ("misses".into(), -1)]);
/// assert_eq!((b.seq(), b.deltas().len(), b.magnitude()), (1, 2, 4));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    writer: WriterId,
    seq: u64,
    deltas: Vec<(String, i64)>,
}

impl Batch {
    /// A batch numbered `seq` (from 1) from `writer`.
    #[must_use]
    pub fn new(writer: WriterId, seq: u64, deltas: Vec<(String, i64)>) -> Batch {
        Batch {
            writer,
            seq,
            deltas,
        }
    }

    /// The writer that numbered it.
    #[must_use]
    pub fn writer(&self) -> WriterId {
        self.writer
    }

    /// Its sequence number within the writer: 1, 2, ...
    #[must_use]
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The deltas, one per key (no key twice).
    #[must_use]
    pub fn deltas(&self) -> &[(String, i64)] {
        &self.deltas
    }

    /// The sum of the deltas' magnitudes: how many counts the batch moves.
    #[must_use]
    pub fn magnitude(&self) -> u64 {
        // Saturating: gauges near 2^63 could wrap a plain sum.
        self.deltas
            .iter()
            .fold(0u64, |m, (_, d)| m.saturating_add(d.unsigned_abs()))
    }
}

/// What a sink did with one batch (see the module docs for the contract).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Applied now, every delta, atomically.
    Applied,
    /// Applied before (its number is at most the writer's last); unchanged.
    Duplicate,
    /// Its number is past the writer's last + 1: the sink lost batches it
    /// had confirmed. Nothing was changed.
    Gap {
        /// The writer's last applied number, as the sink has it.
        last: u64,
    },
    /// Some keys cannot take their delta (wrong type, not an integer, or
    /// the sum would overflow). Nothing was changed.
    Rejected {
        /// The keys at fault.
        keys: Vec<String>,
    },
}

/// A delivery that failed as a whole (connection lost, timeout, server
/// error): none, some or all of the batches may have been applied.
///
/// ```
/// let e = shardcount::export::SinkError::new("connection refused");
/// assert_eq!(e.to_string(), "connection refused");
/// ```
#[derive(Debug)]
pub struct SinkError(Box<dyn Error + Send + Sync>);

impl SinkError {
    /// Wraps any error (or message).
    pub fn new(e: impl Into<Box<dyn Error + Send + Sync>>) -> SinkError {
        SinkError(e.into())
    }
}

impl fmt::Display for SinkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl Error for SinkError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.0.source()
    }
}

/// Where an [`Exporter`] delivers batches.
///
/// `deliver` gets consecutive batches of one writer, in order, and answers
/// one [`Outcome`] per batch, in order, following the contract in the
/// [module docs](self). It may be called again with batches it has already
/// applied (after an error, or a lost reply), and must then answer
/// `Duplicate` without applying them twice. It should not block much
/// longer than a network timeout: `Exporter::flush` waits for it.
pub trait Sink: Send + 'static {
    /// Applies `batches` (see the trait docs).
    ///
    /// # Errors
    ///
    /// When the delivery failed as a whole; the exporter sends the same
    /// batches again later.
    fn deliver(&mut self, batches: &[Batch]) -> Result<Vec<Outcome>, SinkError>;
}
