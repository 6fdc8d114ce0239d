//! [`serde`] (feature `serde`): [`Snapshot`], the value of any
//! counter type or family, read once, in one stable serialized shape.
//!
//! # The shape
//!
//! A single count ([`Counter`](crate::Counter),
//! [`RoughCounter`](crate::RoughCounter), a `local_counter!`,
//! [`MaxCounter`](crate::MaxCounter), [`MinCounter`](crate::MinCounter),
//! [`Stock`](crate::Stock)) is a map of two entries:
//!
//! ```text
//! {"kind":"counter","value":5}
//! ```
//!
//! A family ([`CounterSet`](crate::CounterSet),
//! [`CounterMap`](crate::CounterMap)) is a map of three: its kind, the name
//! of the label that tells members apart
//! ([`CountFamily::LABEL_NAME`]: `"index"` or `"key"`), and a map from each
//! member's label (its `Display`) to its value:
//!
//! ```text
//! {"kind":"counter","label":"key","values":{"/a":3,"/b":1}}
//! ```
//!
//! * `kind` is `"counter"` or `"gauge"` ([`Kind`]);
//! * values are `u64`, written as integers (serde_json writes every digit;
//!   a JavaScript reader loses precision above 2<sup>53</sup>);
//! * members are in a fixed order, so equal families serialize to equal
//!   text: labels that are integers (a set's indices) first, by value,
//!   then the rest by their text;
//! * an empty family has `"values":{}`;
//! * members whose labels show alike (two keys of a `CounterMap` with one
//!   `Display` text) are one entry, their sum, as the
//!   [`Exporter`](crate::export::Exporter) ships them;
//! * a member whose label's `Display` returns an error is left out;
//! * a gauge is its read, unset too: a `MaxCounter`'s 0, a `MinCounter`'s
//!   `u64::MAX`, as every integration exports them.
//!
//! A family of several labels (a [`LabelledCounter`](crate::LabelledCounter)
//! of a struct or tuple of labels) has `"labels"`, the list of their
//! names ([`CountFamily::LABEL_NAMES`]), in place of `"label"`, and each
//! member's entry is its texts, comma-separated; a one-label family has the
//! shape above:
//!
//! ```text
//! {"kind":"counter","labels":["method","status"],"values":{"get,ok":3,"post,ok":1}}
//! ```
//!
//! The fields are in the order above. The shape is part of the crate's
//! API: a change to it is a breaking change.
//!
//! ```
//! use shardcount::integrations::serde::Snapshot;
//! use shardcount::{Counter, CounterMap, CounterSet, MaxCounter};
//!
//! let requests = Counter::new();
//! requests.add(5);
//! assert_eq!(
//!     serde_json::to_string(&Snapshot::of(&requests)).unwrap(),
//!     r#"{"kind":"counter","value":5}"#
//! );
//!
//! let peak = MaxCounter::new();
//! peak.record(12);
//! assert_eq!(
//!     serde_json::to_string(&Snapshot::of(&peak)).unwrap(),
//!     r#"{"kind":"gauge","value":12}"#
//! );
//!
//! let routes: CounterMap<&str> = CounterMap::new();
//! routes.add(&"/b", 1);
//! routes.add(&"/a", 3);
//! assert_eq!(
//!     serde_json::to_string(&Snapshot::of(&routes)).unwrap(),
//!     r#"{"kind":"counter","label":"key","values":{"/a":3,"/b":1}}"#
//! );
//!
//! let shards = CounterSet::new(3);
//! shards.add(2, 7);
//! assert_eq!(
//!     serde_json::to_string(&Snapshot::of(&shards)).unwrap(),
//!     r#"{"kind":"counter","label":"index","values":{"0":0,"1":0,"2":7}}"#
//! );
//! ```

#[cfg(doc)]
use crate::contract::Count;
use crate::contract::{CountFamily, Kind};
use ::serde::ser::{Serialize, SerializeMap, SerializeStruct, Serializer};

mod histogram;

/// The value of a counter or family, read once (each member with its
/// type's exact read, one after another), ready to serialize in [the
/// shape the module documents](self#the-shape).
///
/// ```
/// use shardcount::integrations::serde::Snapshot;
/// use shardcount::contract::Kind;
///
/// let stock = shardcount::Stock::new(10);
/// stock.try_sub(3).unwrap();
/// let snap = Snapshot::of(&stock);
/// assert_eq!((snap.kind(), snap.value()), (Kind::Gauge, Some(7)));
/// assert_eq!(serde_json::to_string(&snap).unwrap(), r#"{"kind":"gauge","value":7}"#);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    kind: Kind,
    /// `None` for a single count.
    label: Option<&'static str>,
    /// Empty for a single count.
    labels: Vec<&'static str>,
    /// In the documented order; one member labelled `""` for a single
    /// count.
    values: Vec<(String, u64)>,
}

