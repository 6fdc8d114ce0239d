//! [`HistogramSource`]: a histogram's count and sum as two exporter keys.

use super::source::{Source, RESERVED_PREFIX};
use crate::contract::CountRef;
use crate::contract::Distribution;

/// A [`Source`] that reports a histogram (any [`Distribution`], held
/// through an `Arc` or a `&'static`) as two cumulative keys, `{key}_count`
/// and `{key}_sum` (the sum modulo 2<sup>64</sup>, in the unit recorded),
/// read together once per export. The buckets are not exported: a sink
/// holds totals per key.
///
/// Register it with
/// [`Exporter::register_source`](super::exporter::Exporter::register_source).
/// It is always live: the exporter keeps it until the exporter goes.
///
/// ```
/// use shardcount::export::{Exporter, HistogramSource, MemorySink};
/// use shardcount::Histogram;
/// use std::sync::Arc;
/// use std::time::{Duration, Instant};
///
/// let latency = Arc::new(Histogram::new());
/// let sink = MemorySink::new();
/// let exporter = Exporter::new(sink.clone(), Duration::from_secs(60));
/// exporter.register_source(HistogramSource::new("latency_ns", latency.clone()));
/// latency.record(300);
/// latency.record(700);
/// exporter.flush(Instant::now() + Duration::from_secs(5)).unwrap();
/// assert_eq!(sink.get("latency_ns_count"), 2);
/// assert_eq!(sink.get("latency_ns_sum"), 1000);
/// ```
#[derive(Debug)]
pub struct HistogramSource<P> {
    count_key: String,
    sum_key: String,
    histogram: P,
}

impl<P> HistogramSource<P>
where
    P: CountRef,
    P::Target: Distribution,
{
    /// Reports `histogram` as `{key}_count` and `{key}_sum`.
    ///
    /// # Panics
    ///
    /// If `key` starts with the reserved prefix `__`, or is `"_"` (its
    /// keys `__count` and `__sum` would be reserved), naming it.
    ///
    /// ```
    /// use shardcount::export::HistogramSource;
    /// let s = HistogramSource::new("rtt_ns", std::sync::Arc::new(shardcount::Histogram::new()));
    /// assert_eq!(s.keys(), ("rtt_ns_count", "rtt_ns_sum"));
    /// ```
    #[track_caller]
    pub fn new(key: &str, histogram: P) -> Self {
        assert!(
            !key.starts_with(RESERVED_PREFIX) && key != "_",
            "shardcount: HistogramSource::new({key:?}): keys starting with `__` are reserved \
             for sinks' bookkeeping"
        );
        HistogramSource {
            count_key: format!("{key}_count"),
            sum_key: format!("{key}_sum"),
            histogram,
        }
    }

    /// The two keys it reports, count first.
    ///
    /// ```
    /// use shardcount::export::HistogramSource;
    /// let s = HistogramSource::new("x", std::sync::Arc::new(shardcount::Histogram::new()));
    /// assert_eq!(s.keys().1, "x_sum");
    /// ```
    #[must_use]
    pub fn keys(&self) -> (&str, &str) {
        (&self.count_key, &self.sum_key)
    }
}

impl<P> Source for HistogramSource<P>
where
    P: CountRef,
    P::Target: Distribution,
{
    fn read(&self, f: &mut dyn FnMut(&str, u64)) {
        let s = self.histogram.read_distribution();
        f(&self.count_key, s.count());
        f(&self.sum_key, s.sum());
    }
}
