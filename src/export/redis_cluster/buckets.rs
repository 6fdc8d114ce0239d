//! One bucket's numbering and memory: which of the exporter's batches the
//! bucket confirmed, under which writer field and numbers, and the parts
//! it keeps to send again when a failover loses them.
//!
//! A bucket numbers its parts as the exporter numbers batches, shifted by
//! `base` (0 until a loss it cannot repair). When a failover loses parts
//! the bucket had confirmed (the script answers "gap" with the number the
//! promoted replica has), the bucket sends the lost parts again under the
//! same numbers if it still holds every one; otherwise it counts the
//! missing ones as lost and starts a new writer field (`<writer>.<epoch>`)
//! numbered from 1, sending what it still holds first.

use crate::export::sink::WriterId;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// One bucket's part of one batch (possibly empty), or a part sent again.
#[derive(Clone, Debug)]
pub(crate) struct Sub {
    /// Its number under the bucket's writer field.
    pub(crate) seq: u64,
    /// The exporter's batch number it belongs to.
    pub(crate) batch: u64,
    /// When it was made (confirmed parts are kept for `retain` after).
    pub(crate) at: Instant,
    /// The bucket's deltas.
    pub(crate) deltas: Vec<(String, i64)>,
}

/// A bucket's state (module docs).
#[derive(Debug, Default)]
pub(crate) struct BucketLog {
    writer: Option<WriterId>,
    epoch: u32,
    base: u64,
    /// The highest part number the bucket confirmed.
    confirmed: u64,
    /// The highest exporter batch whose part the bucket confirmed.
    done_batch: u64,
    /// Confirmed parts, oldest first, for `retain`.
    retained: VecDeque<Sub>,
    /// Parts to send before any new one: lost in a failover.
    pub(crate) resend: Vec<Sub>,
}

impl BucketLog {
    /// Before a delivery: forget everything if the exporter's writer
    /// changed (a new exporter numbers from 1), and let go of parts older
    /// than `retain`.
    pub(crate) fn start(&mut self, writer: WriterId, now: Instant, retain: Duration) {
        if self.writer != Some(writer) {
            *self = BucketLog {
                writer: Some(writer),
                ..BucketLog::default()
            };
        }
        while self
            .retained
            .front()
            .is_some_and(|s| now.saturating_duration_since(s.at) > retain)
        {
            self.retained.pop_front();
        }
    }

    /// Makes every retained part `by` younger: time the sink spent
    /// failing, which ages no part (`RedisClusterSink::deliver`).
    pub(crate) fn postpone(&mut self, by: Duration) {
        for sub in &mut self.retained {
            sub.at += by;
        }
    }

    /// The writer field the bucket's parts go under.
    pub(crate) fn writer_field(&self) -> String {
        let w = self.writer.map_or(0, |w| w.0);
        match self.epoch {
            0 => WriterId(w).to_string(),
            e => format!("{}.{e}", WriterId(w)),
        }
    }

    /// The part number of exporter batch `batch`, unless the bucket
    /// confirmed it already.
    pub(crate) fn seq_of(&self, batch: u64) -> Option<u64> {
        (batch > self.done_batch).then(|| batch.wrapping_sub(self.base))
    }

    /// Whether the bucket confirmed its part of exporter batch `batch`.
    pub(crate) fn has(&self, batch: u64) -> bool {
        batch <= self.done_batch
    }

    /// The script applied `sub` (now or before).
    pub(crate) fn confirm(&mut self, sub: Sub) {
        if self.resend.first().is_some_and(|r| r.seq == sub.seq) {
            self.resend.remove(0);
        }
        self.confirmed = self.confirmed.max(sub.seq);
        self.done_batch = self.done_batch.max(sub.batch);
        self.retained.push_back(sub);
    }

