//! Where a fleet's counters live in a Redis Cluster: counter keys hashed
//! into buckets, each bucket one hash tag, so one slot and one master.

use super::slot::{slot_of, SLOTS};
use std::fmt;

/// The most buckets a [`ClusterKeys`] takes (finding each bucket's tag
/// costs about as many hashes as there are buckets).
pub const MAX_BUCKETS: usize = 1024;

/// The Redis keys of a fleet's counters in a Redis Cluster (module docs
/// of [`redis_cluster`](super)).
///
/// Counter `k` goes to bucket `fnv1a64(k) % buckets` (FNV-1a, 64 bits, of
/// the key's UTF-8 bytes: stable across processes, versions and
/// platforms), and lives at `<prefix>{<tag>}<k>`, where bucket `b`'s tag
/// is the first `b.j` (`j` = 0, 1, ...) whose slot lies in the `b`-th of
/// `buckets` equal ranges of the 16,384 slots. So buckets spread evenly
/// over the slot space, and over masters that own equal slot ranges (what
/// `redis-cli --cluster create` sets up). Every process of a fleet must use
/// the same prefix and bucket count: either decides where a key lives.
///
/// ```
/// use shardcount::export::redis_cluster::ClusterKeys;
///
/// let keys = ClusterKeys::new("app:", 16);
/// let k = keys.key("requests");
/// assert!(k.starts_with("app:{"));
/// assert!(k.ends_with("}requests"));
/// // A bucket's counters and its writers hash share one hash tag.
/// let b = keys.bucket_of("requests");
/// let tag = &k[4..k.find('}').unwrap() + 1];
/// assert!(keys.writers_key(b).contains(tag));
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterKeys {
    prefix: String,
    tags: Vec<String>,
}

impl ClusterKeys {
    /// The layout for `buckets` buckets under `prefix`.
    ///
    /// # Panics
    ///
    /// If `buckets` is 0 or above [`MAX_BUCKETS`], or `prefix` holds `{`
    /// or `}` (it would change which part of each key Redis hashes).
    ///
    /// ```should_panic
    /// shardcount::export::redis_cluster::ClusterKeys::new("{app}:", 16);
    /// ```
    #[must_use]
    pub fn new(prefix: &str, buckets: usize) -> ClusterKeys {
        assert!(
            (1..=MAX_BUCKETS).contains(&buckets),
            "shardcount: ClusterKeys::new: buckets must be 1..={MAX_BUCKETS}, not {buckets}"
        );
        assert!(
            !prefix.contains(['{', '}']),
            "shardcount: ClusterKeys::new: the prefix {prefix:?} must not hold `{{` or `}}`"
        );
        let tags = (0..buckets)
            .map(|b| {
                let range = |b: usize| (b * usize::from(SLOTS) / buckets) as u16;
                let (lo, hi) = (range(b), range(b + 1));
                (0u32..)
                    .map(|j| format!("{b}.{j}"))
                    .find(|tag| (lo..hi).contains(&slot_of(tag)))
                    .expect("every slot range holds some tag")
            })
            .collect();
        ClusterKeys {
            prefix: prefix.to_owned(),
            tags,
        }
    }

    /// How many buckets.
    ///
    /// ```
    /// assert_eq!(shardcount::export::redis_cluster::ClusterKeys::new("", 4).buckets(), 4);
    /// ```
    #[must_use]
    pub fn buckets(&self) -> usize {
        self.tags.len()
    }

    /// The prefix every key starts with.
    ///
    /// ```
    /// assert_eq!(shardcount::export::redis_cluster::ClusterKeys::new("a:", 4).prefix(), "a:");
    /// ```
    #[must_use]
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The bucket counter `key` belongs to.
    ///
    /// ```
    /// let keys = shardcount::export::redis_cluster::ClusterKeys::new("", 8);
    /// assert!(keys.bucket_of("requests") < 8);
    /// ```
    #[must_use]
    pub fn bucket_of(&self, key: &str) -> usize {
        (fnv1a64(key.as_bytes()) % self.tags.len() as u64) as usize
    }

