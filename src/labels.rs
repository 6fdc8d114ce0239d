//! Typed labels: [`Label`], a type whose values map to dense indices
//! `0..COUNT` with a name per label and a text per value, and
//! [`LabelledCounter<L>`], a [`CounterSet`] of `L::COUNT` counters
//! indexed by `L`, constructible in a `static`.
//!
//! An add is `CounterSet`'s add at `label.index()`: a derived enum's index
//! is its variant's position in declaration order (not its discriminant),
//! so there is no hashing and no lock, and the bounds check folds away. The set is made on the first add (a `static` cannot
//! allocate); after that, an add checks only that it was made.

use crate::set::CounterSet;
use std::fmt;
use std::marker::PhantomData;

/// A type whose values label counters: each value has a dense index in
/// `0..COUNT`, and for export, one text per label name.
///
/// * One label: a fieldless enum, with `#[derive(Label)]` (feature
///   `derive`, on by default). Indices follow declaration order; a
///   variant's text is its name in snake case unless renamed with
///   `#[label(rename = "...")]`; the label's name is the type's name in
///   snake case unless set with `#[label(name = "...")]` on the type.
/// * Several labels: a struct with named fields whose types are one-label
///   types, with `#[derive(Label)]`: one label per field, named after the
///   field (or `#[label(name = "...")]` on it); or a tuple `(A, B)` or
///   `(A, B, C)` of one-label types. The index is the fields' indices in
///   mixed radix, the first field the most significant, so `COUNT` is the
///   product of the fields' counts.
///
/// ```
/// use shardcount::Label;
///
/// #[derive(Clone, Copy, Debug, PartialEq, Label)]
/// enum Method { Get, Post }
///
/// #[derive(Clone, Copy, Debug, PartialEq, Label)]
/// #[label(name = "status")]
/// enum Status { Ok, #[label(rename = "5xx")] ServerError, NotFound }
///
/// #[derive(Clone, Copy, Debug, PartialEq, Label)]
/// struct Request { method: Method, status: Status }
///
/// assert_eq!((Method::COUNT, Method::NAMES), (2, &["method"][..]));
/// assert_eq!(Status::ServerError.index(), 1);
/// assert_eq!(Status::text(1, 0), Some("5xx"));
/// assert_eq!(Status::text(2, 0), Some("not_found"));
///
/// let r = Request { method: Method::Post, status: Status::NotFound };
/// assert_eq!((Request::COUNT, r.index()), (6, 5)); // 1 * 3 + 2
/// assert_eq!(Request::NAMES, ["method", "status"]);
/// assert_eq!((Request::text(5, 0), Request::text(5, 1)), (Some("post"), Some("not_found")));
/// assert_eq!(Request::from_index(5), Some(r));
/// assert_eq!(<(Method, Status)>::from_index(5), Some((Method::Post, Status::NotFound)));
/// ```
///
/// # What the derive refuses
///
/// Each of these is a compile error that says why. An enum whose variants
/// carry data (a label takes one of a fixed set of values):
///
/// ```compile_fail
/// #[derive(shardcount::Label)]
/// enum Route { Home, User(u64) }
/// ```
///
/// An enum with no variant (no value to count):
///
/// ```compile_fail
/// #[derive(shardcount::Label)]
/// enum Never {}
/// ```
///
/// A generic type (its values, names and texts must be fixed):
///
/// ```compile_fail
/// #[derive(shardcount::Label)]
/// enum Either<T> { Left, Right(T) }
/// ```
///
/// ```compile_fail
/// #[derive(Clone, Copy, shardcount::Label)]
/// enum Method { Get }
/// #[derive(shardcount::Label)]
/// struct Request<M> { method: M }
/// ```
///
/// A struct field that is not a one-label type:
///
/// ```compile_fail,E0080
/// #[derive(Clone, Copy, shardcount::Label)]
/// enum Method { Get }
/// #[derive(Clone, Copy, shardcount::Label)]
/// struct Inner { method: Method, other: Method }
/// #[derive(shardcount::Label)]
/// struct Outer { inner: Inner }
/// ```
///
/// # Implementing it by hand
///
/// `index` must return less than `COUNT` (a
/// [`LabelledCounter`]'s add panics otherwise); `from_index` and `text`
/// must invert it (`None` past `COUNT`, or for `dim >= NAMES.len()`).
pub trait Label: Sized {
    /// How many values there are: indices are `0..COUNT`.
    ///
    /// ```
    /// #[derive(shardcount::Label)]
    /// enum Tier { Free, Paid, Team }
    /// #[derive(shardcount::Label)]
    /// enum Region { Eu, Us }
    /// use shardcount::Label;
    /// assert_eq!((Tier::COUNT, <(Tier, Region)>::COUNT), (3, 6));
    /// ```
    const COUNT: usize;

