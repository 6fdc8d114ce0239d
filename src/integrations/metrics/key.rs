//! `metrics` keys as the layer's maps and caches use them: hashed by the
//! hash they carry, compared by their strings' addresses first.

use ::metrics::Key;
use metrics_util::KeyHasher;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;

/// Keys hash to the hash they carry (`Key` writes exactly one `u64`).
pub(super) type KeyMap<V> = HashMap<Key, V, BuildHasherDefault<KeyHasher>>;

/// `a == b`, deciding most equal keys from their strings' addresses and
/// lengths alone, and otherwise by `Key`'s own comparison (which also
/// accepts the same labels in another order).
#[inline]
pub(super) fn same_key(a: &Key, b: &Key) -> bool {
    #[inline]
    fn same_place(a: &str, b: &str) -> bool {
        std::ptr::eq(a, b)
    }
    let fast = a.get_hash() == b.get_hash()
        && same_place(a.name(), b.name())
        && a.labels().len() == b.labels().len()
        && a.labels()
            .zip(b.labels())
            .all(|(x, y)| same_place(x.key(), y.key()) && same_place(x.value(), y.value()));
    fast || a == b
}

#[cfg(test)]
mod tests {
    use super::*;
    use ::metrics::Label;

    /// Keys built from the same strings, from copies of them, or with their
    /// labels in another order are the same key; another value is not.
    #[test]
    fn same_key_by_place_by_bytes_and_in_any_label_order() {
        let labels =
            |a: &str, b: &str| vec![Label::new("a", a.to_owned()), Label::new("b", b.to_owned())];
        let key = Key::from_parts("k", labels("1", "2"));
        assert!(same_key(&key, &key.clone()));
        assert!(same_key(
            &key,
            &Key::from_parts(String::from("k"), labels("1", "2"))
        ));
        let swapped = vec![Label::new("b", "2"), Label::new("a", "1")];
        assert!(same_key(&key, &Key::from_parts("k", swapped)));
        assert!(!same_key(&key, &Key::from_parts("k", labels("1", "3"))));
    }
}
