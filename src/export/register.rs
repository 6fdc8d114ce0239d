//! What [`Exporter::register`](super::Exporter::register) keeps: the
//! counter (`&'static T` or `Arc<T>`) and its key, as a [`Source`] over the
//! contract.

use super::Source;
use crate::contract::CountFamily;
use crate::primitive::sync::{lock, Mutex};
use std::fmt::Write as _;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

/// How an [`Exporter`](super::Exporter) holds a counter it exports: a
/// `&'static T` (a `static`, `local_counter!` statics included) or an
/// `Arc<T>`, for any `T` that implements
/// [`CountFamily`](crate::CountFamily) (every counter type does). Sealed:
/// implemented for those two only.
///
/// An `Arc` is let go of once the exporter holds its last reference (no
/// other `Arc` or `Weak` is left): it is read one last time, so its final
/// counts are exported, and then dropped. A `static` is held for ever.
///
/// ```
/// use shardcount::export::CountRef;
/// use shardcount::{Counter, CounterSet};
/// use std::sync::Arc;
///
/// fn registrable(_: impl CountRef) {}
/// static HITS: Counter = Counter::new();
/// registrable(&HITS);
/// registrable(Arc::new(CounterSet::new(4)));
/// ```
pub trait CountRef: sealed::Held {}

impl<T: CountFamily + 'static> CountRef for &'static T {}
impl<T: CountFamily + 'static> CountRef for Arc<T> {}

pub(super) mod sealed {
    use crate::contract::CountFamily;

    /// What `CountRef` needs, out of users' reach.
    pub trait Held: Send + Sync + 'static {
        /// The counter type.
        type Target: CountFamily;
        /// The counter.
        fn target(&self) -> &Self::Target;
        /// Whether anyone else can still change it.
        fn is_live(&self) -> bool;
    }
}

impl<T: CountFamily + 'static> sealed::Held for &'static T {
    type Target = T;

    fn target(&self) -> &T {
        self
    }

    fn is_live(&self) -> bool {
        true
    }
}

impl<T: CountFamily + 'static> sealed::Held for Arc<T> {
    type Target = T;

    fn target(&self) -> &T {
        self
    }

    fn is_live(&self) -> bool {
        // Ours is the only handle, and none can be made again (no `Weak`
        // to upgrade): nobody else can add. Once false, it stays false.
        let alone = Arc::strong_count(self) == 1 && Arc::weak_count(self) == 0;
        if alone {
            // Acquire: the other handles were dropped with Release
            // decrements, which these loads read; the adds made before
            // those drops are then seen by the last read.
            fence(Ordering::Acquire);
        }
        !alone
    }
}

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

impl<H: CountRef> Registered<H> {
    /// # Panics
    ///
    /// If a member's key could start with `__` (see `Exporter::register`).
    #[track_caller]
    pub(super) fn new(key: &str, held: H) -> Self {
        let family = !<H::Target as CountFamily>::LABEL_NAMES.is_empty();
        assert!(
            !key.starts_with(super::RESERVED_PREFIX) && !(family && (key.is_empty() || key == "_")),
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

impl<H: CountRef> Source for Registered<H> {
    fn read(&self, f: &mut dyn FnMut(&str, u64)) {
        let mut name = lock(&self.name);
        let family = self.held.target();
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
        assert!(super::UNPRINTABLE.starts_with(super::super::RESERVED_PREFIX));
    }
}
