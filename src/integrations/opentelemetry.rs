//! [`opentelemetry`] (feature `opentelemetry`): any counter type or family
//! as an observable instrument on a [`Meter`], in one call ([`observe`],
//! or [`Observe`] for a description, unit or label name).
//!
//! The instrument's callback holds the counter through a shared pointer
//! (an `Arc`, or a `&'static` for a `static` or a `local_counter!`), so the
//! program keeps counting through its own handle; each collection reads the
//! counter through the [contract](crate::contract), with the type's exact
//! read:
//!
//! * a [`Count`] of [`Kind::Counter`] ([`Counter`](crate::Counter),
//!   [`RoughCounter`](crate::RoughCounter), a `local_counter!`) as an
//!   observable `u64` counter that observes the cumulative total, so the
//!   SDK's delta temporality (its difference between two collections)
//!   works unchanged;
//! * a [`Count`] of [`Kind::Gauge`] ([`MaxCounter`](crate::MaxCounter),
//!   [`MinCounter`](crate::MinCounter), [`Stock`](crate::Stock)) as an
//!   observable `u64` gauge;
//! * a family ([`CounterSet`](crate::CounterSet),
//!   [`CounterMap`](crate::CounterMap)) as one instrument with one data
//!   point per member, whose one attribute is the member's label: named by
//!   [`CountFamily::LABEL_NAME`] (`index`, `key`) or
//!   [`Observe::with_label_name`], its value the label shown with `Display`
//!   (a string);
//! * a [`LabelledCounter`](crate::LabelledCounter) likewise, with one
//!   attribute per name of its label type
//!   ([`CountFamily::LABEL_NAMES`]), each value the label's text.
//!
//! A [`Histogram`](crate::Histogram) or
//! [`LabelledHistogram`](crate::LabelledHistogram) has no observable
//! instrument to be (the API has none for histograms, and the SDK takes
//! no pre-aggregated points): a [`HistogramReplay`] replays its records
//! into an SDK histogram with its boundaries, exact in count, buckets and
//! sum, at one SDK record per value (its docs say why and what it costs).
//! Exact in buckets for user bounds and `DEFAULT_LE`; at the round
//! `DEFAULT_DURATION_LE` bounds of a `for_durations()` histogram, a record
//! from the internal bucket that holds a bound may land on either side of
//! it (give such a histogram bounds of its own where that matters).
//!
//! Members whose labels show alike are one data point, their sum, as the
//! [`Exporter`](crate::export::Exporter) ships them; a member whose label's
//! `Display` returns an error is left out.
//!
//! Observe each counter under its own name: two instruments of one name
//! are one to the SDK, which keeps the last value observed for each
//! attribute set, so only one counter's total would be exported (tikv's
//! `Registry` refuses the second name instead; the
//! [`Exporter`](crate::export::Exporter) adds the two).
//!
//! A gauge is its read, unset too: a `MaxCounter`'s 0, a `MinCounter`'s
//! `u64::MAX`, as every integration exports them.
//!
//! An observed counter must only grow, as OpenTelemetry's observable
//! counters do: do not [`take`](crate::Counter::take),
//! [`reset`](crate::Counter::reset) or subtract from it. A total that
//! falls is not a restart to the SDK: with delta temporality,
//! `opentelemetry_sdk` 0.33 subtracts the previous observation from it,
//! which panics in a debug build and gives a delta near 2<sup>64</sup> in
//! a release build. For per-interval counts, let the SDK's delta
//! temporality take the differences of an untouched counter. A
//! [`CounterMap`](crate::CounterMap) key removed and added to again
//! between two collections falls the same way; one absent from a
//! collection starts afresh (the SDK forgets it). Keys evicted by
//! [`evict_idle`](crate::CounterMap::evict_idle), called less often than
//! the collections, fall only if they come back after the next call and
//! before the next collection.
//!
//! ```
//! use opentelemetry::metrics::MeterProvider;
//! use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
//! use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
//! use shardcount::integrations::opentelemetry::observe;
//! use shardcount::{Counter, CounterMap};
//! use std::sync::Arc;
//!
//! let exporter = InMemoryMetricExporter::default();
//! let provider = SdkMeterProvider::builder()
//!     .with_reader(PeriodicReader::builder(exporter.clone()).build())
//!     .build();
//! let meter = provider.meter("app");
//!
//! let requests = Arc::new(Counter::new());
//! let routes: Arc<CounterMap<String>> = Arc::default();
//! let _requests = observe(&meter, "requests", requests.clone());
//! let _routes = observe(&meter, "routes", routes.clone());
//!
//! std::thread::scope(|s| {
//!     for _ in 0..2 {
//!         s.spawn(|| (0..1000).for_each(|_| requests.inc()));
//!     }
//! });
//! routes.add(&"/about".to_string(), 2);
//!
//! provider.force_flush()?;
//! let exported = exporter.get_finished_metrics()?;
//! let metrics: Vec<_> = exported[0].scope_metrics().flat_map(|s| s.metrics()).collect();
//! let AggregatedMetrics::U64(MetricData::Sum(sum)) = metrics[0].data() else { panic!() };
//! let point = sum.data_points().next().unwrap();
//! assert_eq!((metrics[0].name(), point.value()), ("requests", 2000));
//! let AggregatedMetrics::U64(MetricData::Sum(sum)) = metrics[1].data() else { panic!() };
//! let point = sum.data_points().next().unwrap();
//! let attribute = point.attributes().next().unwrap();
//! assert_eq!((attribute.key.as_str(), attribute.value.as_str()), ("key", "/about".into()));
//! assert_eq!(point.value(), 2);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # The handle, and what stays registered
//!
//! [`observe`] returns the API's own handle, an [`Instrument`]: keep it
//! for as long as the counter should be collected, as the API asks. (With
//! `opentelemetry_sdk` 0.33 the handle is only a marker: the SDK keeps the
//! callback, and with it the counter, until the meter provider is dropped.)
//! An instrument the SDK rejects (an invalid name or unit) is never
//! collected; the SDK logs why, and the handle does not tell.
//!
//! # Allocation
//!
//! A single count observes with no attributes and allocates nothing. A
//! family keeps each member's attribute between collections (an
//! `Arc<str>` of its label) and a buffer to show labels into, so a
//! collection that finds the same members in the same order as the last
//! one (a `CounterSet` always, a `CounterMap` with no new keys) allocates
//! nothing itself; a new member costs one `Arc<str>`, and members that
//! moved (a new key can reorder a `CounterMap`) one table to find their
//! attributes again. What the SDK allocates to build its data points is
//! the SDK's.
//!
//! # Many members
//!
//! The SDK keeps at most 2000 attribute sets per instrument by default and
//! folds the rest into one `otel.metric.overflow` data point. For a
//! `CounterMap` that may hold more keys, raise the instrument's limit with a
//! view (`Stream::builder().with_cardinality_limit(n)` in
//! `SdkMeterProviderBuilder::with_view`).