    /// The labels' names, one per dimension (one for an enum, one per
    /// field for a struct or tuple). A family's names must differ, none may
    /// start with `__` (Prometheus reserves them), and a histogram's label
    /// must not be `le` (its buckets' label): a [`LabelledCounter`] or
    /// `LabelledHistogram` over names that break this does not compile
    /// (`(Tier, Tier)` repeats `tier`).
    ///
    /// ```compile_fail,E0080
    /// #[derive(shardcount::Label)]
    /// enum Tier { Free, Paid }
    /// static MOVES: shardcount::LabelledCounter<(Tier, Tier)> = shardcount::LabelledCounter::new();
    /// ```
    ///
    /// ```compile_fail,E0080
    /// #[derive(Clone, Copy, shardcount::Label)]
    /// #[label(name = "le")]
    /// enum Size { Small, Large }
    /// let sizes = shardcount::LabelledHistogram::<Size>::new();
    /// ```
    ///
    /// ```
    /// #[derive(shardcount::Label)]
    /// enum PlanTier { Free, Paid }
    /// #[derive(shardcount::Label)]
    /// struct Account { #[label(name = "plan")] tier: PlanTier }
    /// use shardcount::Label;
    /// assert_eq!((PlanTier::NAMES, Account::NAMES), (&["plan_tier"][..], &["plan"][..]));
    /// ```
    const NAMES: &'static [&'static str];

    /// This value's index, below [`COUNT`](Self::COUNT).
    ///
    /// ```
    /// #[derive(shardcount::Label)]
    /// enum Tier { Free, Paid }
    /// use shardcount::Label;
    /// assert_eq!(Tier::Paid.index(), 1);
    /// ```
    fn index(&self) -> usize;

    /// The value whose index is `index`, or `None` past
    /// [`COUNT`](Self::COUNT).
    ///
    /// ```
    /// #[derive(Debug, PartialEq, shardcount::Label)]
    /// enum Tier { Free, Paid }
    /// use shardcount::Label;
    /// assert_eq!(Tier::from_index(0), Some(Tier::Free));
    /// assert_eq!(Tier::from_index(2), None);
    /// ```
    fn from_index(index: usize) -> Option<Self>;

    /// The text of label `dim` (an index into [`NAMES`](Self::NAMES)) for
    /// the value whose index is `index`, as exported; `None` past
    /// [`COUNT`](Self::COUNT) or `NAMES.len()`. Not empty, and without a
    /// comma: the [`Exporter`](crate::export::Exporter)'s keys and serde's
    /// snapshots join a member's texts with commas (the derive refuses
    /// both).
    ///
    /// ```
    /// #[derive(shardcount::Label)]
    /// enum Tier { Free, #[label(rename = "pro")] Paid }
    /// use shardcount::Label;
    /// assert_eq!((Tier::text(0, 0), Tier::text(1, 0)), (Some("free"), Some("pro")));
    /// assert_eq!((Tier::text(2, 0), Tier::text(0, 1)), (None, None));
    /// ```
    fn text(index: usize, dim: usize) -> Option<&'static str>;

    /// This value's text, as exported, for a one-label type (a derived
    /// enum): `Status::ServerError.as_str()` is `"5xx"` if renamed so. For
    /// a type with several labels it does not compile (use
    /// [`text_of`](Self::text_of) per label). A method, not `Display`, so
    /// a type keeps its own `Display` if it has one.
    ///
    /// ```
    /// #[derive(Clone, Copy, shardcount::Label)]
    /// enum Status { Ok, #[label(rename = "5xx")] ServerError }
    /// use shardcount::Label;
    /// assert_eq!((Status::Ok.as_str(), Status::ServerError.as_str()), ("ok", "5xx"));
    /// ```
    ///
    /// ```compile_fail
    /// #[derive(Clone, Copy, shardcount::Label)]
    /// enum Method { Get }
    /// use shardcount::Label;
    /// let _ = (Method::Get, Method::Get).as_str(); // two labels: which text?
    /// ```
    #[inline]
    fn as_str(&self) -> &'static str {
        const {
            assert!(
                Self::NAMES.len() == 1,
                "`as_str` is for one-label types; use `text_of(dim)` for each label"
            );
        }
        self.text_of(0).unwrap_or("")
    }

    /// The text of this value's label `dim` (an index into
    /// [`NAMES`](Self::NAMES)), as exported; `None` for `dim >=
    /// NAMES.len()`, or if `index` breaks its contract.
    ///
    /// ```
    /// #[derive(Clone, Copy, shardcount::Label)]
    /// enum Method { Get, Post }
    /// #[derive(Clone, Copy, shardcount::Label)]
    /// enum Status { Ok, #[label(rename = "5xx")] ServerError }
    /// use shardcount::Label;
    /// let r = (Method::Post, Status::ServerError);
    /// assert_eq!((r.text_of(0), r.text_of(1), r.text_of(2)), (Some("post"), Some("5xx"), None));
    /// ```
    #[inline]
    fn text_of(&self, dim: usize) -> Option<&'static str> {
        Self::text(self.index(), dim)
    }
}

