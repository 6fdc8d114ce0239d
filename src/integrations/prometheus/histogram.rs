//! [`CollectedHistogram`]: a [`Histogram`](crate::Histogram) or a
//! [`LabelledHistogram`](crate::LabelledHistogram) as a tikv `prometheus`
//! histogram family.

use crate::contract::CountRef;
use crate::contract::DistributionFamily;
use ::prometheus::core::{Collector, Desc, Describer, Opts};
use ::prometheus::proto::{self, MetricFamily, MetricType};
use ::prometheus::Result;
use std::fmt;

/// A `Collector` for a histogram or a labelled family of them
/// ([`DistributionFamily`]) held through a shared pointer (an `Arc`, or a
/// `&'static`): each scrape reads each member once and returns one
/// histogram family, one metric per member with its label pairs (every
/// label value, recorded into or not),
/// with `_bucket{le=...}` (cumulative), `_sum` and `_count`. The `le` set
/// is every user bound, or for the default buckets the fixed
/// [`DEFAULT_DURATION_LE`](crate::DEFAULT_DURATION_LE) set (durations)
/// or [`DEFAULT_LE`](crate::DEFAULT_LE) set, then `+Inf`: the same on every
/// replica whatever the data
/// ([`HistogramSnapshot::export_buckets`](crate::HistogramSnapshot::export_buckets)).
/// Values are in the histogram's [`unit`](crate::Histogram::unit): seconds
/// for a [`for_durations`](crate::Histogram::for_durations) or
/// [`with_duration_bounds`](crate::Histogram::with_duration_bounds)
/// histogram (name it `..._seconds`), else as recorded; `f64`, as the
/// `prometheus` data model has them: exact up to 2<sup>53</sup>.
///
/// ```
/// use prometheus::{Registry, TextEncoder};
/// use shardcount::integrations::prometheus::CollectedHistogram;
/// use shardcount::Histogram;
/// use std::time::Duration;
///
/// static LATENCY: Histogram = Histogram::for_durations();
/// let registry = Registry::new();
/// let c = CollectedHistogram::new("latency_seconds", "Request latency", &LATENCY).unwrap();
/// registry.register(Box::new(c)).unwrap();
/// LATENCY.record_duration(Duration::from_millis(1500));
///
/// let text = TextEncoder::new().encode_to_string(&registry.gather()).unwrap();
/// assert!(text.contains("latency_seconds_sum 1.5\n"));
/// assert_eq!(text.matches("latency_seconds_bucket{").count(), 17); // 16 round bounds, +Inf
/// assert!(text.contains("latency_seconds_bucket{le=\"1\"} 0\n"));
/// assert!(text.contains("latency_seconds_bucket{le=\"2.5\"} 1\n"));
/// ```
///
/// In the unit recorded, with user bounds:
///
/// ```
/// use prometheus::{Registry, TextEncoder};
/// use shardcount::integrations::prometheus::CollectedHistogram;
/// use shardcount::Histogram;
/// use std::sync::Arc;
///
/// let latency = Arc::new(Histogram::with_bounds(&[100, 1000]));
/// let registry = Registry::new();
/// let c = CollectedHistogram::new("latency_ns", "Request latency", latency.clone()).unwrap();
/// registry.register(Box::new(c)).unwrap();
/// latency.record(50);
/// latency.record(5000);
///
/// let text = TextEncoder::new().encode_to_string(&registry.gather()).unwrap();
/// assert!(text.contains("# TYPE latency_ns histogram\n"));
/// assert!(text.contains("latency_ns_bucket{le=\"100\"} 1\n"));
/// assert!(text.contains("latency_ns_bucket{le=\"1000\"} 1\n"));
/// assert!(text.contains("latency_ns_bucket{le=\"+Inf\"} 2\n"));
/// assert!(text.contains("latency_ns_sum 5050\n"));
/// assert!(text.contains("latency_ns_count 2\n"));
/// ```
pub struct CollectedHistogram<P> {
    histogram: P,
    desc: Desc,
}

