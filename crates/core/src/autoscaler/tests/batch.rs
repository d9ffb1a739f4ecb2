//! Webhook batching.

use std::time::Duration;

use super::t;
use crate::autoscaler::batch::*;
use crate::autoscaler::reservations::ScaleOp::{Down, Up};

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn batcher() -> Batcher<&'static str> {
    Batcher::new(secs(3), 100)
}

#[test]
fn the_first_operation_for_an_idle_autoscaler_is_due_at_once() {
    let mut b = batcher();
    b.push("hra", Up, t(10)).unwrap();
    assert_eq!(b.next_due(), Some(t(10)));
    assert_eq!(
        b.take_due(t(10)),
        vec![Batch {
            key: "hra",
            ops: vec![Up]
        }]
    );
    assert_eq!(b.queued(), 0);
}

#[test]
fn operations_after_a_write_wait_for_the_interval_and_go_together() {
    let mut b = batcher();
    b.push("hra", Up, t(10)).unwrap();
    b.take_due(t(10));
    let base = t(10);
    b.push("hra", Up, base + secs(1)).unwrap();
    b.push("hra", Down, base + secs(2)).unwrap();
    assert_eq!(b.due_at(&"hra"), Some(base + secs(3)));
    assert!(b.take_due(base + secs(2)).is_empty());
    assert_eq!(
        b.take_due(base + secs(3)),
        vec![Batch {
            key: "hra",
            ops: vec![Up, Down]
        }]
    );
}

#[test]
fn autoscalers_are_batched_independently() {
    let mut b = batcher();
    b.push("a", Up, t(10)).unwrap();
    b.take_due(t(10));
    b.push("a", Up, t(10)).unwrap();
    b.push("b", Up, t(10)).unwrap();
    let due = b.take_due(t(10));
    assert_eq!(due.iter().map(|b| b.key).collect::<Vec<_>>(), vec!["b"]);
    assert_eq!(b.next_due(), Some(t(10) + secs(3)));
}

#[test]
fn a_full_queue_refuses_operations() {
    let mut b = Batcher::new(secs(3), 2);
    b.push("a", Up, t(0)).unwrap();
    b.push("b", Up, t(0)).unwrap();
    assert_eq!(b.push("c", Up, t(0)), Err(QueueFull { limit: 2 }));
    b.take_due(t(0));
    assert!(b.push("c", Up, t(0)).is_ok());
}

#[test]
fn a_failed_batch_is_requeued_ahead_of_newer_operations_and_retried_after_the_interval() {
    let mut b = batcher();
    b.push("hra", Up, t(0)).unwrap();
    let batch = b.take_due(t(0)).pop().unwrap();
    b.push("hra", Down, t(0) + secs(1)).unwrap();
    b.requeue(batch, t(0) + secs(1));
    assert_eq!(b.queued(), 2);
    assert_eq!(b.due_at(&"hra"), Some(t(0) + secs(4)));
    assert_eq!(b.take_due(t(0) + secs(4))[0].ops, vec![Up, Down]);
}

#[test]
fn an_old_write_no_longer_delays_the_next_batch() {
    let mut b = batcher();
    b.push("hra", Up, t(0)).unwrap();
    b.take_due(t(0));
    b.push("hra", Up, t(1)).unwrap();
    assert_eq!(b.due_at(&"hra"), Some(t(1)));
}

#[test]
fn nothing_pending_means_nothing_due() {
    let mut b = batcher();
    assert_eq!(b.next_due(), None);
    assert!(b.take_due(t(0)).is_empty());
}
