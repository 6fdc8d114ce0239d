//! [`Shared<Histogram>`](super::Shared) and
//! [`Shared<LabelledHistogram<L>>`](super::Shared) as OpenMetrics
//! histograms, written once over [`DistributionFamily`].

use super::{Pairs, Shared};
use crate::contract::DistributionFamily;
use crate::histogram::Histogram;
use crate::histogram::{HistogramSnapshot, LabelledHistogram};
use crate::labels::Label;
use ::prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use ::prometheus_client::metrics::{MetricType, TypedMetric};
use std::fmt;

/// A [`Histogram`] is an OpenMetrics histogram.
impl TypedMetric for Shared<Histogram> {
    const TYPE: MetricType = MetricType::Histogram;
}

/// Encodes one read ([`Distribution::read_distribution`](crate::contract::Distribution::read_distribution)) as `_sum`,
/// `_count` and cumulative `_bucket{le=...}` samples
/// ([`HistogramSnapshot::export_buckets`](crate::HistogramSnapshot::export_buckets)):
/// every user bound, or for the default buckets the fixed
/// [`DEFAULT_DURATION_LE`](crate::DEFAULT_DURATION_LE) set (durations:
/// round bounds, each count within the internal bucket at its bound) or
/// [`DEFAULT_LE`](crate::DEFAULT_LE) set (each count exact), then `+Inf`;
/// the same `le` set on every replica whatever the data.
///
/// Values are in the histogram's [`unit`](crate::Histogram::unit): a
/// [`for_durations`](crate::Histogram::for_durations) or
/// [`with_duration_bounds`](crate::Histogram::with_duration_bounds)
/// histogram is written in seconds; register it with
/// `Registry::register_with_unit(.., Unit::Seconds, ..)` (or a name ending
/// in `_seconds`):
///
/// ```
/// use prometheus_client::encoding::text::encode;
/// use prometheus_client::registry::{Registry, Unit};
/// use shardcount::integrations::prometheus_client::Shared;
/// use shardcount::Histogram;
/// use std::time::Duration;
///
/// let latency = Shared::new(Histogram::with_duration_bounds(&[Duration::from_millis(100)]));
/// let mut registry = Registry::default();
/// registry.register_with_unit("latency", "Request latency", Unit::Seconds, latency.clone());
/// latency.record_duration(Duration::from_millis(250));
///
/// let mut text = String::new();
/// encode(&mut text, &registry).unwrap();
/// assert!(text.contains("latency_seconds_sum 0.25\n"));
/// assert!(text.contains("latency_seconds_bucket{le=\"0.1\"} 0\n"));
/// assert!(text.contains("latency_seconds_bucket{le=\"+Inf\"} 1\n"));
/// ```
///
/// In the unit recorded:
///
/// ```
/// use prometheus_client::encoding::text::encode;
/// use prometheus_client::registry::Registry;
/// use shardcount::integrations::prometheus_client::Shared;
/// use shardcount::Histogram;
///
/// let latency = Shared::new(Histogram::with_bounds(&[100, 1000]));
/// let mut registry = Registry::default();
/// registry.register("latency_ns", "Request latency", latency.clone());
/// latency.record(50);
/// latency.record(500);
/// latency.record(5000);
///
/// let mut text = String::new();
/// encode(&mut text, &registry).unwrap();
/// assert!(text.contains("# TYPE latency_ns histogram\n"));
/// assert!(text.contains("latency_ns_sum 5550.0\n"));
/// assert!(text.contains("latency_ns_count 3\n"));
/// assert!(text.contains("latency_ns_bucket{le=\"100.0\"} 1\n"));
/// assert!(text.contains("latency_ns_bucket{le=\"1000.0\"} 2\n"));
/// assert!(text.contains("latency_ns_bucket{le=\"+Inf\"} 3\n"));
/// ```
impl EncodeMetric for Shared<Histogram> {
    fn encode(&self, encoder: MetricEncoder) -> Result<(), fmt::Error> {
        encode_family(&**self, encoder)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// A [`LabelledHistogram`] is an OpenMetrics histogram family.
impl<L: Label> TypedMetric for Shared<LabelledHistogram<L>> {
    const TYPE: MetricType = MetricType::Histogram;
}

/// Encodes every member (every label value, recorded into or not, so the
/// series are the same on every replica) as a histogram with its label
/// pairs, as [`Shared<Histogram>`](Shared) is encoded: the same fixed `le`
/// set for every member, in the family's unit.
///
/// ```
/// use prometheus_client::encoding::text::encode;
/// use prometheus_client::registry::{Registry, Unit};
/// use shardcount::integrations::prometheus_client::Shared;
/// use shardcount::{Label, LabelledHistogram};
/// use std::time::Duration;
///
/// #[derive(Clone, Copy, Label)]
/// enum Route { Home, Checkout }
///
/// let latency = Shared::new(LabelledHistogram::with_duration_bounds(&[Duration::from_millis(10)]));
/// let mut registry = Registry::default();
/// registry.register_with_unit("latency", "Request latency", Unit::Seconds, latency.clone());
/// latency.record_duration(Route::Checkout, Duration::from_millis(4));
///
/// let mut text = String::new();
/// encode(&mut text, &registry).unwrap();
/// assert!(text.contains("latency_seconds_bucket{le=\"0.01\",route=\"checkout\"} 1\n"));
/// assert!(text.contains("latency_seconds_count{route=\"home\"} 0\n"));
/// ```
impl<L: Label> EncodeMetric for Shared<LabelledHistogram<L>> {
    fn encode(&self, encoder: MetricEncoder) -> Result<(), fmt::Error> {
        encode_family(&**self, encoder)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// Every member of `family`, each with its label pairs (none for a lone
/// histogram).
fn encode_family<D: DistributionFamily>(
    family: &D,
    mut encoder: MetricEncoder,
) -> Result<(), fmt::Error> {
    let mut result = Ok(());
    family.read_each_distribution(|texts, s| {
        if result.is_err() {
            return;
        }
        result = match D::LABEL_NAMES {
            [] => encode_one(&mut encoder, &s),
            names => encoder
                .encode_family(&Pairs { names, texts })
                .and_then(|mut member| encode_one(&mut member, &s)),
        };
    });
    result
}

fn encode_one(encoder: &mut MetricEncoder, s: &HistogramSnapshot) -> Result<(), fmt::Error> {
    let buckets: Vec<(f64, u64)> = s
        .export_buckets()
        .map(|(le, n)| (le.unwrap_or(f64::INFINITY), n))
        .collect();
    encoder.encode_histogram::<NoLabelSet>(s.export_sum(), s.count(), &buckets, None)
}