/// A tuple's or derived struct's member's index, checked against its
/// `COUNT`: past it, the combined index would name another member's
/// label, so it panics as [`LabelledCounter`]'s add does. For a derived
/// enum the check folds away.
#[doc(hidden)]
#[inline(always)]
pub fn member_index<L: Label>(label: &L) -> usize {
    let i = label.index();
    if i >= L::COUNT {
        member_out_of_range::<L>(i);
    }
    i
}

#[cold]
#[inline(never)]
fn member_out_of_range<L: Label>(i: usize) -> ! {
    panic!(
        "shardcount: a label's index() returned {i}, but its COUNT is {} ({})",
        L::COUNT,
        std::any::type_name::<L>()
    )
}

/// `a * b`, or a compile-time panic naming the tuple.
const fn product(a: usize, b: usize) -> usize {
    match a.checked_mul(b) {
        Some(n) => n,
        None => panic!("shardcount: a tuple of labels has more values than a usize counts"),
    }
}

/// Whether two label names are the same (`==` is not `const`).
const fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Checks a family's label names at compile time, where a
/// [`LabelledCounter`] or a `LabelledHistogram` is made: each names one
/// label (a tuple may repeat a type's name, `(Tier, Tier)`), none starts
/// with `__` (reserved in Prometheus), and a histogram's is never `le`
/// (its buckets' label).
pub(crate) const fn check_names(names: &[&str], histogram: bool) {
    let mut i = 0;
    while i < names.len() {
        if names[i].len() >= 2 && same(names[i].split_at(2).0, "__") {
            panic!("shardcount: a label name starting with `__` is reserved (Prometheus)");
        }
        if histogram && same(names[i], "le") {
            panic!(
                "shardcount: a histogram's label must not be named `le`, its buckets' label: \
                 rename it with #[label(name = \"...\")]"
            );
        }
        let mut j = 0;
        while j < i {
            if same(names[i], names[j]) {
                panic!(
                    "shardcount: two labels of the family have the same name: wrap the \
                     tuple in a derived struct whose fields name each label"
                );
            }
            j += 1;
        }
        i += 1;
    }
}

/// The one label name of `L`, or a compile-time panic: a tuple's members
/// are each one label.
const fn one_name<L: Label>() -> &'static str {
    match L::NAMES {
        [name] => name,
        _ => panic!("shardcount: each member of a tuple of labels must be a one-label type"),
    }
}

