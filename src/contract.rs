//! What every counter type offers to the code that ships or shows its
//! value: [`Count`], one number read exactly, and [`CountFamily`], a set
//! of labelled numbers read together.
//!
//! The [`Exporter`](crate::export::Exporter) and the integrations with
//! metrics crates are written once over these traits, so a counter type
//! works with all of them by implementing one trait. Every [`Count`] is
//! also a [`CountFamily`] of one unlabelled member, so code that takes a
//! family takes a single count too.
//!
//! | type | trait | [`Kind`] | the read | a member's label |
//! |---|---|---|---|---|
//! | [`Counter`](crate::Counter) | [`Count`] | counter | `sum()` | |
//! | [`RoughCounter`](crate::RoughCounter) | [`Count`] | counter | `sum()` (exact, not `approx()`) | |
//! | [`LocalCounter`](crate::LocalCounter) (`local_counter!`) | [`Count`] | counter | `sum()` | |
//! | [`MaxCounter`](crate::MaxCounter), [`MinCounter`](crate::MinCounter) | [`Count`] | gauge | `get()` | |
//! | [`Stock`](crate::Stock) | [`Count`] | gauge | `sum()` | |
//! | [`CounterSet`](crate::CounterSet) | [`CountFamily`] | counter | `get(i)` | the index `i` |
//! | [`CounterMap<K>`](crate::CounterMap) | [`CountFamily`] | counter | `get(&key)` | the key (`K: Display`) |
//! | [`LabelledCounter<L>`](crate::LabelledCounter) | [`CountFamily`] | counter | `get(label)` | one text per label name of `L` |
//!
//! Nothing here is on an add path: a read is the type's own read method.
//!
//! ```
//! use shardcount::contract::{Count, CountFamily, Kind};
//! use shardcount::{Counter, CounterSet, MaxCounter};
//!
//! let c = Counter::new();
//! c.add(3);
//! assert_eq!((c.read(), Counter::KIND), (3, Kind::Counter));
//! assert_eq!(<MaxCounter as Count>::KIND, Kind::Gauge);
//!
//! let set = CounterSet::new(2);
//! set.add(1, 5);
//! let mut members = Vec::new();
//! set.read_each(|i, v| members.push((*i, v)));
//! assert_eq!(members, [(0, 0), (1, 5)]);
//! ```

use std::fmt::{self, Write};

/// What a value means to a monitoring system.
///
/// ```
/// use shardcount::contract::{Count, Kind};
/// assert_eq!(shardcount::Counter::KIND, Kind::Counter);
/// assert_eq!(shardcount::Stock::KIND, Kind::Gauge);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A cumulative count: it grows with each add and falls only when it
    /// is taken or reset (which a monitoring system sees as a restart).
    Counter,
    /// A level that goes up and down: a running maximum or minimum, a
    /// stock. Exported as its current value.
    Gauge,
}

/// One number this crate can export: a counter type's exact read, and
/// whether it is a counter or a gauge.
///
/// # What the read guarantees
///
/// [`read`](Self::read) is the type's own exact read (the table in the
/// [module docs](self) names it), with that method's guarantees, which
/// include at least these:
///
/// * exact when no update runs concurrently (at quiescence);
/// * it includes every update that happened-before the call;
/// * under concurrent updates it is not a snapshot of one instant: it
///   may include some concurrent updates and not others;
/// * modulo 2<sup>64</sup>, as the counters count.
///
/// It reads; it never resets, allocates nothing, and takes at most the
/// type's own read lock (`Stock`, `local_counter!`).
///
/// ```
/// use shardcount::contract::{Count, Kind};
/// use shardcount::{MinCounter, RoughCounter};
///
/// /// One line of a report, for any counter type.
/// fn line<C: Count>(name: &str, c: &C) -> String {
///     let kind = match C::KIND {
///         Kind::Counter => "counter",
///         Kind::Gauge => "gauge",
///     };
///     format!("{name} ({kind}): {}", c.read())
/// }
/// let (hits, fastest) = (RoughCounter::new(), MinCounter::new());
/// hits.add(4);
/// fastest.record(7);
/// assert_eq!(line("hits", &hits), "hits (counter): 4");
/// assert_eq!(line("fastest", &fastest), "fastest (gauge): 7");
/// ```
// A `&STATIC` passed where a counter is wanted (`Shared::new(&REQUESTS)`)
// lands here: say which call takes a reference.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a counter type of shardcount",
    note = "for a `static` in prometheus-client, register `Shared::from_static(&STATIC)`; tikv's `Collected::new` and OpenTelemetry's `observe` take `&STATIC` as it is"
)]
pub trait Count: Send + Sync {
    /// A counter or a gauge.
    const KIND: Kind;

    /// The value, read exactly (see [the trait docs](Count#what-the-read-guarantees)).
    fn read(&self) -> u64;
}