use crate::contract::{CountFamily, Kind};

mod histogram;
#[cfg(doc)]
use crate::contract::Count;
use crate::contract::CountRef;
use ::opentelemetry::metrics::{AsyncInstrument, Meter, ObservableCounter, ObservableGauge};
use ::opentelemetry::{Key, KeyValue, Value};
pub use histogram::HistogramReplay;
use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

/// Registers `counter` on `meter` as an observable instrument named `name`
/// (see [the module docs](self)), and returns its handle: keep it.
///
/// `P` is how the counter is held: `Arc<C>` for one the program also
/// holds, `&'static C` for a `static` (a `local_counter!` too).
///
/// ```
/// use opentelemetry::metrics::MeterProvider;
/// use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
/// use shardcount::integrations::opentelemetry::{observe, Instrument};
///
/// shardcount::local_counter!(static SENT);
/// static PEAK: shardcount::MaxCounter = shardcount::MaxCounter::new();
///
/// let exporter = InMemoryMetricExporter::default();
/// let provider = SdkMeterProvider::builder()
///     .with_reader(PeriodicReader::builder(exporter.clone()).build())
///     .build();
/// let meter = provider.meter("app");
/// let sent = observe(&meter, "sent", &SENT);
/// let peak = observe(&meter, "queue_peak", &PEAK);
/// assert!(matches!((sent, peak), (Instrument::Counter(_), Instrument::Gauge(_))));
/// ```
pub fn observe<P>(meter: &Meter, name: impl Into<Cow<'static, str>>, counter: P) -> Instrument
where
    P: CountRef,
    P::Target: CountFamily,
{
    Observe::new(name, counter).register(meter)
}

/// The handle of an instrument [`observe`] registered: an observable
/// counter for a [`Kind::Counter`], an observable gauge for a
/// [`Kind::Gauge`]. Keep it for as long as the counter should be
/// collected.
///
/// ```
/// use opentelemetry::metrics::MeterProvider;
/// use shardcount::integrations::opentelemetry::{observe, Instrument};
///
/// let meter = opentelemetry_sdk::metrics::SdkMeterProvider::default().meter("app");
/// let low = std::sync::Arc::new(shardcount::MinCounter::new());
/// assert!(matches!(observe(&meter, "fastest", low), Instrument::Gauge(_)));
/// ```
#[derive(Clone, Debug)]
pub enum Instrument {
    /// A cumulative count ([`Kind::Counter`]).
    Counter(ObservableCounter<u64>),
    /// A current level ([`Kind::Gauge`]).
    Gauge(ObservableGauge<u64>),
}

/// An instrument to register, with a description, unit or label name:
/// [`observe`] with options.
///
/// ```
/// use opentelemetry::metrics::MeterProvider;
/// use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
/// use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
/// use shardcount::integrations::opentelemetry::Observe;
/// use shardcount::CounterSet;
/// use std::sync::Arc;
///
/// let exporter = InMemoryMetricExporter::default();
/// let provider = SdkMeterProvider::builder()
///     .with_reader(PeriodicReader::builder(exporter.clone()).build())
///     .build();
/// let workers = Arc::new(CounterSet::new(2));
/// let _jobs = Observe::new("jobs", workers.clone())
///     .with_description("Jobs done, by worker")
///     .with_unit("{job}")
///     .with_label_name("worker")
///     .register(&provider.meter("app"));
/// workers.add(1, 5);
///
/// provider.force_flush()?;
/// let exported = exporter.get_finished_metrics()?;
/// let metric = exported[0].scope_metrics().next().unwrap().metrics().next().unwrap();
/// assert_eq!((metric.description(), metric.unit()), ("Jobs done, by worker", "{job}"));
/// let AggregatedMetrics::U64(MetricData::Sum(sum)) = metric.data() else { panic!() };
/// let mut points: Vec<_> = sum
///     .data_points()
///     .map(|p| (p.attributes().map(|a| format!("{}={}", a.key.as_str(), a.value)).collect::<Vec<_>>(), p.value()))
///     .collect();
/// points.sort();
/// assert_eq!(points, [(vec!["worker=0".to_string()], 0), (vec!["worker=1".to_string()], 5)]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Observe<P> {
    name: Cow<'static, str>,
    description: Option<Cow<'static, str>>,
    unit: Option<Cow<'static, str>>,
    /// One key per label name; none for a single count.
    labels: Vec<Key>,
    counter: P,
}

