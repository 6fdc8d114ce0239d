//! [`publish`]: a counter family's members, labels and all, handed to the
//! current recorder on demand (its reads, not its adds).

use crate::contract::{CountFamily, Kind};
use ::metrics::{Key, Metadata};

/// Hands each member of `family` (any counter type or family, a
/// [`LabelledCounter`](crate::LabelledCounter) included) to the current
/// recorder (`metrics::with_recorder`) as its own series of `name`, with
/// one `metrics` label per name in
/// [`LABEL_NAMES`](crate::contract::CountFamily::LABEL_NAMES): a counter
/// member through `absolute` (its exact read, which a recorder's counter
/// takes as the new total when it is larger), a gauge member through
/// `set`. Call it before each scrape or export, e.g. from the thread that
/// renders; nothing here touches the add path.
///
/// Under [`ShardedLayer`](super::ShardedLayer) it works as well: the layer
/// passes `absolute` on to the inner recorder's counter.
///
/// ```
/// use metrics_exporter_prometheus::PrometheusBuilder;
/// use shardcount::integrations::metrics::publish;
/// use shardcount::{Label, LabelledCounter};
///
/// #[derive(Clone, Copy, Label)]
/// enum Method { Get, Post }
/// #[derive(Clone, Copy, Label)]
/// enum Status { Ok, Failed }
/// static REQUESTS: LabelledCounter<(Method, Status)> = LabelledCounter::new();
///
/// let recorder = PrometheusBuilder::new().build_recorder();
/// let render = recorder.handle();
/// REQUESTS.add((Method::Post, Status::Ok), 3);
/// metrics::with_local_recorder(&recorder, || publish("requests", &REQUESTS));
/// assert!(render.render().contains("requests{method=\"post\",status=\"ok\"} 3"));
/// ```
pub fn publish<F: CountFamily + ?Sized>(name: &'static str, family: &F) {
    static META: Metadata<'static> =
        Metadata::new(module_path!(), ::metrics::Level::INFO, Some(module_path!()));
    ::metrics::with_recorder(|recorder| {
        family.read_each_labels(|texts, value| {
            let labels: Vec<::metrics::Label> = family
                .label_names()
                .iter()
                .zip(texts)
                .map(|(n, t)| ::metrics::Label::new(*n, t.to_string()))
                .collect();
            let key = Key::from_parts(name, labels);
            match F::MEMBER_KIND {
                Kind::Counter => recorder.register_counter(&key, &META).absolute(value),
                // The data model's values are f64: exact up to 2^53.
                Kind::Gauge => recorder.register_gauge(&key, &META).set(value as f64),
            }
        });
    });
}
