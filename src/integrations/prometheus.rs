//! tikv's [`prometheus`] crate (feature `prometheus`):
//! [`Collected`], a `Collector` for any counter type or family, to
//! register in a `prometheus::Registry`.
//!
//! `Collected` holds the counter through a shared pointer (an `Arc`, or a
//! `&'static` for a `static` or a `local_counter!`), so the program keeps
//! counting through its own handle while the registry owns the collector.
//! Each scrape reads the counter through the [contract](crate::contract),
//! with the type's exact read, and returns one metric family:
//!
//! * a [`Count`] of [`Kind::Counter`] ([`Counter`](crate::Counter),
//!   [`RoughCounter`](crate::RoughCounter), a `local_counter!`) as a
//!   counter; of [`Kind::Gauge`] ([`MaxCounter`](crate::MaxCounter),
//!   [`MinCounter`](crate::MinCounter), [`Stock`](crate::Stock)) as a gauge;
//! * a family ([`CounterSet`](crate::CounterSet),
//!   [`CounterMap`](crate::CounterMap)) as one metric family with one
//!   sample per member, labelled `index="3"` or `key="/about"`
//!   ([`CountFamily::LABEL_NAME`], the value shown with `Display`), or with
//!   a label name of your own ([`Collected::with_opts`]); a
//!   [`LabelledCounter`](crate::LabelledCounter) with one label per name
//!   of its label type ([`CountFamily::LABEL_NAMES`]).
//!
//! The name is used as given: this crate's `prometheus` writes no `_total`
//! suffix, so a counter's name should end in `_total` by convention.
//! Values are sent as `f64`, as the `prometheus` data model has them: exact
//! up to 2<sup>53</sup>. A gauge is its read, unset too: a `MaxCounter`'s
//! 0, a `MinCounter`'s `u64::MAX` (as an `f64`), as every integration
//! exports them.
//!
//! A family's members whose labels show alike (two keys with one
//! `Display`) are one sample, their sum, as the
//! [`Exporter`](crate::export::Exporter) ships them; a member whose
//! label's `Display` returns an error is left out of the scrape.
//!
//! ```
//! use prometheus::{Registry, TextEncoder};
//! use shardcount::integrations::prometheus::Collected;
//! use shardcount::{Counter, CounterMap};
//! use std::sync::Arc;
//!
//! let requests = Arc::new(Counter::new());
//! let routes: Arc<CounterMap<String>> = Arc::default();
//! let registry = Registry::new();
//! registry.register(Box::new(Collected::new("requests_total", "Requests served", requests.clone())?))?;
//! registry.register(Box::new(Collected::new("routes_total", "Requests by route", routes.clone())?))?;
//!
//! std::thread::scope(|s| {
//!     for _ in 0..2 {
//!         s.spawn(|| (0..1000).for_each(|_| requests.inc()));
//!     }
//! });
//! routes.add(&"/about".to_string(), 2);
//!
//! let text = TextEncoder::new().encode_to_string(&registry.gather())?;
//! assert!(text.contains("# TYPE requests_total counter\nrequests_total 2000\n"));
//! assert!(text.contains("routes_total{key=\"/about\"} 2\n"));
//! # Ok::<(), prometheus::Error>(())
//! ```
//!
//! # Moving from `IntCounter`, `IntCounterVec` and `LocalIntCounter`
//!
//! * `IntCounter` becomes an `Arc<Counter>` registered as
//!   `Collected::new(name, help, counter.clone())`; `inc`/`inc_by` become
//!   `inc`/`add`, and `get` becomes `sum`.
//! * `IntCounterVec::new(opts, &["path"])` becomes an `Arc<CounterMap<K>>`
//!   registered with [`Collected::with_opts`] and the same `opts` (with
//!   `.variable_label("path")`): the same text. Keep a
//!   [`CounterMap::handle`](crate::CounterMap::handle) where you kept the
//!   `IntCounter` that `with_label_values` returned. One variable label
//!   only: for more, register a collector per fixed combination (const
//!   labels) or use a key whose `Display` is the combined value.
//! * `LocalIntCounter` and its flushes become a `local_counter!` static,
//!   registered as `Collected::new(name, help, &STATIC)`: each thread adds
//!   to its own cell and a scrape reads every thread's pending count, so
//!   there is nothing to flush.
//!
//! ```
//! use prometheus::{IntCounterVec, Opts, Registry, TextEncoder};
//! use shardcount::integrations::prometheus::Collected;
//! use shardcount::CounterMap;
//! use std::sync::Arc;
//!
//! let opts = || Opts::new("requests_total", "Requests by path").variable_label("path");
//! // Before: a lookup (and a read lock) per call.
//! let before = IntCounterVec::new(opts(), &["path"])?;
//! before.with_label_values(&["/"]).inc();
//! // After: the same options, one labelled sample per key.
//! let after: Arc<CounterMap<&str>> = Arc::default();
//! after.handle(&"/").inc();
//!
//! let (a, b) = (Registry::new(), Registry::new());
//! a.register(Box::new(before))?;
//! b.register(Box::new(Collected::with_opts(opts(), after.clone())?))?;
//! let text = |r: &Registry| TextEncoder::new().encode_to_string(&r.gather());
//! assert_eq!(text(&a)?, text(&b)?);
//! # Ok::<(), prometheus::Error>(())
//! ```

