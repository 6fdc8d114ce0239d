//! [`CounterHandle`], one counter of a map found once, and [`IntoKey`],
//! how a lookup makes a new key owned.

use crate::set::CounterSet;
use std::fmt;

/// One counter of a [`CounterMap`](crate::CounterMap), located
/// once. `Copy`; its adds hash nothing and lock nothing.
///
/// ```
/// let m = shardcount::CounterMap::new();
/// let h = m.handle(&7u32);
/// let h2 = h; // Copy
/// h.add(2);
/// h2.inc();
/// assert_eq!(h.sum(), 3);
/// assert_eq!(m.get(&7), Some(3));
/// ```
#[derive(Clone, Copy)]
pub struct CounterHandle<'a> {
    pub(super) set: &'a CounterSet,
    /// Always `< set.len()`: the map's constructors (`numbered`, `place`,
    /// `overflow_handle`) make it so, and only the map sees the fields.
    pub(super) i: usize,
}

impl CounterHandle<'_> {
    /// Adds `n`, wrapping at 2<sup>64</sup>.
    ///
    /// ```
    /// let m = shardcount::CounterMap::new();
    /// m.handle(&"a").add(4);
    /// assert_eq!(m.get(&"a"), Some(4));
    /// ```
    #[inline(always)]
    pub fn add(&self, n: u64) {
        // SAFETY: `i < set.len()`, the field's invariant.
        unsafe { self.set.add_unchecked(self.i, n) };
    }

    /// Subtracts `n`, wrapping below zero.
    ///
    /// ```
    /// let m = shardcount::CounterMap::new();
    /// m.handle(&"a").sub(1);
    /// assert_eq!(m.get(&"a"), Some(u64::MAX));
    /// ```
    #[inline]
    pub fn sub(&self, n: u64) {
        self.add(n.wrapping_neg());
    }

    /// Adds one.
    ///
    /// ```
    /// let m = shardcount::CounterMap::new();
    /// m.handle(&"a").inc();
    /// assert_eq!(m.get(&"a"), Some(1));
    /// ```
    #[inline(always)]
    pub fn inc(&self) {
        self.add(1);
    }

    /// Subtracts one, wrapping below zero.
    ///
    /// ```
    /// let m = shardcount::CounterMap::new();
    /// let h = m.handle(&"open");
    /// h.add(2);
    /// h.dec();
    /// assert_eq!(h.sum(), 1);
    /// ```
    #[inline]
    pub fn dec(&self) {
        self.add(u64::MAX);
    }

    /// This counter's total (the overflow counter's, for a handle to a key
    /// beyond the bound); exact at quiescence.
    ///
    /// ```
    /// let m = shardcount::CounterMap::new();
    /// let h = m.handle(&"a");
    /// h.add(3);
    /// assert_eq!(h.sum(), 3);
    /// ```
    #[must_use]
    pub fn sum(&self) -> u64 {
        self.set.total(self.i)
    }

    /// [`sum`](Self::sum) as a signed value: the same bits, for counters
    /// that go up and down around zero.
    ///
    /// ```
    /// let m = shardcount::CounterMap::new();
    /// let h = m.handle(&"a");
    /// h.sub(3);
    /// assert_eq!(h.sum_i64(), -3);
    /// ```
    #[must_use]
    pub fn sum_i64(&self) -> i64 {
        self.sum() as i64
    }

    /// Takes this counter's total, leaving it at zero; lossless, as
    /// [`CounterSet::take`] (each add is counted by exactly one take, or
    /// stays).
    ///
    /// ```
    /// let m = shardcount::CounterMap::new();
    /// let h = m.handle(&"a");
    /// h.add(5);
    /// assert_eq!(h.take(), 5);
    /// assert_eq!(m.get(&"a"), Some(0));
    /// ```
    pub fn take(&self) -> u64 {
        self.set.take_at(self.i)
    }

    /// Sets this counter to zero (a [`take`](Self::take) whose total is
    /// dropped).
    ///
    /// ```
    /// let m = shardcount::CounterMap::new();
    /// let h = m.handle(&"a");
    /// h.add(5);
    /// h.reset();
    /// assert_eq!(h.sum(), 0);
    /// ```
    pub fn reset(&self) {
        self.take();
    }
}

impl fmt::Debug for CounterHandle<'_> {
    /// Shows the counter's total.
    ///
    /// ```
    /// let m = shardcount::CounterMap::new();
    /// let h = m.handle(&1u8);
    /// h.inc();
    /// assert_eq!(format!("{h:?}"), "CounterHandle { total: 1 }");
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CounterHandle")
            .field("total", &self.sum())
            .finish()
    }
}

/// How a [`CounterMap`](crate::CounterMap) makes its key from the key a
/// lookup was given, when that key is new: a clone of `&k` for a `Clone`
/// key, `to_owned()` for the standard borrowed forms (`&str` for a
/// `String`, `&[T]` for a `Vec<T>`, `&Path`, `&OsStr`, `&CStr`), and the
/// reference itself for a `&'static str` key, so `handle("/")` works on a
/// `CounterMap<&'static str>`. A lookup that may create a key takes `&'q Q`
/// where `&'q Q: IntoKey<K>`; reads (`get`, `take`) need only `K:
/// Borrow<Q>`.
///
/// For a `&'static str` key, a new key must be `'static` (a literal, a
/// leaked string): a `&str` that borrows a shorter-lived buffer does not
/// compile, as a map of `&'static str` cannot keep it.
///
/// ```
/// use shardcount::CounterMap;
///
/// let routes: CounterMap<&'static str> = CounterMap::new();
/// routes.handle("/").inc(); // a literal: the key itself, no allocation
/// routes.add(&"/about", 2); // a `&&'static str`, as before
/// let path = String::from("/about");
/// assert_eq!(routes.get(path.as_str()), Some(2)); // reads take any `&str`
///
/// let owned: CounterMap<String> = CounterMap::new();
/// owned.inc(path.as_str()); // `to_owned()` only because "/about" is new
/// assert_eq!(owned.get("/about"), Some(1));
/// ```
pub trait IntoKey<K> {
    /// The key to store: owned, or the `'static` reference itself.
    ///
    /// ```
    /// use shardcount::IntoKey;
    /// let k: String = "a".into_key();
    /// let s: &'static str = "a".into_key();
    /// assert_eq!(k, s);
    /// ```
    fn into_key(self) -> K;
}

// One impl per borrowed form, not one over `ToOwned`: a blanket
// `&Q: IntoKey<Q::Owned>` would overlap the `&'static str` impl (coherence
// does not see that `str`'s owned form is `String`).
impl<K: Clone> IntoKey<K> for &K {
    #[inline]
    fn into_key(self) -> K {
        self.clone()
    }
}

// A literal is already the key a map of `&'static str` stores.
impl IntoKey<&'static str> for &'static str {
    #[inline]
    fn into_key(self) -> &'static str {
        self
    }
}

/// Implements `IntoKey` for unsized borrowed forms through `to_owned`.
macro_rules! into_owned_key {
    ($($borrowed:ty => $owned:ty),* $(,)?) => {$(
        impl IntoKey<$owned> for &$borrowed {
            #[inline]
            fn into_key(self) -> $owned {
                self.to_owned()
            }
        }
    )*};
}

into_owned_key! {
    str => String,
    std::path::Path => std::path::PathBuf,
    std::ffi::OsStr => std::ffi::OsString,
    std::ffi::CStr => std::ffi::CString,
}

impl<T: Clone> IntoKey<Vec<T>> for &[T] {
    #[inline]
    fn into_key(self) -> Vec<T> {
        self.to_vec()
    }
}
