//! What the exporter reads besides the crate's counters: a [`Source`] of
//! cumulative values under key names, and the key prefix no source or
//! counter may use.

/// Keys that start with this are reserved for sinks' own bookkeeping (the
/// Redis sink keeps its writers hash at `<prefix>__writers`), so no counter
/// can overwrite it.
///
/// [`Exporter::register`] panics on such a key. A [`Source`] that reports
/// one has that key's deltas dropped and counted in
/// [`ExportStats::rejected`], never delivered.
///
/// [`Exporter::register`]: super::exporter::Exporter::register
/// [`ExportStats::rejected`]: super::exporter::ExportStats::rejected
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
/// [`Exporter::register`]: super::exporter::Exporter::register
/// [`Exporter::register_source`]: super::exporter::Exporter::register_source
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
