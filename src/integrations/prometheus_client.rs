//! [`prometheus-client`](::prometheus_client) (feature `prometheus-client`):
//! [`Shared`], a clonable counter that a `Registry` can encode.
//!
//! A `Registry` takes ownership of what is registered, so the program needs
//! a second handle to count with: [`Shared`] is an `Arc` around any counter
//! type of this crate; clone it, register one clone, count with the other.
//! For a `static` (any counter type, family, histogram or `local_counter!`),
//! register [`Shared::from_static(&STATIC)`](Shared::from_static) and count
//! through the `static`.
//! It encodes through the [contract](crate::contract), with the type's
//! exact read:
//!
//! * a [`Count`] of [`Kind::Counter`] ([`Counter`](crate::Counter),
//!   [`RoughCounter`](crate::RoughCounter)) as an OpenMetrics counter;
//! * a [`Count`] of [`Kind::Gauge`] ([`MaxCounter`](crate::MaxCounter),
//!   [`MinCounter`](crate::MinCounter), [`Stock`](crate::Stock)) as a
//!   gauge;
//! * a family ([`CounterSet`](crate::CounterSet),
//!   [`CounterMap`](crate::CounterMap)) as one metric with one sample per
//!   member, labelled `index="3"` or `key="/about"`
//!   ([`CountFamily::LABEL_NAME`], the value shown with `Display`);
//!   a [`LabelledCounter`](crate::LabelledCounter) with one label per
//!   name of its label type, `method="get",status="ok"`
//!   ([`CountFamily::LABEL_NAMES`]). Members whose labels show alike are
//!   one sample, their sum, as the [`Exporter`](crate::export::Exporter)
//!   ships them; a member whose label's `Display` returns an error is left
//!   out.
//!
//! A gauge is its read, unset too: a `MaxCounter`'s 0, a `MinCounter`'s
//! `u64::MAX`, as every integration exports them.
//!
//! For labels of your own, a [`LabelledCounter`](crate::LabelledCounter)
//! needs no lock or hashing on an add; for labels only known at run time, put `Shared<Counter>` in prometheus-client's
//! `Family<Labels, Shared<Counter>>`: it builds members with `Default`.
//!
//! # Why not `prometheus_client`'s own `Counter<u64, A>`
//!
//! That type is generic over an `Atomic` trait whose `inc` and `inc_by`
//! return the value the counter held just before the increment, as
//! `fetch_add` does. A sharded counter has no such value: each increment
//! goes to one shard, and the total before it exists only as a sum over
//! shards that other threads are changing. Computing it would cost a read
//! of every shard on every increment and still not be the value "just
//! before" (the read is not a snapshot), so this crate does not implement
//! `Atomic`: encoding through [`EncodeMetric`] needs only the total.
//!
//! # Labelled counters: `Family<Labels, Shared<Counter>>`
//!
//! `prometheus_client`'s own `Family` works with [`Shared`] as its metric:
//! it creates a `Shared::default()` for each new label set and encodes
//! each one's `sum()`. `get_or_create` takes the family's lock on every
//! call; clone the `Shared` it returns once and count through the clone
//! for a hot label set.
//!
//! ```
//! use prometheus_client::encoding::{text::encode, EncodeLabelSet};
//! use prometheus_client::metrics::family::Family;
//! use prometheus_client::registry::Registry;
//! use shardcount::integrations::prometheus_client::Shared;
//! use shardcount::Counter;
//!
//! #[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
//! struct Labels {
//!     method: String,
//! }
//!
//! let requests = Family::<Labels, Shared<Counter>>::default();
//! let mut registry = Registry::default();
//! registry.register("requests", "Requests by method", requests.clone());
//!
//! let get = requests.get_or_create(&Labels { method: "GET".into() }).clone();
//! std::thread::scope(|s| {
//!     for _ in 0..2 {
//!         s.spawn(|| (0..1000).for_each(|_| get.inc())); // no lock per add
//!     }
//! });
//! requests.get_or_create(&Labels { method: "POST".into() }).add(3);
//!
//! let mut text = String::new();
//! encode(&mut text, &registry).unwrap();
//! assert!(text.contains("requests_total{method=\"GET\"} 2000\n"));
//! assert!(text.contains("requests_total{method=\"POST\"} 3\n"));
//! ```
//!
//! # A single counter
//!
//! ```
//! use prometheus_client::encoding::text::encode;
//! use prometheus_client::registry::Registry;
//! use shardcount::integrations::prometheus_client::Shared;
//! use shardcount::Counter;
//!
//! let requests: Shared<Counter> = Shared::default();
//! let mut registry = Registry::default();
//! registry.register("requests", "Requests served", requests.clone());
//! requests.add(3);
//!
//! let mut text = String::new();
//! encode(&mut text, &registry).unwrap();
//! assert!(text.contains("requests_total 3\n"));
//! ```
//!
//! A gauge and a family:
//!
//! ```
//! use prometheus_client::encoding::text::encode;
//! use prometheus_client::registry::Registry;
//! use shardcount::integrations::prometheus_client::Shared;
//! use shardcount::{CounterMap, MaxCounter};
//!
//! let peak: Shared<MaxCounter> = Shared::default();
//! let routes: Shared<CounterMap<String>> = Shared::default();
//! let mut registry = Registry::default();
//! registry.register("queue_peak", "Deepest queue", peak.clone());
//! registry.register("routes", "Requests by route", routes.clone());
//! peak.record(12);
//! routes.add(&"/about".to_string(), 2);
//!
//! let mut text = String::new();
//! encode(&mut text, &registry).unwrap();
//! assert!(text.contains("# TYPE queue_peak gauge\nqueue_peak 12\n"));
//! assert!(text.contains("routes_total{key=\"/about\"} 2\n"));
//! ```

