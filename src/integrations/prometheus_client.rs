//! [`prometheus-client`](::prometheus_client) (feature `prometheus-client`):
//! [`Shared`], a clonable counter that a `Registry` can encode.
//!
//! A `Registry` takes ownership of what is registered, so the program needs
//! a second handle to count with: [`Shared`] is an `Arc` around a
//! [`Counter`] or [`RoughCounter`]; clone it, register one clone, count with
//! the other. It encodes as an OpenMetrics counter whose value is the
//! counter's exact `sum()`.
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

use crate::primitive::sync::Arc;
use crate::{Counter, RoughCounter};
use ::prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use ::prometheus_client::metrics::{MetricType, TypedMetric};
use std::fmt;
use std::ops::Deref;

/// A shared [`Counter`] or [`RoughCounter`]: cheap to clone (one `Arc`),
/// dereferences to the counter, and encodes as an OpenMetrics counter with
/// the counter's [`sum`](Counter::sum).
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
pub struct Shared<C>(Arc<C>);

impl<C> Shared<C> {
    /// Wraps `counter` for sharing.
    ///
    /// ```
    /// let c = shardcount::integrations::prometheus_client::Shared::new(shardcount::Counter::from(2));
    /// assert_eq!(c.sum(), 2);
    /// ```
    pub fn new(counter: C) -> Self {
        Shared(Arc::new(counter))
    }

    /// The `Arc` inside, e.g. to hand the same counter to code that takes an
    /// `Arc`.
    ///
    /// ```
    /// use shardcount::integrations::prometheus_client::Shared;
    /// let c = Shared::new(shardcount::Counter::new());
    /// let arc = c.arc().clone();
    /// arc.inc();
    /// assert_eq!(c.sum(), 1);
    /// ```
    #[must_use]
    pub fn arc(&self) -> &Arc<C> {
        &self.0
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
        Shared(Arc::clone(&self.0))
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
        Shared(arc)
    }
}

impl<C> Deref for Shared<C> {
    type Target = C;

    fn deref(&self) -> &C {
        &self.0
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
        self.0.fmt(f)
    }
}

/// Every [`Shared`] is an OpenMetrics counter.
impl<C> TypedMetric for Shared<C> {
    const TYPE: MetricType = MetricType::Counter;
}

/// Encodes [`Counter::sum`]: exact at quiescence, and for add-only use never
/// below any earlier encoding.
impl EncodeMetric for Shared<Counter> {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), fmt::Error> {
        encoder.encode_counter::<NoLabelSet, _, u64>(&self.0.sum(), None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// Encodes [`RoughCounter::sum`] (exact, reads every slot), not the lagging
/// `approx()`: a scrape is rare enough to pay for it.
impl EncodeMetric for Shared<RoughCounter> {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), fmt::Error> {
        encoder.encode_counter::<NoLabelSet, _, u64>(&self.0.sum(), None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}
