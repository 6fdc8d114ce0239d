//! [`CountRef`]: how the exporter, the merger and the integrations hold a
//! counter they read from another thread: an `Arc` or a `&'static`.

use std::ops::Deref;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

/// A handle to a counter (any counter type, family or histogram) that can
/// be read from another thread for as long as the holder keeps it: a
/// `&'static T` (a `static`, `local_counter!` statics included) or an
/// `Arc<T>`. Sealed: implemented for those two only. It dereferences to
/// the counter.
///
/// Every API that keeps a counter to read later takes one:
/// [`Exporter::register`](crate::export::Exporter::register),
/// [`Merger::watch`](crate::merger::Merger::watch), and the integrations'
/// collectors and replays. An `Arc` the exporter holds the last reference
/// to (no other `Arc` or `Weak` is left) is read one last time, so its
/// final counts are exported, and then dropped; a `static` is held for
/// ever.
///
/// ```
/// use shardcount::contract::CountRef;
/// use shardcount::{Counter, Histogram};
/// use std::sync::Arc;
///
/// fn keep<P: CountRef>(p: P) -> P { p }
/// static HITS: Counter = Counter::new();
/// keep(&HITS).inc();
/// let h = keep(Arc::new(Histogram::new()));
/// h.record(3);
/// assert_eq!((HITS.sum(), h.count()), (1, 1));
/// ```
pub trait CountRef:
    Deref<Target: Send + Sync + 'static> + Clone + Send + Sync + 'static + sealed::Held
{
}

impl<T: Send + Sync + 'static> CountRef for &'static T {}
impl<T: Send + Sync + 'static> CountRef for Arc<T> {}

pub(crate) mod sealed {
    use std::ops::Deref;

    /// What [`CountRef`](super::CountRef) offers inside the crate only.
    pub trait Held: Deref {
        /// Whether anyone else can still change the counter.
        fn is_live(&self) -> bool;
        /// The handle as the one enum that stores either kind.
        fn into_holder(self) -> super::Holder<Self::Target>
        where
            Self: Sized;
    }
}

/// A [`CountRef`] of a known counter type, stored: what a type that must
/// name its field (`prometheus_client::Shared`) keeps.
pub enum Holder<T: ?Sized + 'static> {
    /// Shared with other `Arc`s.
    Arc(Arc<T>),
    /// A `static`.
    Static(&'static T),
}

impl<T: ?Sized> std::fmt::Debug for Holder<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Holder::Arc(_) => "Arc",
            Holder::Static(_) => "Static",
        })
    }
}

impl<T: ?Sized> Holder<T> {
    /// The counter.
    #[inline]
    pub fn get(&self) -> &T {
        match self {
            Holder::Arc(a) => a,
            Holder::Static(s) => s,
        }
    }
}

impl<T: ?Sized> Clone for Holder<T> {
    fn clone(&self) -> Self {
        match self {
            Holder::Arc(a) => Holder::Arc(Arc::clone(a)),
            Holder::Static(s) => Holder::Static(s),
        }
    }
}

impl<T: 'static> sealed::Held for &'static T {
    fn is_live(&self) -> bool {
        true
    }

    fn into_holder(self) -> Holder<T> {
        Holder::Static(self)
    }
}

impl<T: 'static> sealed::Held for Arc<T> {
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

    fn into_holder(self) -> Holder<T> {
        Holder::Arc(self)
    }
}
