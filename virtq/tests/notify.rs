//! Notification suppression rules on both sides (spec 2.7.7, 2.7.10).

mod common;

use common::*;
use vadapt_virtq::spec::{VRING_AVAIL_F_NO_INTERRUPT, VRING_USED_F_NO_NOTIFY};
use vadapt_virtq::DeviceRing;
use vadapt_virtq::RingFeatures;

const EVENT: RingFeatures = RingFeatures {
    event_idx: true,
    in_order: false,
    indirect: false,
};
const PLAIN: RingFeatures = RingFeatures {
    event_idx: false,
    in_order: false,
    indirect: false,
};

/// Driver adds and publishes `n` one-segment TX buffers.
fn send(s: &mut Setup, n: u16) {
    for i in 0..n {
        s.driver.add(&[readable(buf(u64::from(i)), 64)]).unwrap();
    }
    s.driver.publish();
}

/// Device consumes and publishes `n` buffers (one flush).
fn serve(s: &mut Setup, n: u16) {
    for _ in 0..n {
        let head = s.device.pop(&s.mem, &mut s.chain).unwrap().unwrap();
        s.device.push_used(head, 0);
    }
    assert_eq!(s.device.flush_used(), n);
}

#[test]
fn calls_follow_no_interrupt_without_event_idx() {
    let mut s = setup(16, PLAIN);
    assert!(!s.device.needs_call(), "nothing published yet");
    send(&mut s, 4);
    serve(&mut s, 1);
    assert!(s.device.needs_call());
    assert!(!s.device.needs_call(), "nothing new since the last check");
    s.driver.disable_cb();
    assert_eq!(raw(&s).avail_flags(), VRING_AVAIL_F_NO_INTERRUPT);
    serve(&mut s, 1);
    assert!(!s.device.needs_call(), "suppressed by NO_INTERRUPT");
    // Driver consumes, re-enables: the two used buffers are pending, so
    // enable_cb reports them instead of waiting for a call.
    assert!(!s.driver.enable_cb());
    assert_eq!(raw(&s).avail_flags(), 0);
    while s.driver.pop_used().is_some() {}
    assert!(s.driver.enable_cb());
    serve(&mut s, 2);
    assert!(s.device.needs_call());
}

#[test]
fn calls_follow_used_event_with_event_idx() {
    let mut s = setup(16, EVENT);
    let r = raw(&s);
    send(&mut s, 10);
    assert_eq!(r.avail_flags(), 0, "flags stay 0 with EVENT_IDX");
    // Ask for a call when entry 3 is used (used.idx reaches 4).
    r.set_used_event(3);
    serve(&mut s, 1);
    assert!(
        s.device.needs_call(),
        "first check after start always calls"
    );
    serve(&mut s, 1); // used.idx 2
    assert!(!s.device.needs_call());
    serve(&mut s, 1); // 3
    assert!(!s.device.needs_call());
    serve(&mut s, 1); // 4: crosses used_event 3
    assert!(s.device.needs_call());
    serve(&mut s, 1); // 5
    assert!(!s.device.needs_call());
    // A batch that jumps over the event also calls.
    r.set_used_event(6);
    serve(&mut s, 3); // 5 -> 8
    assert!(s.device.needs_call());
    // The flag is ignored with EVENT_IDX.
    r.set_avail_flags(VRING_AVAIL_F_NO_INTERRUPT);
    r.set_used_event(8);
    serve(&mut s, 1);
    assert!(s.device.needs_call());
}

#[test]
fn driver_disable_cb_with_event_idx_suppresses_calls() {
    let mut s = setup(16, EVENT);
    send(&mut s, 8);
    serve(&mut s, 1);
    assert!(s.device.needs_call());
    assert_eq!(s.driver.pop_used().map(|(_, l)| l), Some(0));
    assert_eq!(raw(&s).used_event(), 1, "pop_used asks for the next one");
    s.driver.disable_cb();
    for _ in 0..5 {
        serve(&mut s, 1);
        assert!(!s.device.needs_call());
    }
    // Delayed enable: 7 outstanding, so the call is wanted after 3/4 of
    // them (5); exactly 5 are already used, which is not more than that.
    assert!(s.driver.enable_cb_delayed());
    assert_eq!(raw(&s).used_event(), 1 + 5);
    serve(&mut s, 1); // used.idx 7 crosses 6
    assert!(s.device.needs_call());
}

#[test]
fn kicks_follow_no_notify_without_event_idx() {
    let mut s = setup(16, PLAIN);
    assert!(!s.driver.kick_prepare(), "nothing published");
    send(&mut s, 1);
    assert!(s.driver.kick_prepare());
    s.device.disable_notifications();
    assert_eq!(raw(&s).used_flags(), VRING_USED_F_NO_NOTIFY);
    send(&mut s, 1);
    assert!(!s.driver.kick_prepare());
    // Work is pending when the device re-enables: it must poll again.
    assert_eq!(s.device.enable_notifications(), Ok(true));
    assert_eq!(raw(&s).used_flags(), 0);
    serve(&mut s, 2);
    assert_eq!(s.device.enable_notifications(), Ok(false));
    send(&mut s, 1);
    assert!(s.driver.kick_prepare());
}

