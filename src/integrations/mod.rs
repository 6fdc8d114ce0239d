//! Optional integrations with metrics crates, each behind its own cargo
//! feature (all off by default, so the core pulls in none of them).
//!
//! (Each module is present only when its feature is on, so the names below
//! are not links.)
//!
//! * `metrics` (feature `metrics`): `metrics::CounterFn` for
//!   [`Counter`](crate::Counter) and [`RoughCounter`](crate::RoughCounter),
//!   and `ShardedLayer`, which gives a program's existing `metrics` recorder
//!   (its exporter, its `counter!` calls) sharded increments; `publish`
//!   hands any family's members, labels and all, to the recorder.
//! * `prometheus_client` (feature `prometheus-client`): `Shared`, a
//!   clonable handle to any counter type that a
//!   `prometheus_client::registry::Registry` can encode (gauges as gauges,
//!   a `CounterSet` or `CounterMap` as one labelled metric).
//!
//! * `prometheus` (feature `prometheus`): `Collected`, a `Collector` for
//!   any counter type or family, to register in tikv's
//!   `prometheus::Registry`.
//! * `opentelemetry` (feature `opentelemetry`): `observe`, which registers
//!   any counter type or family on an OpenTelemetry `Meter` as an
//!   observable counter or gauge.
//! * `serde` (feature `serde`): `Snapshot`, one JSON shape for the value of
//!   any counter type or family.
//!
//! Each only maps this crate's [contract](crate::contract) onto the other
//! crate's traits: the counting is the counters' own.

#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub mod metrics;
#[cfg(feature = "opentelemetry")]
#[cfg_attr(docsrs, doc(cfg(feature = "opentelemetry")))]
pub mod opentelemetry;
#[cfg(feature = "prometheus")]
#[cfg_attr(docsrs, doc(cfg(feature = "prometheus")))]
pub mod prometheus;
#[cfg(feature = "prometheus-client")]
#[cfg_attr(docsrs, doc(cfg(feature = "prometheus-client")))]
pub mod prometheus_client;
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
pub mod serde;