/// Two labels: `index = a.index() * B::COUNT + b.index()`; the names are
/// `A`'s then `B`'s.
///
/// ```
/// # #[derive(shardcount::Label)] enum Method { Get, Post }
/// # #[derive(shardcount::Label)] enum Status { Ok, Err, Slow }
/// use shardcount::Label;
/// assert_eq!((Method::Post, Status::Slow).index(), 5);
/// assert_eq!(<(Method, Status)>::NAMES, ["method", "status"]);
/// ```
impl<A: Label, B: Label> Label for (A, B) {
    const COUNT: usize = product(A::COUNT, B::COUNT);
    const NAMES: &'static [&'static str] = &[one_name::<A>(), one_name::<B>()];

    #[inline]
    fn index(&self) -> usize {
        member_index(&self.0) * B::COUNT + member_index(&self.1)
    }

    fn from_index(index: usize) -> Option<Self> {
        if index >= Self::COUNT {
            return None;
        }
        Some((
            A::from_index(index / B::COUNT)?,
            B::from_index(index % B::COUNT)?,
        ))
    }

    fn text(index: usize, dim: usize) -> Option<&'static str> {
        if index >= Self::COUNT {
            return None;
        }
        match dim {
            0 => A::text(index / B::COUNT, 0),
            1 => B::text(index % B::COUNT, 0),
            _ => None,
        }
    }
}

/// Three labels: `index = (a.index() * B::COUNT + b.index()) * C::COUNT +
/// c.index()`.
///
/// ```
/// # #[derive(shardcount::Label)] enum Method { Get, Post }
/// # #[derive(shardcount::Label)] enum Status { Ok, Err }
/// # #[derive(shardcount::Label)] enum Region { Eu, Us }
/// use shardcount::Label;
/// assert_eq!((Method::Post, Status::Ok, Region::Us).index(), 5);
/// assert_eq!(<(Method, Status, Region)>::text(5, 2), Some("us"));
/// ```
impl<A: Label, B: Label, C: Label> Label for (A, B, C) {
    const COUNT: usize = product(product(A::COUNT, B::COUNT), C::COUNT);
    const NAMES: &'static [&'static str] = &[one_name::<A>(), one_name::<B>(), one_name::<C>()];

    #[inline]
    fn index(&self) -> usize {
        (member_index(&self.0) * B::COUNT + member_index(&self.1)) * C::COUNT
            + member_index(&self.2)
    }

    fn from_index(index: usize) -> Option<Self> {
        if index >= Self::COUNT {
            return None;
        }
        let bc = B::COUNT * C::COUNT;
        Some((
            A::from_index(index / bc)?,
            B::from_index(index / C::COUNT % B::COUNT)?,
            C::from_index(index % C::COUNT)?,
        ))
    }

    fn text(index: usize, dim: usize) -> Option<&'static str> {
        if index >= Self::COUNT {
            return None;
        }
        match dim {
            0 => A::text(index / (B::COUNT * C::COUNT), 0),
            1 => B::text(index / C::COUNT % B::COUNT, 0),
            2 => C::text(index % C::COUNT, 0),
            _ => None,
        }
    }
}

/// A family of exact counters, one per value of the label type `L`:
/// `inc(label)` is a [`CounterSet`] add at `label.index()`, with no
/// hashing and no lock. `const`: it can be a `static`.
///
/// The counters are a [`CounterSet`] of `L::COUNT` (sharded the same way,
/// with the same guarantees: exact at quiescence, lossless takes), made
/// on the first add or `split`; reads and takes of a family never added
/// to return zeros without making it.
///
/// ```
/// use shardcount::{Label, LabelledCounter};
///
/// #[derive(Clone, Copy, Label)]
/// enum Route { Home, Checkout }
///
/// #[derive(Clone, Copy, Label)]
/// enum Status { Ok, Failed }
///
/// static REQUESTS: LabelledCounter<(Route, Status)> = LabelledCounter::new();
///
/// std::thread::scope(|s| {
///     for _ in 0..2 {
///         s.spawn(|| {
///             for _ in 0..1000 {
///                 REQUESTS.inc((Route::Checkout, Status::Ok));
///             }
///             REQUESTS.add((Route::Home, Status::Failed), 3);
///         });
///     }
/// });
/// assert_eq!(REQUESTS.get((Route::Checkout, Status::Ok)), 2000);
/// assert_eq!(REQUESTS.sum(), 2006);
/// assert_eq!(
///     format!("{REQUESTS:?}"),
///     "LabelledCounter { labels: [\"route\", \"status\"], totals: \
///      {\"home,ok\": 0, \"home,failed\": 6, \"checkout,ok\": 2000, \"checkout,failed\": 0} }"
/// );
/// ```
pub struct LabelledCounter<L> {
    // Its base row is made on the first add or split (`CounterSet::lazy`).
    set: CounterSet,
    // `fn() -> L`: holds no `L`, so Send and Sync whatever `L` is.
    _label: PhantomData<fn() -> L>,
}