#[test]
fn kicks_follow_avail_event_with_event_idx() {
    let mut s = setup(16, EVENT);
    let r = raw(&s);
    assert_eq!(r.avail_event(), 0, "enabled at start");
    send(&mut s, 1);
    assert!(s.driver.kick_prepare(), "crossed avail_event 0");
    send(&mut s, 1);
    assert!(!s.driver.kick_prepare(), "avail_event 0 already behind");
    // Device catches up and re-enables; race check sees the pending work.
    assert_eq!(s.device.enable_notifications(), Ok(true));
    serve(&mut s, 2);
    assert_eq!(s.device.enable_notifications(), Ok(false));
    assert_eq!(r.avail_event(), 2);
    send(&mut s, 1);
    assert!(s.driver.kick_prepare());
    serve(&mut s, 1);

    // Disabled: avail_event is left behind, no more kicks.
    s.device.disable_notifications();
    assert!(!s.device.notifications_enabled());
    for _ in 0..3 {
        send(&mut s, 1);
        assert!(!s.driver.kick_prepare());
    }
    serve(&mut s, 3);

    // Threshold: kick once 4 buffers are pending.
    assert!(s.device.set_kick_threshold(4));
    assert_eq!(r.avail_event(), s.device.last_avail() + 3);
    for i in 1..=6 {
        send(&mut s, 1);
        assert_eq!(s.driver.kick_prepare(), i == 4, "pending {i}");
    }
    // A batch that jumps over the threshold kicks too.
    serve(&mut s, 6);
    assert!(s.device.set_kick_threshold(2));
    send(&mut s, 3);
    assert!(s.driver.kick_prepare());
}

#[test]
fn kick_threshold_needs_event_idx() {
    let mut s = setup(16, PLAIN);
    assert!(!s.device.set_kick_threshold(4));
}

#[test]
fn enable_notifications_closes_the_race() {
    // The driver publishes after the device decided to sleep but before it
    // re-enabled: enable_notifications must report the work.
    for f in [PLAIN, EVENT] {
        let mut s = setup(16, f);
        s.device.disable_notifications();
        send(&mut s, 1);
        let kicked = s.driver.kick_prepare();
        assert!(!kicked || f.event_idx, "no kick while suppressed ({f:?})");
        assert_eq!(s.device.enable_notifications(), Ok(true), "{f:?}");
        serve(&mut s, 1);
        assert_eq!(s.device.enable_notifications(), Ok(false), "{f:?}");
    }
}

#[test]
fn a_call_is_owed_once_the_device_passes_the_delayed_event_point() {
    let mut s = setup(16, EVENT);
    send(&mut s, 8);
    s.driver.disable_cb();
    serve(&mut s, 1);
    assert!(!s.driver.call_owed(), "callbacks off: nothing owed");
    // 8 outstanding: used_event = 6, the device calls once used.idx passes it (7).
    assert!(s.driver.enable_cb_delayed());
    assert_eq!(raw(&s).used_event(), 6);
    assert!(
        !s.driver.call_owed(),
        "one used: a slow device, not a lost call"
    );
    serve(&mut s, 5);
    assert!(!s.driver.call_owed(), "six used: still at the event");
    serve(&mut s, 1);
    assert!(s.driver.call_owed(), "seven used: the device owes the call");
}

#[test]
fn without_event_idx_any_used_buffer_is_owed_a_call() {
    let mut s = setup(16, PLAIN);
    send(&mut s, 2);
    assert!(s.driver.enable_cb());
    assert!(!s.driver.call_owed());
    serve(&mut s, 1);
    assert!(s.driver.call_owed());
    s.driver.disable_cb();
    assert!(!s.driver.call_owed(), "NO_INTERRUPT: nothing owed");
}

#[test]
fn a_device_that_put_buffers_back_waits_for_enough_of_them() {
    // A receive frame needed 3 buffers, 2 were there: they are put back and
    // the device asks for a kick once there are 3, not at the next one.
    let mut s = setup(16, EVENT);
    send(&mut s, 2);
    let _ = s.driver.kick_prepare(); // the first two: not this test's business
    for _ in 0..2 {
        assert!(s.device.pop(&s.mem, &mut s.chain).unwrap().is_some());
    }
    s.device.unpop(2);
    assert_eq!(s.device.avail_pending(), Ok(2), "both back");
    assert_eq!(s.device.enable_notifications_for(3), Ok(false));
    send(&mut s, 1);
    assert!(s.driver.kick_prepare(), "the third buffer kicks");
    assert_eq!(s.device.enable_notifications_for(3), Ok(true));
    // Without EVENT_IDX every buffer kicks, and 2 of 3 are still no work.
    let mut s = setup(16, PLAIN);
    send(&mut s, 2);
    assert_eq!(s.device.enable_notifications_for(3), Ok(false));
    assert_eq!(s.device.enable_notifications_for(2), Ok(true));
}
