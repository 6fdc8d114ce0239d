//! [`HistogramReplay`]: a histogram (or a labelled family) into an
//! OpenTelemetry SDK histogram, by replaying what was recorded since the
//! last replay.

use crate::contract::CountRef;
use crate::contract::DistributionFamily;
use crate::histogram::HistogramUnit;
use crate::histogram::{replay_since, Replayed};
use ::opentelemetry::metrics::{Histogram as OtelHistogram, Meter};
use ::opentelemetry::KeyValue;
use std::borrow::Cow;
use std::fmt;
use std::sync::{Mutex, PoisonError};

/// The SDK instrument: integers as recorded, or seconds.
enum Instrument {
    Integers(OtelHistogram<u64>),
    Seconds(OtelHistogram<f64>),
}

/// A histogram or a labelled family of them
/// ([`DistributionFamily`]), held through a shared pointer, replayed into
/// an OpenTelemetry SDK histogram on each [`replay`](Self::replay) (see
/// [below](#why-a-replay) for why, and what is exact).
///
/// The SDK histogram has the histogram's exported `le` set as its
/// boundaries and its unit (`s` for [`HistogramUnit::Seconds`], values in
/// seconds as `f64`; integers otherwise, as `u64`), one data point per
/// member with its label pairs as attributes. Call `replay` before each
/// collection (before `force_flush`, or on the reader's interval).
///
/// ```
/// use opentelemetry::metrics::MeterProvider;
/// use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
/// use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
/// use shardcount::integrations::opentelemetry::HistogramReplay;
/// use shardcount::Histogram;
/// use std::sync::Arc;
///
/// let exporter = InMemoryMetricExporter::default();
/// let provider = SdkMeterProvider::builder()
///     .with_reader(PeriodicReader::builder(exporter.clone()).build())
///     .build();
/// let sizes = Arc::new(Histogram::with_bounds(&[100, 1000]));
/// let replay = HistogramReplay::new(&provider.meter("app"), "size", sizes.clone());
/// for v in [5, 500, 501, 5000] {
///     sizes.record(v);
/// }
/// assert_eq!(replay.replay(), 4);
/// provider.force_flush().unwrap();
///
/// let metrics = exporter.get_finished_metrics().unwrap();
/// let m = metrics[0].scope_metrics().next().unwrap().metrics().next().unwrap();
/// let AggregatedMetrics::U64(MetricData::Histogram(h)) = m.data() else { panic!() };
/// let p = h.data_points().next().unwrap();
/// assert_eq!((p.count(), p.sum()), (4, 6006));
/// assert_eq!(p.bucket_counts().collect::<Vec<_>>(), [1, 2, 1]);
/// ```
///
/// # Why a replay
///
/// An observable instrument (what [`observe`](super::observe) registers
/// for counters) would be the honest route, but the OpenTelemetry API has
/// no asynchronous histogram, and the Rust SDK (0.33) took no
/// pre-aggregated points either: `MetricProducer` was removed before 1.0,
/// and its data types (`HistogramDataPoint`, `ResourceMetrics`) have no
/// public constructor, so a custom reader cannot add one. What the SDK
/// does take is one synchronous `record` per value. So each replay reads
/// every member, takes the difference from the previous replay's read
/// (the histogram itself is not taken, so other exporters can read it
/// too), and records one value per record counted, each inside the bucket
/// it was counted in, into an SDK histogram whose boundaries are the
/// histogram's exported `le` set.
///
/// The SDK then holds exactly: the count, every bucket count (the values
/// lie in their buckets and the SDK's buckets are ours; at the round
/// `DEFAULT_DURATION_LE` bounds of a `for_durations()` histogram, a value
/// from the internal bucket that holds a bound may land on either side of
/// it, as with the `metrics` replay), and the sum (the
/// values are chosen in their buckets so that they add up to the recorded
/// sum; in seconds, up to `f64` addition). `min` and `max`
/// are only as close as the buckets (within 1/16 with the default ones).
/// The cost is one SDK record per value recorded, at replay time: it
/// moves the SDK's cost off the recording threads, it does not remove it.
pub struct HistogramReplay<P> {
    family: P,
    instrument: Instrument,
    /// Each member's attributes and its read at the last replay.
    members: Mutex<Vec<(Vec<KeyValue>, Replayed)>>,
}