#[cfg(doc)]
use crate::contract::Count;
use crate::contract::CountRef;
use crate::contract::{CountFamily, Kind};
use ::prometheus::core::{Collector, Desc, Describer, Opts};
use ::prometheus::proto::{self, LabelPair, MetricFamily, MetricType};
use ::prometheus::{Error, Result};
use std::collections::BTreeMap;
use std::fmt;

mod histogram;
pub use histogram::CollectedHistogram;

/// A counter or family of this crate as a `prometheus` `Collector`: each
/// `collect` reads it exactly and returns one metric family (see [the
/// module docs](self)).
///
/// `P` is how the counter is held: `Arc<C>` for one the program also
/// holds, `&'static C` for a `static` (a `local_counter!` too).
///
/// ```
/// use prometheus::{Registry, TextEncoder};
/// use shardcount::integrations::prometheus::Collected;
///
/// shardcount::local_counter!(static SENT);
///
/// let registry = Registry::new();
/// registry.register(Box::new(Collected::new("sent_total", "Messages sent", &SENT)?))?;
/// SENT.add(3);
/// let text = TextEncoder::new().encode_to_string(&registry.gather())?;
/// assert!(text.ends_with("sent_total 3\n"));
/// # Ok::<(), prometheus::Error>(())
/// ```
pub struct Collected<P> {
    counter: P,
    desc: Desc,
    /// The label names of a family's members; none for a single count.
    labels: Vec<String>,
}

impl<P> Collected<P>
where
    P: CountRef,
    P::Target: CountFamily,
{
    /// A collector of `counter` named `name`, with `help` as its help text
    /// and a family's members labelled by
    /// [`LABEL_NAMES`](CountFamily::LABEL_NAMES).
    ///
    /// # Errors
    ///
    /// `prometheus`'s own error for a name it rejects (not
    /// `[a-zA-Z_:][a-zA-Z0-9_:]*`) or an empty help text.
    ///
    /// ```
    /// use shardcount::integrations::prometheus::Collected;
    /// use std::sync::Arc;
    ///
    /// let peak = Arc::new(shardcount::MaxCounter::new());
    /// assert!(Collected::new("queue_peak", "Deepest queue", peak.clone()).is_ok());
    /// let err = Collected::new("queue-peak", "Deepest queue", peak).unwrap_err();
    /// assert_eq!(err.to_string(), "Error: 'queue-peak' is not a valid metric name");
    /// ```
    pub fn new(name: impl Into<String>, help: impl Into<String>, counter: P) -> Result<Self> {
        Self::with_opts(Opts::new(name, help), counter)
    }

    /// A collector from `prometheus`'s [`Opts`]: a namespace, subsystem and
    /// constant labels as for its own metrics, and for a family either no
    /// variable label or one per name in
    /// [`LABEL_NAMES`](CountFamily::LABEL_NAMES), in that order, the names
    /// its members' labels take instead.
    ///
    /// # Errors
    ///
    /// As [`new`](Self::new), `prometheus`'s own errors for invalid names,
    /// and an error naming the labels if `opts` has a variable label for a
    /// single count, or another number of them than the family's labels.
    ///
    /// ```
    /// use prometheus::{Opts, Registry, TextEncoder};
    /// use shardcount::integrations::prometheus::Collected;
    /// use shardcount::CounterMap;
    /// use std::sync::Arc;
    ///
    /// let routes: Arc<CounterMap<&str>> = Arc::default();
    /// let opts = Opts::new("requests_total", "Requests by path")
    ///     .namespace("web")
    ///     .const_label("zone", "a")
    ///     .variable_label("path");
    /// let registry = Registry::new();
    /// registry.register(Box::new(Collected::with_opts(opts, routes.clone())?))?;
    /// routes.add(&"/", 4);
    /// let text = TextEncoder::new().encode_to_string(&registry.gather())?;
    /// assert!(text.ends_with("web_requests_total{path=\"/\",zone=\"a\"} 4\n"));
    ///
    /// let two = Opts::new("x_total", "x").variable_labels(vec!["a".into(), "b".into()]);
    /// assert!(Collected::with_opts(two, routes).is_err());
    /// # Ok::<(), prometheus::Error>(())
    /// ```
    pub fn with_opts(mut opts: Opts, counter: P) -> Result<Self> {
        let defaults = counter.label_names();
        let labels: Vec<String> = match opts.variable_labels.as_slice() {
            [] => defaults.iter().map(|n| n.to_string()).collect(),
            own if own.len() == defaults.len() => own.to_vec(),
            own => {
                let takes = match defaults.len() {
                    0 => "no variable label".to_string(),
                    1 => "at most one variable label".to_string(),
                    n => format!("no variable label or {n} (one per label: {defaults:?})"),
                };
                return Err(Error::Msg(format!(
                    "{} takes {takes}, not {own:?}",
                    opts.fq_name()
                )));
            }
        };
        opts.variable_labels = labels.clone();
        let desc = opts.describe()?;
        Ok(Collected {
            counter,
            desc,
            labels,
        })
    }

    /// The counter collected, e.g. to count through it.
    ///
    /// ```
    /// use shardcount::integrations::prometheus::Collected;
    /// let c = Collected::new("hits_total", "Hits", std::sync::Arc::new(shardcount::Counter::new()))?;
    /// c.counter().inc();
    /// assert_eq!(c.counter().sum(), 1);
    /// # Ok::<(), prometheus::Error>(())
    /// ```
    pub fn counter(&self) -> &P::Target {
        &self.counter
    }
}

