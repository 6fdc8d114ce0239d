//! [`FlushHandle`]: a recorder's flush, callable after the recorder was
//! installed (moved into the facade).

use super::table::KeyTable;
use crate::primitive::sync::Arc;
use std::fmt;

/// Flushes a [`ShardedRecorder`](super::ShardedRecorder) from anywhere: get
/// one with [`ShardedRecorder::flush_handle`](super::ShardedRecorder::flush_handle)
/// before installing the recorder.
///
/// ```
/// use metrics_util::layers::Layer;
/// use shardcount::integrations::metrics::ShardedLayer;
///
/// let prometheus = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
/// let render = prometheus.handle();
/// let recorder = ShardedLayer::new().layer(prometheus);
/// let flush = recorder.flush_handle();
/// metrics::with_local_recorder(&recorder, || metrics::counter!("jobs").increment(7));
/// flush.flush();
/// assert!(render.render().contains("jobs 7"));
/// ```
#[derive(Clone)]
pub struct FlushHandle {
    shared: Arc<KeyTable>,
}

impl FlushHandle {
    pub(super) fn new(shared: Arc<KeyTable>) -> Self {
        FlushHandle { shared }
    }

    /// As [`ShardedRecorder::flush`](super::ShardedRecorder::flush).
    ///
    /// ```
    /// let r = shardcount::integrations::metrics::ShardedRecorder::new(
    ///     metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder(),
    /// );
    /// r.flush_handle().flush();
    /// ```
    pub fn flush(&self) {
        self.shared.flush();
    }
}

impl fmt::Debug for FlushHandle {
    /// Shows the number of keys.
    ///
    /// ```
    /// let r = shardcount::integrations::metrics::ShardedRecorder::new(
    ///     metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder(),
    /// );
    /// assert_eq!(format!("{:?}", r.flush_handle()), "FlushHandle { keys: 0 }");
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FlushHandle")
            .field("keys", &self.shared.keys())
            .finish()
    }
}
