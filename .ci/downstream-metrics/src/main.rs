//! Compiles only if `ShardedLayer::wrap` needs no `metrics_util` import.
use metrics_exporter_prometheus::PrometheusBuilder;
use shardcount::integrations::metrics::ShardedLayer;

fn main() {
    let prometheus = PrometheusBuilder::new().build_recorder();
    let render = prometheus.handle();
    let recorder = ShardedLayer::new().rough().wrap(prometheus);
    metrics::with_local_recorder(&recorder, || {
        std::thread::scope(|s| {
            for _ in 0..4 {
                // A scoped thread has no recorder of its own: give it this one.
                s.spawn(|| {
                    metrics::with_local_recorder(&recorder, || {
                        for _ in 0..2500 {
                            metrics::counter!("requests", "path" => "/").increment(1);
                        }
                    })
                });
            }
        });
        metrics::counter!("requests", "path" => "/").increment(1);
    });
    recorder.flush();
    let text = render.render();
    assert!(
        text.lines().any(|l| l == "requests{path=\"/\"} 10001"),
        "expected exactly 10001 requests, rendered:\n{text}"
    );
    println!("downstream-metrics: ShardedLayer::new().rough().wrap(..) counted exactly");
}
