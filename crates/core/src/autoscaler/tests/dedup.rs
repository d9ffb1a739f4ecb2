//! Delivery deduplication.

use super::{mins, t};
use crate::autoscaler::dedup::*;

#[test]
fn a_key_is_new_once_then_a_duplicate_within_the_window() {
    let mut d = Dedup::new(mins(60), 100);
    assert_eq!(d.observe("delivery-1", t(0)), Seen::First);
    assert_eq!(d.observe("delivery-1", t(59)), Seen::Duplicate);
    assert_eq!(d.observe("delivery-2", t(59)), Seen::First);
}

#[test]
fn a_key_is_new_again_once_the_window_has_passed() {
    let mut d = Dedup::new(mins(60), 100);
    d.observe("k", t(0));
    assert_eq!(d.observe("k", t(60)), Seen::First);
}

#[test]
fn duplicates_do_not_extend_the_window() {
    let mut d = Dedup::new(mins(60), 100);
    d.observe("k", t(0));
    d.observe("k", t(50));
    assert_eq!(d.observe("k", t(61)), Seen::First);
}

#[test]
fn expired_keys_are_forgotten() {
    let mut d = Dedup::new(mins(10), 100);
    d.observe("a", t(0));
    d.observe("b", t(5));
    d.observe("c", t(12));
    assert_eq!(d.len(), 2);
    assert!(!d.contains(&"a", t(12)));
    assert!(d.contains(&"b", t(12)));
}

#[test]
fn at_capacity_the_oldest_key_is_forgotten_first() {
    let mut d = Dedup::new(mins(60), 2);
    d.observe("a", t(0));
    d.observe("b", t(1));
    d.observe("c", t(2));
    assert_eq!(d.len(), 2);
    assert_eq!(d.observe("b", t(3)), Seen::Duplicate);
    assert_eq!(d.observe("a", t(3)), Seen::First);
}

#[test]
fn a_forgotten_key_is_accepted_again() {
    let mut d = Dedup::new(mins(60), 100);
    d.observe(("job", 42), t(0));
    d.forget(&("job", 42));
    assert!(d.is_empty());
    assert_eq!(d.observe(("job", 42), t(1)), Seen::First);
    assert_eq!(d.observe(("job", 42), t(2)), Seen::Duplicate);
}

#[test]
fn forgetting_and_re_recording_keeps_memory_bounded() {
    let mut d = Dedup::new(mins(60), 4);
    for i in 0..1000 {
        d.observe(i % 3, t(0));
        d.forget(&(i % 3));
    }
    assert!(d.is_empty());
    assert_eq!(d.observe(1, t(0)), Seen::First);
}

#[test]
fn a_clock_going_back_keeps_keys_longer_not_shorter() {
    let mut d = Dedup::new(mins(10), 100);
    d.observe("k", t(100));
    assert_eq!(d.observe("k", t(95)), Seen::Duplicate);
}
