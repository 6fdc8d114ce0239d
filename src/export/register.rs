//! What [`Exporter::register`](super::exporter::Exporter::register) keeps:
//! the counter (`&'static T` or `Arc<T>`) and its key, as a [`Source`] over
//! the contract.

use super::source::Source;
use crate::contract::{CountFamily, CountRef};
use crate::primitive::sync::{lock, Mutex};
use std::fmt::Write as _;

/// Where a member whose label's `Display` fails is reported: a reserved
/// key, so its counts go to `ExportStats::rejected`, never to the sink.
const UNPRINTABLE: &str = "__unprintable_label";

/// A registered counter: each member exported under `key` followed by its
/// label (a member of several labels: their texts, comma-separated).
pub(super) struct Registered<H> {
    held: H,
    /// Starts with the key; a member's label is written after it, so the
    /// key of a member seen before costs no allocation.
    name: Mutex<String>,
    key_len: usize,
}

impl<H: CountRef> Registered<H>
where
    H::Target: CountFamily,
{
    /// # Panics
    ///
    /// If a member's key could start with `__` (see `Exporter::register`).
    #[track_caller]
    pub(super) fn new(key: &str, held: H) -> Self {
        let family = !<H::Target as CountFamily>::LABEL_NAMES.is_empty();
        assert!(
            !key.starts_with(super::source::RESERVED_PREFIX)
                && !(family && (key.is_empty() || key == "_")),
            "shardcount: Exporter::register({key:?}): keys starting with `__` are reserved \
             for sinks' bookkeeping (a family's key must not be \"\" or \"_\" either, as a \
             label could complete the prefix)"
        );
        Registered {
            held,
            name: Mutex::new(key.to_owned()),
            key_len: key.len(),
        }
    }
}

impl<H: CountRef> Source for Registered<H>
where
    H::Target: CountFamily,
{
    fn read(&self, f: &mut dyn FnMut(&str, u64)) {
        let mut name = lock(&self.name);
        let family = &*self.held;
        let several = <H::Target as CountFamily>::LABEL_NAMES.len() > 1;
        if !several {
            family.read_each(|label, value| {
                name.truncate(self.key_len);
                // Writing to a `String` fails only when the label's
                // `Display` does, part-way: never export under that
                // partial key.
                match write!(name, "{label}") {
                    Ok(()) => f(&name, value),
                    Err(_) => f(UNPRINTABLE, value),
                }
            });
            return;
        }
        // A member of several labels (a `Label` type's texts, which cannot
        // fail): its texts, comma-separated.
        family.read_each_labels(|texts, value| {
            name.truncate(self.key_len);
            for (i, text) in texts.iter().enumerate() {
                if i > 0 {
                    name.push(',');
                }
                name.push_str(text);
            }
            f(&name, value);
        });
    }

    fn is_live(&self) -> bool {
        self.held.is_live()
    }
}

#[cfg(all(test, not(shardcount_loom)))]
mod tests {
    #[test]
    fn unprintable_labels_go_to_a_reserved_key() {
        assert!(super::UNPRINTABLE.starts_with(super::super::source::RESERVED_PREFIX));
    }
}
