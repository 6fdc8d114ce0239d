//! `Histogram`: bucket counts and a sum in one
//! [`CounterSet`](crate::set::CounterSet)'s rows.
//!
//! Counter 0 of the set is the sum; counter `i + 1` counts bucket `i`. A
//! record is one pair add (`set::pair`): the bucket and the sum in the
//! same row, sampled for contention on the bucket. Growth, owned rows and
//! takes are the set's (its protocol and loom models cover them): a take
//! swaps every word through the set's take guard, so each bucket count
//! and each value in the sum is taken exactly once. A record's bucket and
//! its value are two words, so a take racing it may move one and leave
//! the other for the next take; totals over takes stay exact.

mod labelled;
mod layout;
mod lazy_sets;
mod replay;
mod snapshot;
mod timer;
mod unlabelled;

pub use labelled::LabelledHistogram;
// Used by the integrations, each behind its feature.
#[allow(unused_imports)]
pub(crate) use replay::{replay_since, Replayed};
pub use snapshot::{Bucket, HistogramSnapshot, HistogramUnit, DEFAULT_DURATION_LE, DEFAULT_LE};
pub use timer::HistogramTimer;
pub use unlabelled::Histogram;
