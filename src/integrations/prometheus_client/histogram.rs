//! [`Shared<Histogram>`](super::Shared) as an OpenMetrics histogram.

use super::Shared;
use crate::contract::Distribution;
use crate::Histogram;
use ::prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use ::prometheus_client::metrics::{MetricType, TypedMetric};
use std::fmt;

/// A [`Histogram`] is an OpenMetrics histogram.
impl TypedMetric for Shared<Histogram> {
    const TYPE: MetricType = MetricType::Histogram;
}

/// Encodes one read ([`Distribution::read_distribution`]) as `_sum`,
/// `_count` and cumulative `_bucket{le=...}` samples, in the unit recorded
/// (nanoseconds for `record_duration`). With user bounds every bound is a
/// bucket; with the default buckets, the ones holding records and `+Inf`
/// (so the `le` set follows the data, and each cumulative count is exact).
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
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), fmt::Error> {
        let s = (**self).read_distribution();
        let buckets: Vec<(f64, u64)> = s
            .le_buckets()
            .map(|(le, n)| (le.map_or(f64::INFINITY, |le| le as f64), n))
            .collect();
        encoder.encode_histogram::<NoLabelSet>(s.sum() as f64, s.count(), &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}