impl<P> Observe<P>
where
    P: CountRef,
    P::Target: CountFamily,
{
    /// An instrument named `name` observing `counter`, with no description
    /// or unit, and a family's members labelled by
    /// [`LABEL_NAMES`](CountFamily::LABEL_NAMES).
    ///
    /// ```
    /// use shardcount::integrations::opentelemetry::Observe;
    /// let hits = Observe::new("hits", std::sync::Arc::new(shardcount::Counter::new()));
    /// hits.counter().inc();
    /// assert_eq!(hits.counter().sum(), 1);
    /// ```
    pub fn new(name: impl Into<Cow<'static, str>>, counter: P) -> Self {
        let labels = counter
            .label_names()
            .iter()
            .map(|n| Key::from_static_str(n))
            .collect();
        Observe {
            name: name.into(),
            description: None,
            unit: None,
            labels,
            counter,
        }
    }

    /// Sets the instrument's description.
    ///
    /// ```
    /// # use shardcount::integrations::opentelemetry::Observe;
    /// let o = Observe::new("hits", std::sync::Arc::new(shardcount::Counter::new()))
    ///     .with_description("Cache hits");
    /// assert!(format!("{o:?}").contains("\"hits\""));
    /// ```
    pub fn with_description(mut self, description: impl Into<Cow<'static, str>>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// Sets the instrument's unit (UCUM, e.g. `"By"` or `"{request}"`).
    ///
    /// ```
    /// # use shardcount::integrations::opentelemetry::Observe;
    /// static SENT: shardcount::Counter = shardcount::Counter::new();
    /// let o = Observe::new("sent", &SENT).with_unit("By");
    /// assert_eq!(o.counter().sum(), 0);
    /// ```
    pub fn with_unit(mut self, unit: impl Into<Cow<'static, str>>) -> Self {
        self.unit = Some(unit.into());
        self
    }

    /// Names a family's member attribute `name` instead of
    /// [`LABEL_NAME`](CountFamily::LABEL_NAME).
    ///
    /// # Panics
    ///
    /// If the counter is a single count, whose one data point has no
    /// attribute to name, or a family of several labels (the message names
    /// the instrument and `name`).
    ///
    /// ```
    /// use shardcount::integrations::opentelemetry::Observe;
    /// use shardcount::{Counter, CounterMap};
    /// use std::sync::Arc;
    ///
    /// let routes: Arc<CounterMap<&str>> = Arc::default();
    /// let _ = Observe::new("requests", routes).with_label_name("path");
    ///
    /// let single = std::panic::catch_unwind(|| {
    ///     Observe::new("hits", Arc::new(Counter::new())).with_label_name("path")
    /// });
    /// assert!(single.is_err());
    /// ```
    pub fn with_label_name(mut self, name: impl Into<String>) -> Self {
        let name = name.into();
        assert!(
            P::Target::LABEL_NAMES.len() == 1,
            "{} has {} labels, not one: it has no single member attribute to name {name:?}",
            self.name,
            P::Target::LABEL_NAMES.len()
        );
        // Shared, so that cloning the key into each member's attribute
        // does not copy the name.
        self.labels = vec![Key::from(Arc::<str>::from(name))];
        self
    }

    /// The counter observed, e.g. to count through it.
    ///
    /// ```
    /// # use shardcount::integrations::opentelemetry::Observe;
    /// let o = Observe::new("hits", std::sync::Arc::new(shardcount::Counter::from(4)));
    /// assert_eq!(o.counter().sum(), 4);
    /// ```
    pub fn counter(&self) -> &P::Target {
        &self.counter
    }

    /// Registers the instrument on `meter` and returns its handle: keep it
    /// (see [the module docs](self#the-handle-and-what-stays-registered)).
    ///
    /// ```
    /// use opentelemetry::metrics::MeterProvider;
    /// use shardcount::integrations::opentelemetry::{Instrument, Observe};
    ///
    /// let meter = opentelemetry_sdk::metrics::SdkMeterProvider::default().meter("app");
    /// let stock = std::sync::Arc::new(shardcount::Stock::new(10));
    /// let level = Observe::new("free_slots", stock).register(&meter);
    /// assert!(matches!(level, Instrument::Gauge(_)));
    /// ```
    pub fn register(self, meter: &Meter) -> Instrument {
        let Observe {
            name,
            description,
            unit,
            labels,
            counter,
        } = self;
        let labels = (!labels.is_empty()).then(|| Mutex::new(Attributes::new(labels)));
        let callback = move |sink: &dyn AsyncInstrument<u64>| match &labels {
            None => counter.read_each(|_, value| sink.observe(value, &[])),
            Some(labels) => {
                // Uncontended unless two readers collect at once (they take
                // turns). Every cached attribute is whole whatever panicked
                // while the lock was held, so a poisoned lock is used as is.
                let mut labels = labels.lock().unwrap_or_else(PoisonError::into_inner);
                labels.observe(&*counter, sink);
            }
        };
        match <P::Target as CountFamily>::MEMBER_KIND {
            Kind::Counter => {
                let mut b = meter.u64_observable_counter(name).with_callback(callback);
                b.description = description;
                b.unit = unit;
                Instrument::Counter(b.build())
            }
            Kind::Gauge => {
                let mut b = meter.u64_observable_gauge(name).with_callback(callback);
                b.description = description;
                b.unit = unit;
                Instrument::Gauge(b.build())
            }
        }
    }
}

impl<P: CountRef> fmt::Debug for Observe<P>
where
    P::Target: fmt::Debug,
{
    /// The name, label name and counter.
    ///
    /// ```
    /// use shardcount::integrations::opentelemetry::Observe;
    /// let o = Observe::new("hits", std::sync::Arc::new(shardcount::Counter::from(2)));
    /// assert_eq!(
    ///     format!("{o:?}"),
    ///     "Observe { name: \"hits\", label: None, counter: Counter { sum: 2, shards: 0 } }"
    /// );
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Observe")
            .field("name", &self.name)
            .field("label", &self.labels.first().map(Key::as_str))
            .field("counter", &&*self.counter)
            .finish()
    }
}