impl<P> Collector for Collected<P>
where
    P: CountRef,
    P::Target: CountFamily,
{
    fn desc(&self) -> Vec<&Desc> {
        vec![&self.desc]
    }

    /// One metric family: one sample for a single count, one per label
    /// for a family (see [the module docs](self)), each its exact read as
    /// of the member's visit.
    fn collect(&self) -> Vec<MetricFamily> {
        let kind = <P::Target as CountFamily>::MEMBER_KIND;
        // Each member by its labels as shown: members shown alike are one
        // sample, their sum (two samples with one label set are invalid),
        // and a member whose label's `Display` fails is left out (see
        // `CountFamily::read_each_labels`).
        let mut members: BTreeMap<Vec<String>, u64> = BTreeMap::new();
        self.counter.read_each_labels(|texts, value| {
            let shown: Vec<String> = texts.iter().map(|t| (*t).to_owned()).collect();
            let sum = members.entry(shown).or_insert(0);
            *sum = sum.wrapping_add(value);
        });
        let mut metrics = Vec::with_capacity(members.len());
        for (texts, value) in members {
            let mut labels = self.desc.const_label_pairs.clone();
            if !self.labels.is_empty() {
                for (name, text) in self.labels.iter().zip(texts) {
                    let mut pair = LabelPair::default();
                    pair.set_name(name.clone());
                    pair.set_value(text);
                    labels.push(pair);
                }
                labels.sort_by(|a, b| a.name().cmp(b.name()));
            }
            let mut metric = proto::Metric::default();
            metric.set_label(labels);
            // The data model's values are f64: exact up to 2^53.
            match kind {
                Kind::Counter => {
                    let mut c = proto::Counter::default();
                    c.set_value(value as f64);
                    metric.set_counter(c);
                }
                Kind::Gauge => {
                    let mut g = proto::Gauge::default();
                    g.set_value(value as f64);
                    metric.set_gauge(g);
                }
            }
            metrics.push(metric);
        }
        let mut family = MetricFamily::default();
        family.set_name(self.desc.fq_name.clone());
        family.set_help(self.desc.help.clone());
        family.set_field_type(match kind {
            Kind::Counter => MetricType::COUNTER,
            Kind::Gauge => MetricType::GAUGE,
        });
        family.set_metric(metrics);
        vec![family]
    }
}

impl<P: CountRef> fmt::Debug for Collected<P>
where
    P::Target: fmt::Debug,
{
    /// The name, label name and counter.
    ///
    /// ```
    /// use shardcount::integrations::prometheus::Collected;
    /// let c = Collected::new("hits_total", "Hits", std::sync::Arc::new(shardcount::Counter::from(2)))?;
    /// assert_eq!(
    ///     format!("{c:?}"),
    ///     "Collected { name: \"hits_total\", label: None, counter: Counter { sum: 2, shards: 0 } }"
    /// );
    /// # Ok::<(), prometheus::Error>(())
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Collected")
            .field("name", &self.desc.fq_name)
            .field("label", &self.labels.first())
            .field("counter", &&*self.counter)
            .finish()
    }
}