impl<L: Label> LabelledCounter<L> {
    crate::primitive::const_fn! {
        /// A family at zero. Allocates nothing: the counters' row is made on
        /// the first add (or `split`).
        ///
        /// ```
        /// #[derive(shardcount::Label)]
        /// enum Cache { Hit, Miss }
        /// static LOOKUPS: shardcount::LabelledCounter<Cache> = shardcount::LabelledCounter::new();
        /// assert_eq!(LOOKUPS.get(Cache::Miss), 0);
        /// ```
        #[must_use]
        pub const fn new() -> Self {
            const { check_names(L::NAMES, false) };
            LabelledCounter {
                set: CounterSet::lazy(L::COUNT),
                _label: PhantomData,
            }
        }
    }

    #[cold]
    #[inline(never)]
    #[track_caller]
    fn out_of_range(i: usize) -> ! {
        panic!(
            "shardcount: LabelledCounter: the label's index() returned {i}, but its COUNT is {}",
            L::COUNT
        )
    }

    /// Adds `n` to `label`'s counter, wrapping at 2<sup>64</sup>.
    ///
    /// # Panics
    ///
    /// If `label.index() >= L::COUNT` (a hand-written [`Label`] that breaks
    /// its contract; a derived one never does), naming both, or a member
    /// of a tuple or derived struct does so for its own `COUNT`. The
    /// family's first add (or `split`) makes its row of `L::COUNT`
    /// counters, and panics if that cannot be allocated (a `COUNT` in the
    /// hundreds of millions).
    ///
    /// ```
    /// #[derive(Clone, Copy, shardcount::Label)]
    /// enum Cache { Hit, Miss }
    /// let c = shardcount::LabelledCounter::new();
    /// c.add(Cache::Hit, 5);
    /// assert_eq!(c.get(Cache::Hit), 5);
    /// ```
    #[inline(always)]
    #[track_caller]
    pub fn add(&self, label: L, n: u64) {
        let i = label.index();
        if i < L::COUNT {
            // SAFETY: the set has `L::COUNT` counters (`new`), and `i` is
            // below that.
            unsafe { self.set.add_unchecked(i, n) }
        } else {
            Self::out_of_range(i)
        }
    }

    /// Adds one to `label`'s counter.
    ///
    /// # Panics
    ///
    /// As [`add`](Self::add).
    ///
    /// ```
    /// #[derive(Clone, Copy, shardcount::Label)]
    /// enum Cache { Hit, Miss }
    /// let c = shardcount::LabelledCounter::new();
    /// c.inc(Cache::Miss);
    /// assert_eq!(c.get(Cache::Miss), 1);
    /// ```
    #[inline(always)]
    #[track_caller]
    pub fn inc(&self, label: L) {
        self.add(label, 1);
    }

    /// Subtracts `n` from `label`'s counter, wrapping below zero.
    ///
    /// # Panics
    ///
    /// As [`add`](Self::add).
    ///
    /// ```
    /// #[derive(Clone, Copy, shardcount::Label)]
    /// enum Conn { Open, Idle }
    /// let c = shardcount::LabelledCounter::new();
    /// c.add(Conn::Open, 3);
    /// c.sub(Conn::Open, 2);
    /// assert_eq!(c.get(Conn::Open), 1);
    /// ```
    #[inline]
    #[track_caller]
    pub fn sub(&self, label: L, n: u64) {
        self.add(label, n.wrapping_neg());
    }

    /// Subtracts one from `label`'s counter, wrapping below zero.
    ///
    /// # Panics
    ///
    /// As [`add`](Self::add).
    ///
    /// ```
    /// #[derive(Clone, Copy, shardcount::Label)]
    /// enum Conn { Open, Idle }
    /// let c = shardcount::LabelledCounter::new();
    /// c.inc(Conn::Idle);
    /// c.dec(Conn::Idle);
    /// assert_eq!(c.get(Conn::Idle), 0);
    /// ```
    #[inline]
    #[track_caller]
    pub fn dec(&self, label: L) {
        self.add(label, u64::MAX);
    }

