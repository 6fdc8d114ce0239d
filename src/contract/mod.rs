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
//! | [`Counter`] | [`Count`] | counter | `sum()` | |
//! | [`RoughCounter`] | [`Count`] | counter | `sum()` (exact, not `approx()`) | |
//! | [`LocalCounter`] (`local_counter!`) | [`Count`] | counter | `sum()` | |
//! | [`MaxCounter`], [`MinCounter`] | [`Count`] | gauge | `get()` | |
//! | [`Stock`] | [`Count`] | gauge | `sum()` | |
//! | [`CounterSet`] | [`CountFamily`] | counter | `get(i)` | the index `i` |
//! | [`CounterMap<K>`](CounterMap) | [`CountFamily`] | counter | `get(&key)` | the key (`K: Display`) |
//! | [`LabelledCounter<L>`](LabelledCounter) | [`CountFamily`] | counter | `get(label)` | one text per label name of `L` |
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

pub(crate) mod count_ref;

pub use count_ref::CountRef;

use crate::accumulator::{MaxCounter, MinCounter};
use crate::counter::Counter;
use crate::histogram::{Histogram, HistogramSnapshot, LabelledHistogram};
use crate::labels::{Label, LabelledCounter};
use crate::local::{LocalCounter, LocalKey};
use crate::map::CounterMap;
use crate::rough::RoughCounter;
use crate::set::CounterSet;
use crate::stock::Stock;
use std::fmt::{self, Write};
use std::hash::Hash;

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

/// Panics unless `name` can be a label name in every exposition format
/// the integrations write (Prometheus's `[a-zA-Z_][a-zA-Z0-9_]*`, the rule
/// `#[derive(Label)]` checks at compile time); `from` names the caller.
#[track_caller]
pub(crate) fn assert_label_name(name: &str, from: &str) {
    let mut chars = name.chars();
    let valid = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    assert!(
        valid,
        "shardcount: {from}: {name:?} is not a label name: it must match [a-zA-Z_][a-zA-Z0-9_]*"
    );
}

/// A family of labelled numbers exported together: a
/// [`CounterSet`] (labelled by index) or a
/// [`CounterMap`] (labelled by key), and every
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
    /// for a [`LabelledCounter`] of a struct or
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
    /// ([`CounterMap::with_label_name`](CounterMap::with_label_name),
    /// [`CounterSet::with_label_name`](CounterSet::with_label_name)).
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

impl Count for Counter {
    const KIND: Kind = Kind::Counter;

    /// [`Counter::sum`](Counter::sum).
    #[inline]
    fn read(&self) -> u64 {
        self.sum()
    }
}

impl Count for RoughCounter {
    const KIND: Kind = Kind::Counter;

    /// [`RoughCounter::sum`](RoughCounter::sum): exact (every slot),
    /// not the lagging `approx()`.
    #[inline]
    fn read(&self) -> u64 {
        self.sum()
    }
}

impl<K: LocalKey> Count for LocalCounter<K> {
    const KIND: Kind = Kind::Counter;

    /// [`LocalCounter::sum`](LocalCounter::sum) (the tally and every
    /// live thread's pending counts), not `approx()`.
    #[inline]
    fn read(&self) -> u64 {
        // Each key type has exactly one counter, the `static` itself; its
        // reads take `&'static self`.
        K::counter().sum()
    }
}

impl Count for MaxCounter {
    const KIND: Kind = Kind::Gauge;

    /// [`MaxCounter::get`](MaxCounter::get).
    #[inline]
    fn read(&self) -> u64 {
        self.get()
    }
}

impl Count for MinCounter {
    const KIND: Kind = Kind::Gauge;

    /// [`MinCounter::get`](MinCounter::get).
    #[inline]
    fn read(&self) -> u64 {
        self.get()
    }
}

impl Count for Stock {
    const KIND: Kind = Kind::Gauge;

    /// [`Stock::sum`](Stock::sum) (under the stock's slow-path
    /// lock).
    #[inline]
    fn read(&self) -> u64 {
        self.sum()
    }
}

/// A family of [`len`](CounterSet::len) counters labelled by index
/// (`0`, `1`, ...), each read with [`get`](CounterSet::get).
///
/// ```
/// use shardcount::{CountFamily, CounterSet};
/// let s = CounterSet::new(2);
/// s.add(1, 4);
/// let mut v = Vec::new();
/// s.read_each(|i, n| v.push((*i, n)));
/// assert_eq!(v, [(0, 0), (1, 4)]);
/// ```
impl CountFamily for CounterSet {
    const MEMBER_KIND: Kind = Kind::Counter;
    const LABEL_NAME: Option<&'static str> = Some("index");
    type Label = usize;

    fn label_names(&self) -> &[&'static str] {
        &self.label
    }

    fn read_each(&self, mut f: impl FnMut(&usize, u64)) {
        for i in 0..self.len() {
            f(&i, self.total(i));
        }
    }
}