    /// The Redis key holding counter `key`'s fleet total.
    ///
    /// ```
    /// let keys = shardcount::export::redis_cluster::ClusterKeys::new("app:", 1);
    /// assert_eq!(keys.key("hits"), "app:{0.0}hits");
    /// ```
    #[must_use]
    pub fn key(&self, key: &str) -> String {
        let mut out = String::new();
        self.push_key(&mut out, self.bucket_of(key), key);
        out
    }

    /// The hash of writers' batch numbers of `bucket` (what
    /// [`RedisSink::writers_key`](super::super::redis::RedisSink::writers_key)
    /// is for one server).
    ///
    /// # Panics
    ///
    /// If `bucket` is not below [`buckets`](Self::buckets).
    ///
    /// ```
    /// let keys = shardcount::export::redis_cluster::ClusterKeys::new("app:", 1);
    /// assert_eq!(keys.writers_key(0), "app:{0.0}__writers");
    /// ```
    #[must_use]
    pub fn writers_key(&self, bucket: usize) -> String {
        let mut out = String::new();
        self.push_key(&mut out, bucket, "__writers");
        out
    }

    /// The slot bucket `bucket`'s keys live in (Redis Cluster's
    /// `CLUSTER KEYSLOT` of any of them).
    ///
    /// # Panics
    ///
    /// If `bucket` is not below [`buckets`](Self::buckets).
    ///
    /// ```
    /// let keys = shardcount::export::redis_cluster::ClusterKeys::new("", 4);
    /// // Bucket 1 of 4 lies in the second quarter of the 16,384 slots.
    /// assert!((4096..8192).contains(&keys.slot(1)));
    /// ```
    #[must_use]
    pub fn slot(&self, bucket: usize) -> u16 {
        slot_of(&self.tags[bucket])
    }

    /// Appends `<prefix>{<tag of bucket>}<name>` to `out`.
    pub(crate) fn push_key(&self, out: &mut String, bucket: usize, name: &str) {
        out.push_str(&self.prefix);
        out.push('{');
        out.push_str(&self.tags[bucket]);
        out.push('}');
        out.push_str(name);
    }
}

impl fmt::Debug for ClusterKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterKeys")
            .field("prefix", &self.prefix)
            .field("buckets", &self.tags.len())
            .finish()
    }
}

/// FNV-1a, 64 bits: a fixed function, so every process agrees.
fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::{fnv1a64, ClusterKeys};
    use crate::export::redis_cluster::slot::slot_of;

    #[test]
    fn fnv1a64_matches_its_published_values() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn buckets_take_equal_slot_ranges_in_order() {
        let keys = ClusterKeys::new("p:", 48);
        let slots: Vec<u16> = (0..48).map(|b| keys.slot(b)).collect();
        for (b, s) in slots.iter().enumerate() {
            assert_eq!(usize::from(*s) * 48 / 16384, b, "bucket {b} at slot {s}");
        }
        // Every key of a bucket, and its writers hash, hash to its slot.
        for name in ["a", "requests", "x{y}z", ""] {
            let b = keys.bucket_of(name);
            assert_eq!(slot_of(&keys.key(name)), keys.slot(b));
            assert_eq!(slot_of(&keys.writers_key(b)), keys.slot(b));
        }
    }

    #[test]
    fn keys_spread_evenly_over_buckets() {
        let keys = ClusterKeys::new("", 16);
        let mut per = [0u32; 16];
        for i in 0..16_000 {
            per[keys.bucket_of(&format!("key-{i}"))] += 1;
        }
        assert!(per.iter().all(|&n| (800..1200).contains(&n)), "{per:?}");
    }

    #[test]
    #[should_panic(expected = "buckets must be 1..=1024")]
    fn zero_buckets_panic() {
        let _ = ClusterKeys::new("", 0);
    }
}