/// A family's member attributes, kept from one collection to the next.
struct Attributes {
    /// One per label name.
    keys: Vec<Key>,
    /// The label texts being observed, joined by a unit separator (reused,
    /// so it stops allocating).
    shown: String,
    /// Each member's joined texts and attributes, in the order of the last
    /// visit (one per label set shown: members shown alike share one).
    members: Vec<(Arc<str>, Box<[KeyValue]>)>,
    /// This visit's value of each of `members` (reused).
    values: Vec<u64>,
    /// This visit's label sets so far, to their place in `members`
    /// (reused).
    seen: HashMap<Arc<str>, usize>,
}

impl Attributes {
    fn new(keys: Vec<Key>) -> Self {
        Attributes {
            keys,
            shown: String::new(),
            members: Vec::new(),
            values: Vec::new(),
            seen: HashMap::new(),
        }
    }

    fn observe<F: CountFamily + ?Sized>(&mut self, family: &F, sink: &dyn AsyncInstrument<u64>) {
        let Attributes {
            keys,
            shown,
            members,
            values,
            seen,
        } = self;
        values.clear();
        seen.clear();
        // Members from the first one out of place on, by label: filled only
        // when the order changed.
        let mut moved: Option<HashMap<Arc<str>, Box<[KeyValue]>>> = None;
        family.read_each_labels(|texts, value| {
            shown.clear();
            for (i, text) in texts.iter().enumerate() {
                if i > 0 {
                    shown.push('\u{1f}');
                }
                shown.push_str(text);
            }
            // Members shown alike are one data point, their sum (the SDK
            // would keep only the last one observed). A member whose
            // `Display` fails never gets here (`read_each_labels`).
            if let Some(&i) = seen.get(shown.as_str()) {
                values[i] = values[i].wrapping_add(value);
                return;
            }
            let at = values.len();
            let in_place = moved.is_none() && members.get(at).is_some_and(|(s, _)| **s == **shown);
            if !in_place {
                let moved = moved.get_or_insert_with(|| members.drain(at..).collect());
                let member = match moved.remove_entry(shown.as_str()) {
                    Some(member) => member,
                    None => {
                        let attributes = keys
                            .iter()
                            .zip(texts)
                            .map(|(k, t)| KeyValue::new(k.clone(), Value::from(t.to_string())))
                            .collect();
                        (Arc::<str>::from(shown.as_str()), attributes)
                    }
                };
                members.push(member);
            }
            seen.insert(members[at].0.clone(), at);
            values.push(value);
        });
        // Members gone since the last visit.
        members.truncate(values.len());
        for (value, (_, attributes)) in values.iter().zip(members.iter()) {
            sink.observe(*value, attributes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Attributes;
    use crate::contract::CountFamily;
    use ::opentelemetry::metrics::AsyncInstrument;
    use ::opentelemetry::{Key, KeyValue};
    use std::sync::{Arc, Mutex};

    /// Records what a callback observed.
    #[derive(Default)]
    struct Seen(Mutex<Vec<(u64, Vec<KeyValue>)>>);

    impl AsyncInstrument<u64> for Seen {
        fn observe(&self, value: u64, attributes: &[KeyValue]) {
            self.0.lock().unwrap().push((value, attributes.to_vec()));
        }
    }

    /// A family whose members and order the test sets.
    struct Members(Vec<(&'static str, u64)>);

    impl CountFamily for Members {
        const MEMBER_KIND: crate::contract::Kind = crate::contract::Kind::Counter;
        const LABEL_NAME: Option<&'static str> = Some("m");
        type Label = str;
        fn read_each(&self, mut f: impl FnMut(&str, u64)) {
            self.0.iter().for_each(|&(l, v)| f(l, v));
        }
    }

    /// Each observation carries its own member's label, whatever the
    /// order or membership changes between collections, and an unchanged
    /// member keeps its attribute (the same `Arc`, not a new one).
    #[test]
    fn attributes_follow_members() {
        let mut attrs = Attributes::new(vec![Key::from_static_str("m")]);
        let rounds = [
            vec![("a", 1), ("b", 2), ("c", 3)],
            vec![("a", 1), ("b", 2), ("c", 3)],
            vec![("a", 1), ("x", 9), ("c", 3), ("b", 2)],
            vec![("b", 2)],
            vec![],
            vec![("c", 3), ("a", 1)],
        ];
        let mut kept = None;
        for round in rounds {
            let seen = Seen::default();
            attrs.observe(&Members(round.clone()), &seen);
            let got: Vec<(String, u64)> = seen
                .0
                .into_inner()
                .unwrap()
                .into_iter()
                .map(|(v, a)| {
                    assert_eq!(a.len(), 1);
                    assert_eq!(a[0].key.as_str(), "m");
                    (a[0].value.to_string(), v)
                })
                .collect();
            let want: Vec<(String, u64)> = round.iter().map(|&(l, v)| (l.into(), v)).collect();
            assert_eq!(got, want);
            assert_eq!(attrs.members.len(), round.len());
            if let Some((label, _)) = attrs.members.iter().find(|(l, _)| &**l == "b") {
                if let Some(before) = kept.replace(label.clone()) {
                    assert!(Arc::ptr_eq(&before, label), "b's attribute was rebuilt");
                }
            }
        }
    }
}