/// A family labelled by key (`K: Display` shows it), each member read as
/// [`get`](CounterMap::get) reads it. Keys are visited in the order of
/// first use under the lock that new keys take (new keys wait; adds and
/// lookups of interned keys do not); nothing is cloned or allocated. `f`
/// runs under the lock: as [`retain`](CounterMap::retain)'s closure, it
/// may add to the map (a new key's add counts in the overflow) but must
/// not read or remove from it. The
/// [`overflow`](CounterMap::overflow) counter is not a member: it has no
/// key.
///
/// ```
/// use shardcount::{CountFamily, CounterMap};
/// let m: CounterMap<String> = CounterMap::new();
/// m.add(&"/about".to_string(), 2);
/// let mut v = Vec::new();
/// m.read_each(|k, n| v.push(format!("{k} {n}")));
/// assert_eq!(v, ["/about 2"]);
/// ```
impl<K> CountFamily for CounterMap<K>
where
    K: fmt::Display + Hash + Eq + Clone + Send + Sync,
{
    const MEMBER_KIND: Kind = Kind::Counter;
    const LABEL_NAME: Option<&'static str> = Some("key");
    type Label = K;

    fn label_names(&self) -> &[&'static str] {
        &self.label
    }

    fn read_each(&self, f: impl FnMut(&K, u64)) {
        self.read_each_key(f);
    }
}

/// A family of `L::COUNT` counters with one label per name in `L::NAMES`,
/// each member's values its texts ([`Label::text`]).
///
/// ```
/// use shardcount::contract::CountFamily;
/// use shardcount::{Label, LabelledCounter};
///
/// #[derive(Clone, Copy, Label)]
/// enum Method { Get, Post }
/// #[derive(Clone, Copy, Label)]
/// enum Status { Ok, Failed }
///
/// let c = LabelledCounter::new();
/// c.add((Method::Post, Status::Ok), 3);
/// assert_eq!(<LabelledCounter<(Method, Status)>>::LABEL_NAMES, ["method", "status"]);
/// let mut seen = Vec::new();
/// c.read_each_labels(|texts, v| seen.push((texts.join("/"), v)));
/// assert_eq!(seen[2], ("post/ok".to_string(), 3));
/// ```
impl<L: Label> CountFamily for LabelledCounter<L> {
    const MEMBER_KIND: Kind = Kind::Counter;
    const LABEL_NAME: Option<&'static str> = match L::NAMES {
        [first, ..] => Some(first),
        [] => None,
    };
    const LABEL_NAMES: &'static [&'static str] = L::NAMES;
    /// The label texts, comma-separated.
    type Label = str;

    fn read_each(&self, mut f: impl FnMut(&str, u64)) {
        let mut text = String::new();
        for i in 0..L::COUNT {
            text.clear();
            // Writing to a `String` cannot fail.
            let _ = LabelledCounter::<L>::write_texts(i, &mut text);
            f(&text, self.get_index(i));
        }
    }

    fn read_each_labels(&self, mut f: impl FnMut(&[&str], u64)) {
        let mut texts: Vec<&'static str> = Vec::with_capacity(L::NAMES.len());
        for i in 0..L::COUNT {
            texts.clear();
            texts.extend((0..L::NAMES.len()).map(|dim| L::text(i, dim).unwrap_or("")));
            f(&texts, self.get_index(i));
        }
    }
}

/// A distribution of recorded values, read whole: what the integrations
/// encode as a histogram (cumulative `le` buckets, a count and a sum) and
/// the [`Exporter`](crate::export::Exporter) ships as `{key}_count` and
/// `{key}_sum`. Implemented by [`Histogram`].
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
    /// as [`Histogram::snapshot`](Histogram::snapshot).
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
    fn read_distribution(&self) -> HistogramSnapshot;
}

impl Distribution for Histogram {
    fn read_distribution(&self) -> HistogramSnapshot {
        self.snapshot()
    }
}

/// A family of labelled distributions exported together: a
/// [`LabelledHistogram`], and every
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
    fn read_each_distribution(&self, f: impl FnMut(&[&str], HistogramSnapshot));
}

impl<D: Distribution> DistributionFamily for D {
    const LABEL_NAMES: &'static [&'static str] = &[];

    fn read_each_distribution(&self, mut f: impl FnMut(&[&str], HistogramSnapshot)) {
        f(&[], self.read_distribution());
    }
}

/// A family of `L::COUNT` histograms with one label per name in
/// `L::NAMES`, each member's values its texts ([`Label::text`]).
///
/// ```
/// use shardcount::contract::DistributionFamily;
/// use shardcount::{Label, LabelledHistogram};
///
/// #[derive(Clone, Copy, Label)]
/// enum Op { Read, Write }
///
/// let h = LabelledHistogram::new();
/// h.record(Op::Write, 5);
/// let mut seen = Vec::new();
/// h.read_each_distribution(|texts, s| seen.push((texts.join(","), s.count())));
/// assert_eq!(seen, [("read".to_string(), 0), ("write".to_string(), 1)]);
/// assert_eq!(<LabelledHistogram<Op>>::LABEL_NAMES, ["op"]);
/// ```
impl<L: Label> DistributionFamily for LabelledHistogram<L> {
    const LABEL_NAMES: &'static [&'static str] = L::NAMES;

    fn read_each_distribution(&self, mut f: impl FnMut(&[&str], HistogramSnapshot)) {
        let mut texts: Vec<&'static str> = Vec::with_capacity(L::NAMES.len());
        for i in 0..L::COUNT {
            texts.clear();
            texts.extend((0..L::NAMES.len()).map(|dim| L::text(i, dim).unwrap_or("")));
            f(&texts, self.snapshot_index(i));
        }
    }
}