    /// `label`'s total, modulo 2<sup>64</sup>; never panics (0 for an
    /// index past `L::COUNT`). Exact at quiescence, as
    /// [`CounterSet::get`].
    ///
    /// ```
    /// #[derive(Clone, Copy, shardcount::Label)]
    /// enum Cache { Hit, Miss }
    /// let c = shardcount::LabelledCounter::new();
    /// c.add(Cache::Hit, 2);
    /// assert_eq!((c.get(Cache::Hit), c.get(Cache::Miss)), (2, 0));
    /// ```
    #[must_use]
    pub fn get(&self, label: L) -> u64 {
        self.get_index(label.index())
    }

    pub(crate) fn get_index(&self, i: usize) -> u64 {
        self.set.get(i).unwrap_or(0)
    }

    /// Every counter's total, added up (wrapping), read one after another.
    ///
    /// ```
    /// #[derive(Clone, Copy, shardcount::Label)]
    /// enum Cache { Hit, Miss }
    /// let c = shardcount::LabelledCounter::new();
    /// c.add(Cache::Hit, 2);
    /// c.inc(Cache::Miss);
    /// assert_eq!(c.sum(), 3);
    /// ```
    #[must_use]
    pub fn sum(&self) -> u64 {
        self.set.sum()
    }

    /// Writes every counter's total into `out`, in index order (`out[i]`
    /// is the total of the label whose `index()` is `i`), allocating
    /// nothing: as [`CounterSet::snapshot_into`], exact at quiescence.
    ///
    /// # Panics
    ///
    /// If `out.len() != L::COUNT`.
    ///
    /// ```
    /// #[derive(Clone, Copy, shardcount::Label)]
    /// enum Cache { Hit, Miss }
    /// static C: shardcount::LabelledCounter<Cache> = shardcount::LabelledCounter::new();
    /// C.add(Cache::Miss, 2);
    /// let mut out = [0; 2];
    /// C.snapshot_into(&mut out);
    /// assert_eq!(out, [0, 2]);
    /// ```
    #[track_caller]
    pub fn snapshot_into(&self, out: &mut [u64]) {
        assert_eq!(
            out.len(),
            L::COUNT,
            "shardcount: LabelledCounter::snapshot_into: the output slice's len is {} \
             but the label has {} values",
            out.len(),
            L::COUNT
        );
        self.set.snapshot_into(out);
    }

    /// Takes `label`'s total, leaving it at zero; lossless, as
    /// [`CounterSet::take`]. Never panics (0 for an index past
    /// `L::COUNT`).
    ///
    /// ```
    /// #[derive(Clone, Copy, shardcount::Label)]
    /// enum Cache { Hit, Miss }
    /// let c = shardcount::LabelledCounter::new();
    /// c.add(Cache::Hit, 4);
    /// assert_eq!(c.take(Cache::Hit), 4);
    /// assert_eq!(c.get(Cache::Hit), 0);
    /// ```
    pub fn take(&self, label: L) -> u64 {
        let i = label.index();
        self.set.take(i).unwrap_or(0)
    }

    /// Every label with its total, in index order.
    ///
    /// ```
    /// #[derive(Clone, Copy, Debug, PartialEq, shardcount::Label)]
    /// enum Cache { Hit, Miss }
    /// let c = shardcount::LabelledCounter::new();
    /// c.add(Cache::Miss, 2);
    /// assert_eq!(c.snapshot(), [(Cache::Hit, 0), (Cache::Miss, 2)]);
    /// ```
    #[must_use]
    pub fn snapshot(&self) -> Vec<(L, u64)> {
        let totals = self.set.snapshot();
        Self::labelled(totals)
    }

    /// Every label with its total, in index order, leaving the counters at
    /// zero; lossless, as [`CounterSet::take_all`].
    ///
    /// ```
    /// #[derive(Clone, Copy, Debug, PartialEq, shardcount::Label)]
    /// enum Cache { Hit, Miss }
    /// let c = shardcount::LabelledCounter::new();
    /// c.add(Cache::Hit, 2);
    /// assert_eq!(c.take_all(), [(Cache::Hit, 2), (Cache::Miss, 0)]);
    /// assert_eq!(c.sum(), 0);
    /// ```
    #[must_use]
    pub fn take_all(&self) -> Vec<(L, u64)> {
        let totals = self.set.take_all();
        Self::labelled(totals)
    }

    fn labelled(totals: Vec<u64>) -> Vec<(L, u64)> {
        totals
            .into_iter()
            .enumerate()
            .filter_map(|(i, v)| Some((L::from_index(i)?, v)))
            .collect()
    }