use crate::contract::{CountFamily, Kind};

mod histogram;

use crate::contract::count_ref::Holder;
#[cfg(doc)]
use crate::contract::Count;
use crate::primitive::sync::Arc;
use ::prometheus_client::encoding::{
    EncodeLabel, EncodeLabelSet, EncodeLabelValue, EncodeMetric, LabelSetEncoder,
    LabelValueEncoder, MetricEncoder, NoLabelSet,
};
use ::prometheus_client::metrics::{MetricType, TypedMetric};
use std::collections::BTreeMap;
use std::fmt::{self, Write};
use std::ops::Deref;

/// A shared counter of any type here, held as a
/// [`CountRef`](crate::contract::CountRef) is (an `Arc`, or a `&'static`
/// for a `static`): cheap to clone, dereferences to the counter, and encodes
/// its exact read as an OpenMetrics counter, gauge, labelled family or
/// histogram (see [the module docs](self)).
///
/// ```
/// use shardcount::integrations::prometheus_client::Shared;
/// use shardcount::RoughCounter;
///
/// let hits = Shared::new(RoughCounter::new());
/// let also = hits.clone();
/// also.inc();
/// assert_eq!(hits.sum(), 1);
/// ```
pub struct Shared<C: 'static>(Holder<C>);

impl<C> Shared<C> {
    /// Wraps `counter` for sharing. For a `static`, use
    /// [`from_static`](Self::from_static) (or `Shared::from(&STATIC)`).
    ///
    /// ```
    /// let c = shardcount::integrations::prometheus_client::Shared::new(shardcount::Counter::from(2));
    /// assert_eq!(c.sum(), 2);
    /// ```
    pub fn new(counter: C) -> Self {
        Shared(Holder::Arc(Arc::new(counter)))
    }

    /// Shares a `static` counter of any type (a family, a histogram or a
    /// `local_counter!` too): register it and keep counting through the
    /// `static`. Nothing is allocated.
    ///
    /// ```
    /// use prometheus_client::{encoding::text::encode, registry::Registry};
    /// use shardcount::{integrations::prometheus_client::Shared, Counter};
    ///
    /// static REQUESTS: Counter = Counter::new();
    /// let mut registry = Registry::default();
    /// registry.register("requests", "Requests served", Shared::from_static(&REQUESTS));
    /// REQUESTS.add(2);
    ///
    /// let mut text = String::new();
    /// encode(&mut text, &registry).unwrap();
    /// assert!(text.contains("requests_total 2\n"));
    /// ```
    #[must_use]
    pub const fn from_static(counter: &'static C) -> Self {
        Shared(Holder::Static(counter))
    }

    /// The `Arc` inside, e.g. to hand the same counter to code that takes an
    /// `Arc`; `None` for a `Shared` made [`from_static`](Self::from_static).
    ///
    /// ```
    /// use shardcount::integrations::prometheus_client::Shared;
    /// let c = Shared::new(shardcount::Counter::new());
    /// let arc = c.arc().unwrap().clone();
    /// arc.inc();
    /// assert_eq!(c.sum(), 1);
    ///
    /// static S: shardcount::Counter = shardcount::Counter::new();
    /// assert!(Shared::from_static(&S).arc().is_none());
    /// ```
    #[must_use]
    pub fn arc(&self) -> Option<&Arc<C>> {
        match &self.0 {
            Holder::Arc(arc) => Some(arc),
            Holder::Static(_) => None,
        }
    }
}

impl<C> Clone for Shared<C> {
    /// Another handle to the same counter.
    ///
    /// ```
    /// let a = shardcount::integrations::prometheus_client::Shared::new(shardcount::Counter::new());
    /// let b = a.clone();
    /// b.inc();
    /// assert_eq!(a.sum(), 1);
    /// ```
    fn clone(&self) -> Self {
        Shared(self.0.clone())
    }
}

