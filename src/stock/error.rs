//! `Insufficient`: the error a failed [`Stock::try_sub`](crate::Stock::try_sub)
//! returns.

use std::fmt;
use std::num::NonZeroU64;

/// A [`Stock::try_sub`](crate::Stock::try_sub) found less stock than it was
/// asked for, and took nothing.
///
/// It records what was asked for and how much stock there was at the instant
/// that justified the failure: `available() < requested()` always holds, and
/// at that instant (during the call) the whole stock was exactly
/// `available()`. Other threads may have restocked since.
///
/// ```
/// use shardcount::Stock;
///
/// let stock = Stock::new(2);
/// let err = stock.try_sub(5).unwrap_err();
/// assert_eq!(err.requested(), 5);
/// assert_eq!(err.available(), 2);
/// assert_eq!(err.to_string(), "insufficient stock: requested 5, available 2");
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Insufficient {
    /// Never 0 (taking nothing always succeeds); the niche keeps
    /// `Result<(), Insufficient>` at two words, returned in registers.
    requested: NonZeroU64,
    available: u64,
}

impl Insufficient {
    /// Built only by `Stock`, which guarantees `available < requested`.
    pub(crate) fn new(requested: u64, available: u64) -> Self {
        assert!(
            available < requested,
            "Insufficient needs available < requested"
        );
        Insufficient {
            requested: NonZeroU64::new(requested).expect("above `available`, so not 0"),
            available,
        }
    }

    /// The amount the failed call asked for.
    ///
    /// ```
    /// let err = shardcount::Stock::new(0).try_sub(3).unwrap_err();
    /// assert_eq!(err.requested(), 3);
    /// ```
    #[must_use]
    pub fn requested(&self) -> u64 {
        self.requested.get()
    }

    /// The whole stock at the instant that justified the failure (always
    /// less than [`requested`](Self::requested)).
    ///
    /// ```
    /// let err = shardcount::Stock::new(1).try_sub(3).unwrap_err();
    /// assert_eq!(err.available(), 1);
    /// ```
    #[must_use]
    pub fn available(&self) -> u64 {
        self.available
    }
}

impl fmt::Debug for Insufficient {
    /// Shows both amounts as plain numbers.
    ///
    /// ```
    /// let err = shardcount::Stock::new(1).try_sub(2).unwrap_err();
    /// assert_eq!(format!("{err:?}"), "Insufficient { requested: 2, available: 1 }");
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Insufficient")
            .field("requested", &self.requested())
            .field("available", &self.available)
            .finish()
    }
}

impl fmt::Display for Insufficient {
    /// `insufficient stock: requested R, available A`.
    ///
    /// ```
    /// let err = shardcount::Stock::new(0).try_sub(1).unwrap_err();
    /// assert_eq!(format!("{err}"), "insufficient stock: requested 1, available 0");
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "insufficient stock: requested {}, available {}",
            self.requested(),
            self.available
        )
    }
}

impl std::error::Error for Insufficient {}