impl<P> CollectedHistogram<P>
where
    P: CountRef,
    P::Target: DistributionFamily,
{
    /// A collector named `name` (used as given) with `help`.
    ///
    /// # Errors
    ///
    /// If `prometheus` refuses the name or help (as `Opts::describe`).
    ///
    /// ```
    /// use shardcount::integrations::prometheus::CollectedHistogram;
    /// static H: std::sync::LazyLock<shardcount::Histogram> =
    ///     std::sync::LazyLock::new(shardcount::Histogram::new);
    /// assert!(CollectedHistogram::new("rtt_ns", "Round trips", &*H).is_ok());
    /// assert!(CollectedHistogram::new("bad name", "x", &*H).is_err());
    /// ```
    pub fn new(name: impl Into<String>, help: impl Into<String>, histogram: P) -> Result<Self> {
        Self::with_opts(Opts::new(name, help), histogram)
    }

    /// A collector from `Opts` (namespace, constant labels); variable
    /// labels are refused (a family's label names are its own).
    ///
    /// # Errors
    ///
    /// If `opts` has variable labels, or `prometheus` refuses them (or a
    /// family's label names).
    ///
    /// ```
    /// use prometheus::Opts;
    /// use shardcount::integrations::prometheus::CollectedHistogram;
    /// let h = std::sync::Arc::new(shardcount::Histogram::new());
    /// let opts = Opts::new("rtt_ns", "Round trips").namespace("app");
    /// assert!(CollectedHistogram::with_opts(opts, h.clone()).is_ok());
    /// let opts = Opts::new("rtt_ns", "Round trips").variable_label("peer");
    /// assert!(CollectedHistogram::with_opts(opts, h).is_err());
    /// ```
    pub fn with_opts(opts: Opts, histogram: P) -> Result<Self> {
        if !opts.variable_labels.is_empty() {
            return Err(::prometheus::Error::Msg(format!(
                "{} takes no variable label, not {:?}",
                opts.fq_name(),
                opts.variable_labels
            )));
        }
        let mut opts = opts;
        opts.variable_labels = P::Target::LABEL_NAMES
            .iter()
            .map(|n| (*n).to_string())
            .collect();
        let desc = opts.describe()?;
        Ok(CollectedHistogram { histogram, desc })
    }

    /// The histogram collected.
    ///
    /// ```
    /// use shardcount::integrations::prometheus::CollectedHistogram;
    /// let c = CollectedHistogram::new("x_ns", "x", std::sync::Arc::new(shardcount::Histogram::new())).unwrap();
    /// c.histogram().record(1);
    /// ```
    pub fn histogram(&self) -> &P::Target {
        &self.histogram
    }
}

impl<P> Collector for CollectedHistogram<P>
where
    P: CountRef,
    P::Target: DistributionFamily,
{
    fn desc(&self) -> Vec<&Desc> {
        vec![&self.desc]
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let mut metrics = Vec::new();
        self.histogram.read_each_distribution(|texts, s| {
            let mut cumulative = 0u64;
            // The `+Inf` bucket is the sample count, which the encoders
            // write themselves (a bound of infinity would be written `inf`).
            let buckets = s
                .export_buckets()
                .filter_map(|(le, n)| {
                    cumulative = cumulative.wrapping_add(n);
                    let mut b = proto::Bucket::default();
                    b.set_cumulative_count(cumulative);
                    b.set_upper_bound(le?);
                    Some(b)
                })
                .collect();
            let mut h = proto::Histogram::default();
            h.set_sample_count(s.count());
            h.set_sample_sum(s.export_sum());
            h.set_bucket(buckets);
            let mut labels = self.desc.const_label_pairs.clone();
            for (name, text) in P::Target::LABEL_NAMES.iter().zip(texts) {
                let mut pair = proto::LabelPair::default();
                pair.set_name((*name).to_string());
                pair.set_value((*text).to_string());
                labels.push(pair);
            }
            // The text format wants each metric's labels sorted by name.
            labels.sort_by(|a, b| a.name().cmp(b.name()));
            let mut metric = proto::Metric::default();
            metric.set_label(labels);
            metric.set_histogram(h);
            metrics.push(metric);
        });
        let mut family = MetricFamily::default();
        family.set_name(self.desc.fq_name.clone());
        family.set_help(self.desc.help.clone());
        family.set_field_type(MetricType::HISTOGRAM);
        family.set_metric(metrics);
        vec![family]
    }
}

impl<P: CountRef> fmt::Debug for CollectedHistogram<P>
where
    P::Target: fmt::Debug,
{
    /// The name and the histogram's `Debug`.
    ///
    /// ```
    /// use shardcount::integrations::prometheus::CollectedHistogram;
    /// let c = CollectedHistogram::new("x_ns", "x", std::sync::Arc::new(shardcount::Histogram::new())).unwrap();
    /// assert!(format!("{c:?}").starts_with("CollectedHistogram { name: \"x_ns\""));
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CollectedHistogram")
            .field("name", &self.desc.fq_name)
            .field("histogram", &&*self.histogram)
            .finish()
    }
}
