//! Batching webhook operations: at most one write per autoscaler per interval, quickly.
//!
//! Every reservation change is a write of the HRA's spec, and writes to one object conflict, so
//! operations for the same autoscaler are gathered and applied together
//! ([`super::reservations::apply_scale_operations`]). ARC waits a fixed 3 s after the first
//! operation of a batch. Here a batch is due as soon as its first operation arrives unless the
//! autoscaler was written less than `interval` ago, in which case it is due `interval` after
//! that write. A lone `queued` delivery is thus written at once (the fast path from zero), and
//! a burst still costs one write per interval.
//!
//! The queue is bounded: [`Batcher::push`] refuses operations beyond `limit` pending ones, and
//! the webhook server answers such a delivery with 503 so GitHub records it as failed (ARC
//! answers 500). Like the rest of this crate, the batcher is a plain value with `now` passed in;
//! the server owns the timer and the lock.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use super::reservations::{ScaleOp, later};

/// The pending-operation limit was reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the webhook work queue is full ({limit} pending operations)")]
pub struct QueueFull {
    /// The limit.
    pub limit: usize,
}

/// Operations for one autoscaler, to apply in one write. `O` is whatever the driver queues per
/// delivery (the webhook server pairs each operation with the channel its answer waits on).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch<K, O = ScaleOp> {
    /// The autoscaler.
    pub key: K,
    /// Its operations in arrival order.
    pub ops: Vec<O>,
}

#[derive(Clone, Debug)]
struct Pending<O> {
    since: SystemTime,
    ops: Vec<O>,
}

/// Pending operations per autoscaler and the time of each autoscaler's last write.
#[derive(Clone, Debug)]
pub struct Batcher<K, O = ScaleOp> {
    interval: Duration,
    limit: usize,
    pending: BTreeMap<K, Pending<O>>,
    last_write: BTreeMap<K, SystemTime>,
    queued: usize,
}

impl<K: Ord + Clone, O> Batcher<K, O> {
    /// At most one batch per key every `interval`, at most `limit` operations pending overall.
    pub fn new(interval: Duration, limit: usize) -> Self {
        Batcher {
            interval,
            limit,
            pending: BTreeMap::new(),
            last_write: BTreeMap::new(),
            queued: 0,
        }
    }

    /// Queues `op` for `key`, or refuses it when `limit` operations are pending.
    pub fn push(&mut self, key: K, op: O, now: SystemTime) -> Result<(), QueueFull> {
        if self.queued >= self.limit {
            return Err(QueueFull { limit: self.limit });
        }
        self.pending
            .entry(key)
            .or_insert_with(|| Pending {
                since: now,
                ops: Vec::new(),
            })
            .ops
            .push(op);
        self.queued += 1;
        Ok(())
    }

    /// Operations pending overall.
    pub fn queued(&self) -> usize {
        self.queued
    }

    /// When `key`'s pending batch may be written, if it has one.
    pub fn due_at(&self, key: &K) -> Option<SystemTime> {
        self.pending.get(key).map(|p| self.due(key, p))
    }

    /// The earliest time a batch is due: when the driver should next call [`Self::take_due`].
    pub fn next_due(&self) -> Option<SystemTime> {
        self.pending.iter().map(|(k, p)| self.due(k, p)).min()
    }

    /// Removes and returns the batches due at `now` (in key order), recording `now` as their
    /// write time.
    pub fn take_due(&mut self, now: SystemTime) -> Vec<Batch<K, O>> {
        let due: Vec<K> = self
            .pending
            .iter()
            .filter(|(k, p)| self.due(k, p) <= now)
            .map(|(k, _)| k.clone())
            .collect();
        let mut batches = Vec::with_capacity(due.len());
        for key in due {
            if let Some(p) = self.pending.remove(&key) {
                self.queued -= p.ops.len();
                self.last_write.insert(key.clone(), now);
                batches.push(Batch { key, ops: p.ops });
            }
        }
        // A write older than `interval` no longer delays anything.
        let interval = self.interval;
        self.last_write
            .retain(|_, written| later(*written, interval) > now);
        batches
    }

    /// Puts back a batch whose write failed, ahead of operations that arrived since, so no
    /// operation is lost or reordered. It becomes due `interval` after `now` (retry back-off
    /// beyond that is the driver's). The limit is not applied: these were already accepted.
    pub fn requeue(&mut self, batch: Batch<K, O>, now: SystemTime) {
        let n = batch.ops.len();
        let entry = self.pending.entry(batch.key.clone()).or_insert(Pending {
            since: now,
            ops: Vec::new(),
        });
        let newer = std::mem::replace(&mut entry.ops, batch.ops);
        entry.ops.extend(newer);
        entry.since = entry.since.min(now);
        self.queued += n;
        self.last_write.insert(batch.key, now);
    }

    fn due(&self, key: &K, pending: &Pending<O>) -> SystemTime {
        match self.last_write.get(key) {
            Some(written) => pending.since.max(later(*written, self.interval)),
            None => pending.since,
        }
    }
}
