//! Page views for `--keyed`: a Zipf law over a set of URLs, drawn before
//! the clock starts so that a timed loop only replays them.
//!
//! Page popularity on a web site is roughly Zipf: the page of rank r (1 =
//! most viewed) gets views in proportion to 1/r^s, with s near 1. Ranks are
//! shuffled over the page ids, so the hot pages are not neighbours in id
//! order (nor in a map filled in id order, as handles made up front are).

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

/// Draws per worker, replayed in a loop: enough for the tail of 10,000
/// keys to show up, and read in order, so prefetching hides their 256 KB.
pub const DRAWS: usize = 1 << 16;

/// The key set and every worker's draws, the same for every counting kind.
pub struct Workload {
    /// `keys[id]`: `/page/<id>`, formatted once.
    pub keys: Vec<String>,
    /// Per worker, [`DRAWS`] key ids.
    pub draws: Vec<Vec<u32>>,
}

impl Workload {
    /// `keys` URLs under a Zipf(`s`) law, draws for `workers` workers. The
    /// same `seed` gives the same ranks and, for worker i, the same draws
    /// whatever the number of workers.
    pub fn new(keys: usize, s: f64, workers: usize, seed: u64) -> Workload {
        assert!(keys > 0 && keys <= u32::MAX as usize, "key count {keys}");
        let cdf = cdf(keys, s, &mut StdRng::seed_from_u64(seed));
        let draws = (0..workers)
            .map(|i| {
                let mut rng = StdRng::seed_from_u64(seed.wrapping_add(1 + i as u64));
                (0..DRAWS).map(|_| draw(&cdf, &mut rng)).collect()
            })
            .collect();
        Workload {
            keys: (0..keys).map(|id| format!("/page/{id}")).collect(),
            draws,
        }
    }

    /// The id of `key`, if it is one of the set.
    pub fn id(&self, key: &str) -> Option<usize> {
        let id: usize = key.strip_prefix("/page/")?.parse().ok()?;
        (self.keys.get(id)? == key).then_some(id)
    }

    /// The exact views per key id after worker i replayed `done[i]` of its
    /// draws (whole laps, then a prefix).
    pub fn reference(&self, done: &[u64]) -> Vec<u64> {
        let mut counts = vec![0u64; self.keys.len()];
        for (draws, &n) in self.draws.iter().zip(done) {
            let laps = n / draws.len() as u64;
            let rest = (n % draws.len() as u64) as usize;
            for (i, &id) in draws.iter().enumerate() {
                counts[id as usize] += laps + u64::from(i < rest);
            }
        }
        counts
    }
}

/// Cumulative probabilities over ids `0..n`: the id of rank r has weight
/// 1/r^s, ranks shuffled by `rng`. The last is exactly 1.
fn cdf(n: usize, s: f64, rng: &mut StdRng) -> Vec<f64> {
    let mut rank: Vec<usize> = (1..=n).collect();
    rank.shuffle(rng);
    let mut sum = 0.0;
    let mut cdf: Vec<f64> = rank
        .iter()
        .map(|&r| {
            sum += (r as f64).powf(-s);
            sum
        })
        .collect();
    for c in &mut cdf {
        *c /= sum;
    }
    cdf
}

/// One id drawn by inverting `cdf` with a binary search.
fn draw(cdf: &[f64], rng: &mut StdRng) -> u32 {
    let u: f64 = rng.gen(); // in [0, 1)
                            // The first id whose cumulative probability exceeds u; the min guards
                            // against rounding in the last entries.
    cdf.partition_point(|&c| c <= u).min(cdf.len() - 1) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_follow_the_zipf_law() {
        let n = 100;
        let cdf = cdf(n, 1.0, &mut StdRng::seed_from_u64(1));
        assert_eq!(*cdf.last().unwrap(), 1.0);
        let mut rng = StdRng::seed_from_u64(2);
        let mut seen = vec![0u64; n];
        let total = 200_000;
        for _ in 0..total {
            seen[draw(&cdf, &mut rng) as usize] += 1;
        }
        let mut by_count = seen.clone();
        by_count.sort_unstable_by(|a, b| b.cmp(a));
        // Rank 1 of 100 at s = 1: 1 / H(100) = 19.3% of the views, rank 2
        // half that, rank 10 a tenth.
        let share = |c: u64| c as f64 / total as f64;
        assert!((share(by_count[0]) - 0.193).abs() < 0.01, "{by_count:?}");
        assert!((share(by_count[1]) - 0.0965).abs() < 0.01, "{by_count:?}");
        assert!((share(by_count[9]) - 0.0193).abs() < 0.005, "{by_count:?}");
        // Shuffled: the hottest page is not simply id 0.
        let hottest: Vec<usize> = (0..n).filter(|&i| seen[i] > total / 20).collect();
        assert_ne!(hottest, [0, 1, 2], "ranks were not shuffled");
    }

    #[test]
    fn s_zero_is_uniform() {
        let cdf = cdf(4, 0.0, &mut StdRng::seed_from_u64(1));
        assert_eq!(cdf, [0.25, 0.5, 0.75, 1.0]);
    }

    #[test]
    fn the_reference_counts_whole_laps_then_a_prefix() {
        let w = Workload {
            keys: (0..3).map(|id| format!("/page/{id}")).collect(),
            draws: vec![vec![0, 1, 1, 2], vec![2, 2, 2, 2]],
        };
        // Worker 0: a lap and two more (0, 1); worker 1: one draw.
        assert_eq!(w.reference(&[6, 1]), [2, 3, 2]);
        assert_eq!(w.reference(&[0, 0]), [0, 0, 0]);
        // The same as replaying one draw at a time.
        let mut naive = vec![0u64; 3];
        for i in 0..11 {
            naive[w.draws[0][i % 4] as usize] += 1;
        }
        assert_eq!(w.reference(&[11, 0]), naive);
    }

    #[test]
    fn keys_map_back_to_their_ids_and_nothing_else_does() {
        let w = Workload::new(20, 1.0, 2, 7);
        assert_eq!(w.keys[13], "/page/13");
        assert_eq!(w.id("/page/13"), Some(13));
        assert_eq!(w.id("/page/20"), None);
        assert_eq!(w.id("/page/013"), None);
        assert_eq!(w.id("/other/1"), None);
        assert!(w.draws.iter().flatten().all(|&id| id < 20));
        assert_eq!(w.draws.len(), 2);
        assert_eq!(w.draws[1].len(), DRAWS);
        // Worker 1's draws do not depend on how many workers there are.
        assert_eq!(Workload::new(20, 1.0, 3, 7).draws[1], w.draws[1]);
    }
}