    /// Sets every counter to zero: [`take_all`](Self::take_all) with the
    /// totals dropped.
    ///
    /// ```
    /// #[derive(Clone, Copy, shardcount::Label)]
    /// enum Cache { Hit, Miss }
    /// let c = shardcount::LabelledCounter::new();
    /// c.add(Cache::Hit, 2);
    /// c.reset();
    /// assert_eq!(c.sum(), 0);
    /// ```
    pub fn reset(&self) {
        self.set.reset();
    }

    /// How many rows the counters have grown besides the base row (see
    /// [`CounterSet::shards`]): 0 until threads contend.
    ///
    /// ```
    /// #[derive(shardcount::Label)]
    /// enum Cache { Hit, Miss }
    /// assert_eq!(shardcount::LabelledCounter::<Cache>::new().shards(), 0);
    /// ```
    #[must_use]
    pub fn shards(&self) -> usize {
        self.set.shards()
    }

    /// Grows to at least `n` rows now, as
    /// [`Counter::split`](crate::Counter::split). Returns the row count
    /// after.
    ///
    /// ```
    /// #[derive(Clone, Copy, shardcount::Label)]
    /// enum Cache { Hit, Miss }
    /// let c = shardcount::LabelledCounter::<Cache>::new();
    /// assert!(c.split(2) >= 2);
    /// ```
    pub fn split(&self, n: usize) -> usize {
        self.set.split(n)
    }

    /// The rows.
    #[cfg(not(shardcount_loom))]
    pub(crate) fn rows(&self) -> &CounterSet {
        &self.set
    }

    /// Folds the rows back into the base row and frees them, as
    /// [`Counter::merge`](crate::Counter::merge): `true` when back to the
    /// base row, `false` while the merge is pending.
    ///
    /// ```
    /// #[derive(Clone, Copy, shardcount::Label)]
    /// enum Cache { Hit, Miss }
    /// let c = shardcount::LabelledCounter::<Cache>::new();
    /// c.inc(Cache::Hit);
    /// assert!(c.merge());
    /// assert_eq!(c.get(Cache::Hit), 1);
    /// ```
    pub fn merge(&self) -> bool {
        self.set.merge()
    }

    /// Writes the texts of member `i`'s labels into `out`, comma-separated.
    pub(crate) fn write_texts(i: usize, out: &mut impl fmt::Write) -> fmt::Result {
        for dim in 0..L::NAMES.len() {
            if dim > 0 {
                out.write_char(',')?;
            }
            out.write_str(L::text(i, dim).unwrap_or(""))?;
        }
        Ok(())
    }
}

impl<L: Label> Default for LabelledCounter<L> {
    /// [`new`](LabelledCounter::new).
    ///
    /// ```
    /// #[derive(shardcount::Label)]
    /// enum Cache { Hit, Miss }
    /// let c: shardcount::LabelledCounter<Cache> = Default::default();
    /// assert_eq!(c.sum(), 0);
    /// ```
    fn default() -> Self {
        Self::new()
    }
}

impl<L: Label> fmt::Debug for LabelledCounter<L> {
    /// The label names and up to 16 totals, each under its label texts
    /// (comma-separated).
    ///
    /// ```
    /// #[derive(Clone, Copy, shardcount::Label)]
    /// enum Cache { Hit, Miss }
    /// let c = shardcount::LabelledCounter::new();
    /// c.inc(Cache::Miss);
    /// assert_eq!(
    ///     format!("{c:?}"),
    ///     "LabelledCounter { labels: [\"cache\"], totals: {\"hit\": 0, \"miss\": 1} }"
    /// );
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        struct Totals<'a, L>(&'a LabelledCounter<L>);
        impl<L: Label> fmt::Debug for Totals<'_, L> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let mut m = f.debug_map();
                let mut text = String::new();
                for i in 0..L::COUNT.min(16) {
                    text.clear();
                    LabelledCounter::<L>::write_texts(i, &mut text)?;
                    m.entry(&text, &self.0.get_index(i));
                }
                if L::COUNT > 16 {
                    m.finish_non_exhaustive()
                } else {
                    m.finish()
                }
            }
        }
        f.debug_struct("LabelledCounter")
            .field("labels", &L::NAMES)
            .field("totals", &Totals(self))
            .finish()
    }
}
