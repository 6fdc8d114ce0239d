//! What the exporter hands its batches to: a [`Sink`], the numbered
//! [`Batch`]es of one [`WriterId`] it applies exactly once, and what it
//! answers (the contract is in the `export` module docs).

use std::error::Error;
use std::fmt;

/// An exporter's identity towards a sink: 128 bits, unique per exporter and
/// process start, shown as 32 hex digits.
///
/// It is read from `/dev/urandom`; where that fails, it is made from the
/// time in nanoseconds, the process id and a per-process counter (unique on
/// one host, not across hosts). A sink keeps the last sequence number
/// applied per writer id, so two exporters must never share one: each
/// [`Exporter`] draws its own.
///
/// [`Exporter`]: super::exporter::Exporter
///
/// ```
/// use shardcount::export::WriterId;
/// let (a, b) = (WriterId::random(), WriterId::random());
/// assert_ne!(a, b);
/// assert_eq!(a.to_string().len(), 32);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct WriterId(pub u128);

impl WriterId {
    /// A fresh id (see the type docs for its source).
    #[must_use]
    pub fn random() -> WriterId {
        use std::io::Read;
        let mut bytes = [0u8; 16];
        let from_os = std::fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut bytes))
            .is_ok();
        if from_os && bytes != [0; 16] {
            return WriterId(u128::from_le_bytes(bytes));
        }
        use crate::primitive::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        // Relaxed: only uniqueness of the returned values matters.
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        WriterId((u128::from(nanos) << 64) | (u128::from(std::process::id()) << 32) | u128::from(n))
    }
}

impl fmt::Display for WriterId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// A numbered set of per-key deltas from one writer: the unit a [`Sink`]
/// applies exactly once.
///
/// ```
/// use shardcount::export::{Batch, WriterId};
/// let b = Batch::new(WriterId(1), 1, vec![("hits".into(), 3), ("misses".into(), -1)]);
/// assert_eq!((b.seq(), b.deltas().len(), b.magnitude()), (1, 2, 4));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    pub(super) writer: WriterId,
    pub(super) seq: u64,
    pub(super) deltas: Vec<(String, i64)>,
}

impl Batch {
    /// A batch numbered `seq` (from 1) from `writer`.
    #[must_use]
    pub fn new(writer: WriterId, seq: u64, deltas: Vec<(String, i64)>) -> Batch {
        Batch {
            writer,
            seq,
            deltas,
        }
    }

    /// The writer that numbered it.
    #[must_use]
    pub fn writer(&self) -> WriterId {
        self.writer
    }

    /// Its sequence number within the writer: 1, 2, ...
    #[must_use]
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The deltas, one per key (no key twice).
    #[must_use]
    pub fn deltas(&self) -> &[(String, i64)] {
        &self.deltas
    }

    /// The sum of the deltas' magnitudes: how many counts the batch moves.
    #[must_use]
    pub fn magnitude(&self) -> u64 {
        // Saturating: gauges near 2^63 could wrap a plain sum.
        self.deltas
            .iter()
            .fold(0u64, |m, (_, d)| m.saturating_add(d.unsigned_abs()))
    }
}

/// What a sink did with one batch (see the `export` module docs for the
/// contract).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Applied now, every delta, atomically.
    Applied,
    /// Applied before (its number is at most the writer's last); unchanged.
    Duplicate,
    /// Its number is past the writer's last + 1: the sink lost batches it
    /// had confirmed. Nothing was changed.
    Gap {
        /// The writer's last applied number, as the sink has it.
        last: u64,
    },
    /// Some keys cannot take their delta (wrong type, not an integer, or
    /// the sum would overflow). Nothing was changed.
    Rejected {
        /// The keys at fault.
        keys: Vec<String>,
    },
}

/// A delivery that failed as a whole (connection lost, timeout, server
/// error): none, some or all of the batches may have been applied.
///
/// ```
/// let e = shardcount::export::SinkError::new("connection refused");
/// assert_eq!(e.to_string(), "connection refused");
/// ```
#[derive(Debug)]
pub struct SinkError(Box<dyn Error + Send + Sync>);

impl SinkError {
    /// Wraps any error (or message).
    pub fn new(e: impl Into<Box<dyn Error + Send + Sync>>) -> SinkError {
        SinkError(e.into())
    }
}

impl fmt::Display for SinkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl Error for SinkError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.0.source()
    }
}

/// Where an [`Exporter`] delivers batches.
///
/// `deliver` gets consecutive batches of one writer, in order, and answers
/// one [`Outcome`] per batch, in order, following the contract in the
/// [module docs](super). It may be called again with batches it has already
/// applied (after an error, or a lost reply), and must then answer
/// `Duplicate` without applying them twice. It should not block much
/// longer than a network timeout: `Exporter::flush` waits for it.
///
/// [`Exporter`]: super::exporter::Exporter
pub trait Sink: Send + 'static {
    /// Applies `batches` (see the trait docs).
    ///
    /// # Errors
    ///
    /// When the delivery failed as a whole; the exporter sends the same
    /// batches again later.
    fn deliver(&mut self, batches: &[Batch]) -> Result<Vec<Outcome>, SinkError>;
}