    /// The script found only parts up to `last`: queue what was lost for
    /// sending again (module docs). Returns how many confirmed parts go
    /// again and how many are gone for good.
    pub(crate) fn recover(&mut self, last: u64) -> (u64, u64) {
        let wanted = self.confirmed.saturating_sub(last);
        let held: Vec<Sub> = self
            .retained
            .iter()
            .filter(|s| s.seq > last)
            .cloned()
            .collect();
        self.retained.retain(|s| s.seq <= last);
        let whole = last < self.confirmed
            && held.len() as u64 == wanted
            && held.first().is_some_and(|s| s.seq == last + 1);
        let resent = held.len() as u64;
        let mut again = held;
        again.append(&mut self.resend);
        if whole {
            self.confirmed = last;
            self.resend = again;
            return (resent, 0);
        }
        // A new writer field, numbered from 1: what is held first, then
        // the batches the bucket has not confirmed.
        let lost = wanted.saturating_sub(resent);
        self.epoch += 1;
        for (i, s) in again.iter_mut().enumerate() {
            s.seq = i as u64 + 1;
        }
        self.base = self.done_batch.wrapping_sub(again.len() as u64);
        self.confirmed = 0;
        self.retained.clear();
        self.resend = again;
        (resent, lost)
    }

    /// The exporter batch a part of the current numbering belongs to.
    pub(crate) fn batch_of(&self, seq: u64) -> u64 {
        seq.wrapping_add(self.base)
    }
}

#[cfg(test)]
mod tests {
    use super::{BucketLog, Sub};
    use crate::export::sink::WriterId;
    use std::time::{Duration, Instant};

    fn part(log: &BucketLog, batch: u64, now: Instant) -> Sub {
        Sub {
            seq: log.seq_of(batch).expect("not confirmed yet"),
            batch,
            at: now,
            deltas: vec![(format!("k{batch}"), 1)],
        }
    }

    fn started(now: Instant) -> BucketLog {
        let mut log = BucketLog::default();
        log.start(WriterId(7), now, Duration::from_secs(10));
        log
    }

    #[test]
    fn a_loss_it_holds_is_sent_again_under_the_same_numbers() {
        let now = Instant::now();
        let mut log = started(now);
        for b in 1..=5 {
            let p = part(&log, b, now);
            log.confirm(p);
        }
        assert!(log.has(5) && log.seq_of(5).is_none());
        assert_eq!(log.recover(2), (3, 0));
        let again: Vec<u64> = log.resend.iter().map(|s| s.seq).collect();
        assert_eq!(again, [3, 4, 5]);
        assert_eq!(log.writer_field(), WriterId(7).to_string());
        // The next batch follows them.
        assert_eq!(log.seq_of(6), Some(6));
        for s in log.resend.clone() {
            log.confirm(s);
        }
        assert!(log.resend.is_empty());
    }

    #[test]
    fn a_loss_older_than_retain_starts_a_new_writer_field() {
        let t0 = Instant::now();
        let mut log = started(t0);
        for b in 1..=4 {
            let p = part(&log, b, t0);
            log.confirm(p);
        }
        // Parts 1-3 age out; part 4 is made later.
        let later = t0 + Duration::from_secs(11);
        log.retained.back_mut().unwrap().at = later;
        log.start(WriterId(7), later, Duration::from_secs(10));
        // The server kept only part 1: parts 2 and 3 are gone, 4 is held.
        assert_eq!(log.recover(1), (1, 2));
        assert_eq!(log.writer_field(), format!("{}.1", WriterId(7)));
        let again: Vec<(u64, u64)> = log.resend.iter().map(|s| (s.seq, s.batch)).collect();
        assert_eq!(again, [(1, 4)]);
        // Batch 5 is part 2 of the new numbering.
        assert_eq!(log.seq_of(5), Some(2));
        assert_eq!(log.batch_of(2), 5);
    }

    #[test]
    fn a_new_exporter_writer_starts_the_bucket_over() {
        let now = Instant::now();
        let mut log = started(now);
        let p = part(&log, 1, now);
        log.confirm(p);
        log.start(WriterId(8), now, Duration::from_secs(10));
        assert_eq!(log.seq_of(1), Some(1));
        assert!(!log.has(1));
    }
}