/// A family of labelled numbers exported together: a
/// [`CounterSet`](crate::CounterSet) (labelled by index) or a
/// [`CounterMap`](crate::CounterMap) (labelled by key), and every
/// [`Count`], as a family of one member with the empty label.
///
/// Each member's value is read as [`Count::read`] is, with the same
/// guarantees; the members are read one after another, so together they
/// are not a snapshot of one instant.
///
/// ```
/// use shardcount::contract::CountFamily;
/// use shardcount::{Counter, CounterMap};
///
/// let routes: CounterMap<&str> = CounterMap::new();
/// routes.add(&"/", 2);
/// let mut seen = Vec::new();
/// routes.read_each(|k, v| seen.push(format!("{k}={v}")));
/// assert_eq!(seen, ["/=2"]);
/// assert_eq!(<CounterMap<&str> as CountFamily>::LABEL_NAME, Some("key"));
///
/// let one = Counter::from(9);
/// one.read_each(|label, v| assert_eq!((label, v), ("", 9)));
/// assert_eq!(<Counter as CountFamily>::LABEL_NAME, None);
/// ```
pub trait CountFamily: Send + Sync {
    /// Whether the members are counters or gauges (named apart from
    /// [`Count::KIND`] so that both traits can be in scope).
    const MEMBER_KIND: Kind;

    /// The name of the label that tells members apart, where labels have
    /// names (`"index"` for a set, `"key"` for a map); `None` for a single
    /// [`Count`], whose one member is not labelled. A family of several
    /// labels names its first here and all in
    /// [`LABEL_NAMES`](Self::LABEL_NAMES).
    const LABEL_NAME: Option<&'static str>;

    /// The names of the labels that tell members apart, one per
    /// dimension: empty for a single [`Count`], one name for a set or map
    /// (by default, [`LABEL_NAME`](Self::LABEL_NAME) as a slice), several
    /// for a [`LabelledCounter`](crate::LabelledCounter) of a struct or
    /// tuple of labels, whose [`LABEL_NAME`](Self::LABEL_NAME) is the
    /// first of them. Integrations label members with these.
    ///
    /// ```
    /// use shardcount::contract::CountFamily;
    /// use shardcount::{Counter, CounterSet};
    /// assert_eq!(CounterSet::LABEL_NAMES, ["index"]);
    /// assert!(Counter::LABEL_NAMES.is_empty());
    /// ```
    const LABEL_NAMES: &'static [&'static str] = match &Self::LABEL_NAME {
        Some(name) => std::slice::from_ref(name),
        None => &[],
    };

    /// This family's label names: [`LABEL_NAMES`](Self::LABEL_NAMES),
    /// unless it was given its own
    /// ([`CounterMap::with_label_name`](crate::CounterMap::with_label_name),
    /// [`CounterSet::with_label_name`](crate::CounterSet::with_label_name)).
    /// Every integration labels members with these.
    ///
    /// ```
    /// use shardcount::contract::CountFamily;
    /// use shardcount::CounterMap;
    /// let users: CounterMap<u64> = CounterMap::new().with_label_name("user_id");
    /// assert_eq!(users.label_names(), ["user_id"]);
    /// assert_eq!(CounterMap::<u64>::new().label_names(), ["key"]);
    /// ```
    fn label_names(&self) -> &[&'static str] {
        Self::LABEL_NAMES
    }

    /// A member's label, as it is shown (for a family of several labels,
    /// their texts, comma-separated).
    type Label: fmt::Display + ?Sized;

    /// Calls `f` with each member's label and value. Members that exist
    /// when the call starts are all visited, once each; members created
    /// meanwhile may or may not be.
    fn read_each(&self, f: impl FnMut(&Self::Label, u64));

    /// [`read_each`](Self::read_each) with each member's label values
    /// apart: one text per name in [`LABEL_NAMES`](Self::LABEL_NAMES), in
    /// that order (none for a single [`Count`]). By default the one label
    /// is shown with its `Display`, and a member whose `Display` returns an
    /// error is left out (never shown as the part it wrote).
    ///
    /// ```
    /// use shardcount::contract::CountFamily;
    /// use shardcount::{Counter, CounterMap};
    ///
    /// let routes: CounterMap<&str> = CounterMap::new();
    /// routes.add(&"/", 2);
    /// routes.read_each_labels(|texts, v| assert_eq!((texts, v), (&["/"][..], 2)));
    /// Counter::from(1).read_each_labels(|texts, v| assert_eq!((texts.len(), v), (0, 1)));
    /// ```
    fn read_each_labels(&self, mut f: impl FnMut(&[&str], u64)) {
        if Self::LABEL_NAMES.is_empty() {
            self.read_each(|_, value| f(&[], value));
            return;
        }
        let mut text = String::new();
        self.read_each(|label, value| {
            text.clear();
            // Writing to a `String` fails only when the label's `Display`
            // does, part-way.
            if write!(text, "{label}").is_ok() {
                f(&[text.as_str()], value);
            }
        });
    }
}

