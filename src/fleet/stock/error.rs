//! Why a `FleetStock` call failed.

use crate::stock::Insufficient;
use std::fmt;

/// Why a [`FleetStock`](super::fleet_stock::FleetStock) call failed.
///
/// ```
/// use shardcount::fleet::FleetError;
/// let e = FleetError::Redis("connection refused".into());
/// assert_eq!(e.to_string(), "fleet stock: redis: connection refused");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FleetError {
    /// The lease and Redis were both short: `available` is what the lease
    /// held plus what Redis held (0) when the take was refused. Other
    /// processes' leases are not counted (see
    /// [`FleetStock`](super::fleet_stock::FleetStock)).
    Insufficient(Insufficient),
    /// Redis could not be reached, did not answer in time, or refused the
    /// command for a reason of its own (loading, read-only, out of
    /// memory): worth retrying. The pending operation is sent again,
    /// unchanged, by the next call.
    Redis(String),
    /// Redis answered, but a key under the prefix holds something else than
    /// the stock's layout (another type, a value that is not an integer
    /// below ±2<sup>53</sup>), or another writer changed this process's
    /// record: retrying does not help until the key is repaired. Nothing
    /// was changed, the connection is kept, and the pending operation is
    /// kept and sent again by the next call.
    Corrupt(String),
    /// The call cannot work as given, and retrying it will not help: a
    /// zero `timeout` in
    /// [`FleetStock::new`](super::fleet_stock::FleetStock::new) (the
    /// message names the field), or an
    /// [`add`](super::fleet_stock::FleetStock::add) that would take the
    /// stock to 2<sup>53</sup> or more (nothing was added by this request;
    /// see [`add`](super::fleet_stock::FleetStock::add) for an earlier one
    /// still on its way).
    Invalid(String),
}

impl fmt::Display for FleetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FleetError::Insufficient(e) => write!(f, "fleet stock: {e}"),
            FleetError::Redis(e) => write!(f, "fleet stock: redis: {e}"),
            FleetError::Corrupt(e) => write!(f, "fleet stock: {e}"),
            FleetError::Invalid(e) => write!(f, "fleet stock: invalid: {e}"),
        }
    }
}

impl std::error::Error for FleetError {}