impl<P> HistogramReplay<P>
where
    P: CountRef,
    P::Target: DistributionFamily,
{
    /// Makes the SDK histogram `name` on `meter`, with the family's
    /// exported `le` set as boundaries and its unit. Records made before
    /// this call are replayed by the first [`replay`](Self::replay).
    ///
    /// ```
    /// use opentelemetry::metrics::MeterProvider;
    /// use opentelemetry_sdk::metrics::SdkMeterProvider;
    /// use shardcount::integrations::opentelemetry::HistogramReplay;
    /// static LATENCY: shardcount::Histogram = shardcount::Histogram::for_durations();
    /// let provider = SdkMeterProvider::builder().build();
    /// let r = HistogramReplay::new(&provider.meter("app"), "latency", &LATENCY);
    /// assert_eq!(r.replay(), 0);
    /// ```
    pub fn new(meter: &Meter, name: impl Into<Cow<'static, str>>, family: P) -> Self {
        let mut first = None;
        let mut members = Vec::new();
        family.read_each_distribution(|texts, s| {
            let attrs = P::Target::LABEL_NAMES
                .iter()
                .zip(texts)
                .map(|(k, v)| KeyValue::new(*k, (*v).to_string()))
                .collect();
            members.push((attrs, Replayed::default()));
            first.get_or_insert(s);
        });
        let (bounds, unit) = first.map_or((Vec::new(), HistogramUnit::AsRecorded), |s| {
            let b = s.export_buckets().filter_map(|(le, _)| le).collect();
            (b, s.unit())
        });
        let instrument = match unit {
            HistogramUnit::Seconds => Instrument::Seconds(
                meter
                    .f64_histogram(name)
                    .with_unit("s")
                    .with_boundaries(bounds)
                    .build(),
            ),
            _ => Instrument::Integers(meter.u64_histogram(name).with_boundaries(bounds).build()),
        };
        HistogramReplay {
            family,
            instrument,
            members: Mutex::new(members),
        }
    }

    /// Records into the SDK histogram every value recorded since the last
    /// replay (since [`new`](Self::new) for the first), one SDK record per
    /// value; returns how many. Replays are serialised.
    ///
    /// A record that a read catches halfway (its bucket counted, its
    /// value not yet in the sum, or the reverse) is whole at the next
    /// read. The values of the replay that caught it stay in their
    /// buckets, so their sum can differ from the recorded one by up to
    /// that record's value; the difference is carried, and the next
    /// replay with records enough to carry it brings the SDK's sum back
    /// to the recorded one: the differences never pile up.
    ///
    /// **Do not take or reset a histogram you replay.** The replay tells a
    /// take only by a bucket that fell since the last replay; then it
    /// starts over from what the histogram holds, and the SDK's totals
    /// miss what was taken. A take after which every bucket refilled to at
    /// least its old count before the next replay goes unseen, and the
    /// records made since it are missed too.
    ///
    /// ```
    /// use opentelemetry::metrics::MeterProvider;
    /// use opentelemetry_sdk::metrics::SdkMeterProvider;
    /// use shardcount::integrations::opentelemetry::HistogramReplay;
    /// let h = std::sync::Arc::new(shardcount::Histogram::new());
    /// let provider = SdkMeterProvider::builder().build();
    /// let r = HistogramReplay::new(&provider.meter("app"), "h", h.clone());
    /// h.record(3);
    /// assert_eq!((r.replay(), r.replay()), (1, 0));
    /// ```
    pub fn replay(&self) -> u64 {
        let mut members = self.members.lock().unwrap_or_else(PoisonError::into_inner);
        let mut i = 0;
        let mut replayed = 0u64;
        self.family.read_each_distribution(|_, now| {
            let Some((attrs, kept)) = members.get_mut(i) else {
                return;
            };
            i += 1;
            replayed += replay_since(kept, now, |v| match &self.instrument {
                Instrument::Integers(h) => h.record(v, attrs),
                Instrument::Seconds(h) => h.record(v as f64 / 1e9, attrs),
            });
        });
        replayed
    }
}

impl<P: CountRef> fmt::Debug for HistogramReplay<P>
where
    P::Target: fmt::Debug,
{
    /// The family's `Debug`.
    ///
    /// ```
    /// use opentelemetry::metrics::MeterProvider;
    /// use opentelemetry_sdk::metrics::SdkMeterProvider;
    /// use shardcount::integrations::opentelemetry::HistogramReplay;
    /// let provider = SdkMeterProvider::builder().build();
    /// let r = HistogramReplay::new(&provider.meter("app"), "h", std::sync::Arc::new(shardcount::Histogram::new()));
    /// assert!(format!("{r:?}").starts_with("HistogramReplay { family: Histogram {"));
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HistogramReplay")
            .field("family", &&*self.family)
            .finish_non_exhaustive()
    }
}