impl Snapshot {
    /// Reads `counter`: a single [`Count`] or a [`CountFamily`], each
    /// member with [`CountFamily::read_each`] (so, like it, not a snapshot
    /// of one instant while other threads add).
    ///
    /// ```
    /// use shardcount::integrations::serde::Snapshot;
    /// shardcount::local_counter!(static SENT);
    /// SENT.add(2);
    /// assert_eq!(Snapshot::of(&SENT).value(), Some(2));
    /// ```
    pub fn of<F: CountFamily + ?Sized>(counter: &F) -> Snapshot {
        let mut values = Vec::new();
        // A member whose label's `Display` fails is left out (see
        // `CountFamily::read_each_labels`).
        counter.read_each_labels(|texts, value| values.push((texts.join(","), value)));
        // Integers (a set's indices) by value first, then the rest by text:
        // a total order, so the text is the same for equal families.
        values.sort_by(|(a, _), (b, _)| order(a).cmp(&order(b)));
        // Labels shown alike are now side by side: one entry, their sum.
        values.dedup_by(|later, kept| {
            let same = later.0 == kept.0;
            if same {
                kept.1 = kept.1.wrapping_add(later.1);
            }
            same
        });
        Snapshot {
            kind: F::MEMBER_KIND,
            label: counter.label_names().first().copied(),
            labels: counter.label_names().to_vec(),
            values,
        }
    }

    /// Counter or gauge.
    ///
    /// ```
    /// use shardcount::{contract::Kind, integrations::serde::Snapshot};
    /// assert_eq!(Snapshot::of(&shardcount::MinCounter::new()).kind(), Kind::Gauge);
    /// ```
    #[must_use]
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The label name of a family's members (`"index"`, `"key"`); `None`
    /// for a single count.
    ///
    /// ```
    /// use shardcount::integrations::serde::Snapshot;
    /// assert_eq!(Snapshot::of(&shardcount::CounterSet::new(1)).label_name(), Some("index"));
    /// assert_eq!(Snapshot::of(&shardcount::Counter::new()).label_name(), None);
    /// ```
    #[must_use]
    pub fn label_name(&self) -> Option<&'static str> {
        self.label
    }

    /// The label names of a family's members, one per label (empty for a
    /// single count; one for a set or map).
    ///
    /// ```
    /// use shardcount::integrations::serde::Snapshot;
    /// #[derive(shardcount::Label)]
    /// enum Method { Get, Post }
    /// #[derive(shardcount::Label)]
    /// enum Status { Ok, Failed }
    /// let family = shardcount::LabelledCounter::<(Method, Status)>::new();
    /// assert_eq!(Snapshot::of(&family).label_names(), ["method", "status"]);
    /// assert_eq!(Snapshot::of(&shardcount::CounterSet::new(1)).label_names(), ["index"]);
    /// ```
    #[must_use]
    pub fn label_names(&self) -> &[&'static str] {
        &self.labels
    }

    /// A single count's value; `None` for a family.
    ///
    /// ```
    /// use shardcount::integrations::serde::Snapshot;
    /// assert_eq!(Snapshot::of(&shardcount::Counter::from(4)).value(), Some(4));
    /// assert_eq!(Snapshot::of(&shardcount::CounterSet::new(1)).value(), None);
    /// ```
    #[must_use]
    pub fn value(&self) -> Option<u64> {
        match (self.label, self.values.as_slice()) {
            (None, [(_, v)]) => Some(*v),
            _ => None,
        }
    }

    /// Each member's label and value, in the documented order (a single
    /// count: one member labelled `""`).
    ///
    /// ```
    /// use shardcount::integrations::serde::Snapshot;
    /// let set = shardcount::CounterSet::new(2);
    /// set.add(1, 3);
    /// assert_eq!(Snapshot::of(&set).values(), [("0".to_string(), 0), ("1".to_string(), 3)]);
    /// ```
    #[must_use]
    pub fn values(&self) -> &[(String, u64)] {
        &self.values
    }
}

impl Serialize for Snapshot {
    /// [The documented shape](self#the-shape), as a struct named
    /// `Snapshot` (a map in self-describing formats such as JSON).
    ///
    /// ```
    /// use shardcount::integrations::serde::Snapshot;
    /// let json = serde_json::to_value(Snapshot::of(&shardcount::RoughCounter::from(3))).unwrap();
    /// assert_eq!(json, serde_json::json!({"kind": "counter", "value": 3}));
    /// ```
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let kind = match self.kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        };
        match self.label {
            None => {
                let mut s = serializer.serialize_struct("Snapshot", 2)?;
                s.serialize_field("kind", kind)?;
                // A single count has exactly one member (`Count`'s impl).
                s.serialize_field("value", &self.values.first().map_or(0, |&(_, v)| v))?;
                s.end()
            }
            Some(label) => {
                let mut s = serializer.serialize_struct("Snapshot", 3)?;
                s.serialize_field("kind", kind)?;
                if self.labels.len() > 1 {
                    s.serialize_field("labels", &self.labels)?;
                } else {
                    s.serialize_field("label", label)?;
                }
                s.serialize_field("values", &Members(&self.values))?;
                s.end()
            }
        }
    }
}

/// A member label's place in the order: an integer's value (`Ok` sorts
/// first), then the text.
fn order(label: &str) -> (Result<u64, ()>, &str) {
    (label.parse().map_err(|_| ()), label)
}

/// A family's members as one map, label to value.
struct Members<'a>(&'a [(String, u64)]);

impl Serialize for Members<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (label, value) in self.0 {
            map.serialize_entry(label, value)?;
        }
        map.end()
    }
}