impl<C: Default> Default for Shared<C> {
    /// A new counter at zero.
    ///
    /// ```
    /// let c: shardcount::integrations::prometheus_client::Shared<shardcount::Counter> = Default::default();
    /// assert_eq!(c.sum(), 0);
    /// ```
    fn default() -> Self {
        Shared::new(C::default())
    }
}

impl<C> From<Arc<C>> for Shared<C> {
    /// Shares a counter that is already in an `Arc`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// let arc = Arc::new(shardcount::Counter::new());
    /// let c = shardcount::integrations::prometheus_client::Shared::from(arc.clone());
    /// arc.inc();
    /// assert_eq!(c.sum(), 1);
    /// ```
    fn from(arc: Arc<C>) -> Self {
        Shared(Holder::Arc(arc))
    }
}

impl<C> From<&'static C> for Shared<C> {
    /// Shares a `static`, as [`Shared::from_static`].
    ///
    /// ```
    /// use shardcount::{integrations::prometheus_client::Shared, MaxCounter};
    /// static PEAK: MaxCounter = MaxCounter::new();
    /// let peak = Shared::from(&PEAK);
    /// PEAK.record(7);
    /// assert_eq!(peak.get(), 7);
    /// ```
    fn from(counter: &'static C) -> Self {
        Shared::from_static(counter)
    }
}

impl<C> Deref for Shared<C> {
    type Target = C;

    fn deref(&self) -> &C {
        self.0.get()
    }
}

impl<C: fmt::Debug> fmt::Debug for Shared<C> {
    /// The counter's own `Debug`.
    ///
    /// ```
    /// let c = shardcount::integrations::prometheus_client::Shared::new(shardcount::Counter::from(3));
    /// assert_eq!(format!("{c:?}"), "Counter { sum: 3, shards: 0 }");
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (**self).fmt(f)
    }
}

/// The metric type of a [`Kind`].
const fn metric_type(kind: Kind) -> MetricType {
    match kind {
        Kind::Counter => MetricType::Counter,
        Kind::Gauge => MetricType::Gauge,
    }
}

/// A counter's kind as an OpenMetrics type: `Counter` or `Gauge` (so a
/// `Family<_, Shared<MaxCounter>>` is a gauge family).
impl<C: CountFamily> TypedMetric for Shared<C> {
    const TYPE: MetricType = metric_type(C::MEMBER_KIND);
}

/// Encodes the exact read ([`Count::read`] or each member's, per
/// [`CountFamily::read_each`]): for a counter, exact at quiescence and,
/// for add-only use, never below any earlier encoding by the same thread.
impl<C: CountFamily> EncodeMetric for Shared<C> {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), fmt::Error> {
        let mut result = Ok(());
        match (**self).label_names() {
            [] => (**self).read_each(|_, value| {
                result = encode_value::<C>(&mut encoder, value);
            }),
            names => {
                // Each member by its labels as shown: members shown alike
                // are one sample, their sum (two samples with one label set
                // are invalid), and a member whose label's `Display` fails
                // is left out (not the whole encoding; see
                // `CountFamily::read_each_labels`).
                let mut members: BTreeMap<Vec<String>, u64> = BTreeMap::new();
                (**self).read_each_labels(|texts, value| {
                    let shown = texts.iter().map(|t| (*t).to_owned()).collect();
                    let sum = members.entry(shown).or_insert(0);
                    *sum = sum.wrapping_add(value);
                });
                for (texts, value) in &members {
                    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
                    encoder
                        .encode_family(&Pairs {
                            names,
                            texts: &texts,
                        })
                        .and_then(|mut sample| encode_value::<C>(&mut sample, *value))?;
                }
            }
        }
        result
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// One sample's value, as a counter or a gauge.
fn encode_value<C: CountFamily>(encoder: &mut MetricEncoder, value: u64) -> Result<(), fmt::Error> {
    match C::MEMBER_KIND {
        Kind::Counter => encoder.encode_counter::<NoLabelSet, _, u64>(&value, None),
        Kind::Gauge => encoder.encode_gauge(&value),
    }
}

/// A member's label value, written with its `Display` (escaped by the
/// encoder).
struct Label<'a, L: ?Sized>(&'a L);

impl<L: fmt::Display + ?Sized> EncodeLabelValue for Label<'_, L> {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), fmt::Error> {
        write!(encoder, "{}", self.0)
    }
}

/// A member's labels when there are several: each name with its text.
struct Pairs<'a> {
    names: &'a [&'static str],
    texts: &'a [&'a str],
}

impl EncodeLabelSet for Pairs<'_> {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), fmt::Error> {
        for (name, text) in self.names.iter().zip(self.texts) {
            (*name, Label(*text)).encode(encoder.encode_label())?;
        }
        Ok(())
    }
}