impl<C: Count> CountFamily for C {
    const MEMBER_KIND: Kind = C::KIND;
    const LABEL_NAME: Option<&'static str> = None;
    type Label = str;

    fn read_each(&self, mut f: impl FnMut(&str, u64)) {
        f("", self.read());
    }
}

impl Count for crate::Counter {
    const KIND: Kind = Kind::Counter;

    /// [`Counter::sum`](crate::Counter::sum).
    #[inline]
    fn read(&self) -> u64 {
        self.sum()
    }
}

impl Count for crate::RoughCounter {
    const KIND: Kind = Kind::Counter;

    /// [`RoughCounter::sum`](crate::RoughCounter::sum): exact (every slot),
    /// not the lagging `approx()`.
    #[inline]
    fn read(&self) -> u64 {
        self.sum()
    }
}

impl<K: crate::local::LocalKey> Count for crate::LocalCounter<K> {
    const KIND: Kind = Kind::Counter;

    /// [`LocalCounter::sum`](crate::LocalCounter::sum) (the sink and every
    /// live thread's pending counts), not `approx()`.
    #[inline]
    fn read(&self) -> u64 {
        // Each key type has exactly one counter, the `static` itself; its
        // reads take `&'static self`.
        K::counter().sum()
    }
}

impl Count for crate::MaxCounter {
    const KIND: Kind = Kind::Gauge;

    /// [`MaxCounter::get`](crate::MaxCounter::get).
    #[inline]
    fn read(&self) -> u64 {
        self.get()
    }
}

impl Count for crate::MinCounter {
    const KIND: Kind = Kind::Gauge;

    /// [`MinCounter::get`](crate::MinCounter::get).
    #[inline]
    fn read(&self) -> u64 {
        self.get()
    }
}

impl Count for crate::Stock {
    const KIND: Kind = Kind::Gauge;

    /// [`Stock::sum`](crate::Stock::sum) (under the stock's slow-path
    /// lock).
    #[inline]
    fn read(&self) -> u64 {
        self.sum()
    }
}

/// A distribution of recorded values, read whole: what the integrations
/// encode as a histogram (cumulative `le` buckets, a count and a sum) and
/// the [`Exporter`](crate::export::Exporter) ships as `{key}_count` and
/// `{key}_sum`. Implemented by [`Histogram`](crate::Histogram).
///
/// ```
/// use shardcount::contract::Distribution;
/// let h = shardcount::Histogram::new();
/// h.record(4);
/// let s = h.read_distribution();
/// assert_eq!((s.count(), s.sum()), (1, 4));
/// ```
pub trait Distribution: Send + Sync {
    /// The bucket counts and the sum, read together: exact at quiescence,
    /// as [`Histogram::snapshot`](crate::Histogram::snapshot).
    ///
    /// ```
    /// use shardcount::contract::Distribution;
    /// fn p50(d: &impl Distribution) -> Option<u64> {
    ///     d.read_distribution().quantile(0.5)
    /// }
    /// let h = shardcount::Histogram::new();
    /// h.record(9);
    /// assert_eq!(p50(&h), Some(9));
    /// ```
    fn read_distribution(&self) -> crate::HistogramSnapshot;
}

impl Distribution for crate::Histogram {
    fn read_distribution(&self) -> crate::HistogramSnapshot {
        self.snapshot()
    }
}

/// A family of labelled distributions exported together: a
/// [`LabelledHistogram`](crate::LabelledHistogram), and every
/// [`Distribution`] as a family of one unlabelled member. The integrations
/// export histograms over this trait, so one code path writes both.
///
/// ```
/// use shardcount::contract::DistributionFamily;
/// let h = shardcount::Histogram::new();
/// h.record(2);
/// h.read_each_distribution(|texts, s| assert_eq!((texts.len(), s.count()), (0, 1)));
/// assert!(shardcount::Histogram::LABEL_NAMES.is_empty());
/// ```
pub trait DistributionFamily: Send + Sync {
    /// The names of the labels that tell members apart: empty for a
    /// single [`Distribution`].
    const LABEL_NAMES: &'static [&'static str];

    /// Calls `f` with each member's label texts (one per name in
    /// [`LABEL_NAMES`](Self::LABEL_NAMES), in that order) and its read,
    /// each as [`Distribution::read_distribution`]; the members are read
    /// one after another.
    fn read_each_distribution(&self, f: impl FnMut(&[&str], crate::HistogramSnapshot));
}

impl<D: Distribution> DistributionFamily for D {
    const LABEL_NAMES: &'static [&'static str] = &[];

    fn read_each_distribution(&self, mut f: impl FnMut(&[&str], crate::HistogramSnapshot)) {
        f(&[], self.read_distribution());
    }
}
