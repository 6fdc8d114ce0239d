//! `Serialize` for [`HistogramSnapshot`].

use crate::histogram::HistogramSnapshot;
use ::serde::ser::{Serialize, SerializeMap, SerializeSeq, SerializeStruct, Serializer};

/// A histogram's snapshot is a map of four entries, in this order: `kind`
/// (`"histogram"`), `count`, `sum` (`u64`, modulo 2<sup>64</sup>) and
/// `buckets`, the buckets that hold records in increasing order, each
/// `{"low":..,"high":..,"count":..}` with inclusive bounds in the unit
/// recorded (the last bucket's `high` is `u64::MAX`). As for counters, the
/// shape is part of the crate's API.
///
/// ```
/// let h = shardcount::Histogram::with_bounds(&[10, 100]);
/// h.record(5);
/// h.record(50);
/// h.record(60);
/// assert_eq!(
///     serde_json::to_string(&h.snapshot()).unwrap(),
///     r#"{"kind":"histogram","count":3,"sum":115,"buckets":[{"low":0,"high":10,"count":1},{"low":11,"high":100,"count":2}]}"#
/// );
/// ```
impl Serialize for HistogramSnapshot {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut s = serializer.serialize_struct("HistogramSnapshot", 4)?;
        s.serialize_field("kind", "histogram")?;
        s.serialize_field("count", &self.count())?;
        s.serialize_field("sum", &self.sum())?;
        s.serialize_field("buckets", &Buckets(self))?;
        s.end()
    }
}

/// The buckets holding records, as a sequence of maps.
struct Buckets<'a>(&'a HistogramSnapshot);

impl Serialize for Buckets<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(None)?;
        for b in self.0.buckets().filter(|b| b.count > 0) {
            seq.serialize_element(&Bucket(b))?;
        }
        seq.end()
    }
}

struct Bucket(crate::Bucket);

impl Serialize for Bucket {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut m = serializer.serialize_map(Some(3))?;
        m.serialize_entry("low", &self.0.low)?;
        m.serialize_entry("high", &self.0.high)?;
        m.serialize_entry("count", &self.0.count)?;
        m.end()
    }
}
