//! Packed ring event suppression (spec 2.8.14, 2.8.21): the three modes of
//! both structures, from each side, with and without EVENT_IDX.

use vadapt_virtq::mock::{buf, readable};
use vadapt_virtq::packed::{
    EventSuppression, PackedMockQueue, RingPos, RING_EVENT_FLAGS_DESC, RING_EVENT_FLAGS_DISABLE,
    RING_EVENT_FLAGS_ENABLE,
};
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

fn send(q: &mut PackedMockQueue, n: u16) {
    for i in 0..n {
        q.driver.add(&[readable(buf(u64::from(i)), 64)]).unwrap();
    }
    q.driver.publish();
}

fn serve(q: &mut PackedMockQueue, n: u16) {
    for _ in 0..n {
        let id = q.device.pop(&q.mem, &mut q.chain).unwrap().unwrap();
        q.device.push_used(id, 0);
    }
    assert_eq!(q.device.flush_used(), n);
}

fn drain(q: &mut PackedMockQueue) {
    while q.driver.pop_used().is_some() {}
}

#[test]
fn calls_follow_enable_and_disable_without_event_idx() {
    let mut q = PackedMockQueue::new(7, PLAIN);
    assert!(!q.device.needs_call(), "nothing published yet");
    assert_eq!(q.driver_event().flags, RING_EVENT_FLAGS_ENABLE);
    send(&mut q, 2);
    serve(&mut q, 2);
    assert!(q.device.needs_call());
    assert!(!q.device.needs_call(), "nothing new since");
    q.driver.disable_cb();
    assert_eq!(q.driver_event().flags, RING_EVENT_FLAGS_DISABLE);
    drain(&mut q);
    send(&mut q, 3);
    serve(&mut q, 3);
    assert!(!q.device.needs_call(), "disabled");
    assert!(!q.driver.call_owed(), "disabled: nothing owed");
    // Re-enabling finds the used buffers already there: poll again.
    assert!(!q.driver.enable_cb());
    assert!(q.driver.call_owed());
    drain(&mut q);
    assert!(q.driver.enable_cb());
    assert!(!q.driver.call_owed());
    // DESC without EVENT_IDX is read as ENABLE.
    q.set_driver_event(EventSuppression {
        off_wrap: 0x7fff,
        flags: RING_EVENT_FLAGS_DESC,
    });
    send(&mut q, 1);
    serve(&mut q, 1);
    assert!(q.device.needs_call());
}

#[test]
fn calls_follow_the_desc_position_with_event_idx() {
    let mut q = PackedMockQueue::new(10, EVENT);
    assert_eq!(q.driver_event().flags, RING_EVENT_FLAGS_DESC);
    send(&mut q, 1);
    serve(&mut q, 1);
    assert!(q.device.needs_call(), "first check always calls");
    drain(&mut q);
    // The driver asks for the call at its next used position (1): served.
    assert_eq!(
        RingPos::from_u16(q.driver_event().off_wrap),
        RingPos { idx: 1, wrap: true }
    );
    send(&mut q, 2);
    serve(&mut q, 2);
    assert!(q.device.needs_call());
    // The driver has not consumed: its event stays at 1, passed already.
    send(&mut q, 2);
    serve(&mut q, 2);
    assert!(!q.device.needs_call(), "event behind what was published");
    drain(&mut q);
    // Over the wrap: an event at position 2 of the next lap (wrap 0).
    send(&mut q, 5); // positions 5..10
    serve(&mut q, 5);
    let _ = q.device.needs_call();
    drain(&mut q);
    q.set_driver_event(EventSuppression {
        off_wrap: RingPos {
            idx: 2,
            wrap: false,
        }
        .to_u16(),
        flags: RING_EVENT_FLAGS_DESC,
    });
    send(&mut q, 2); // positions 0, 1 of lap 2
    serve(&mut q, 2);
    assert!(!q.device.needs_call(), "position 2 not reached");
    send(&mut q, 1);
    serve(&mut q, 1);
    assert!(q.device.needs_call(), "position 2 used now");
    // An event in the previous lap's range, crossed in one flush over the wrap.
    drain(&mut q);
    send(&mut q, 7); // positions 3..10
    serve(&mut q, 7);
    let _ = q.device.needs_call();
    drain(&mut q);
    q.set_driver_event(EventSuppression {
        off_wrap: RingPos {
            idx: 9,
            wrap: false,
        }
        .to_u16(),
        flags: RING_EVENT_FLAGS_DESC,
    });
    send(&mut q, 3); // positions 0.. of lap 3 (wrap 1)
    serve(&mut q, 3);
    assert!(
        !q.device.needs_call(),
        "position 9 of lap 2 was before this flush"
    );
    // DISABLE wins over EVENT_IDX.
    drain(&mut q);
    q.driver.disable_cb();
    send(&mut q, 1);
    serve(&mut q, 1);
    assert!(!q.device.needs_call());
}

#[test]
fn delayed_callbacks_ask_for_three_quarters() {
    let mut q = PackedMockQueue::new(9, EVENT);
    send(&mut q, 8);
    assert!(q.driver.enable_cb_delayed());
    // 8 outstanding → event 6 ahead.
    assert_eq!(
        RingPos::from_u16(q.driver_event().off_wrap),
        RingPos { idx: 6, wrap: true }
    );
    let _ = q.device.needs_call(); // first check
    serve(&mut q, 3);
    assert!(!q.device.needs_call());
    assert!(!q.driver.call_owed(), "position 6 not used yet");
    serve(&mut q, 4);
    assert!(q.device.needs_call());
    assert!(q.driver.call_owed());
}

#[test]
fn kicks_follow_the_device_event_structure() {
    for f in [PLAIN, EVENT] {
        let mut q = PackedMockQueue::new(6, f);
        let want = if f.event_idx {
            RING_EVENT_FLAGS_DESC
        } else {
            RING_EVENT_FLAGS_ENABLE
        };
        assert_eq!(q.device_event().flags, want);
        assert!(!q.driver.kick_prepare(), "nothing published");
        send(&mut q, 1);
        assert!(q.driver.kick_prepare());
        q.device.disable_notifications();
        assert_eq!(q.device_event().flags, RING_EVENT_FLAGS_DISABLE);
        send(&mut q, 2);
        assert!(!q.driver.kick_prepare(), "{f:?}: disabled");
        // Enabling with work pending says poll again.
        assert_eq!(q.device.enable_notifications(), Ok(true));
        serve(&mut q, 3);
        drain(&mut q);
        assert_eq!(q.device.enable_notifications(), Ok(false));
        send(&mut q, 1);
        assert!(q.driver.kick_prepare(), "{f:?}: enabled");
    }
}

#[test]
fn kick_threshold_waits_for_the_nth_descriptor_across_the_wrap() {
    let mut q = PackedMockQueue::new(5, EVENT);
    send(&mut q, 4);
    serve(&mut q, 4);
    drain(&mut q);
    let _ = q.driver.kick_prepare();
    // Device at position 4: ask for a kick when 3 are pending (position 1
    // of the next lap).
    assert!(q.device.set_kick_threshold(3));
    assert_eq!(
        RingPos::from_u16(q.device_event().off_wrap),
        RingPos {
            idx: 1,
            wrap: false
        }
    );
    send(&mut q, 2);
    assert!(!q.driver.kick_prepare(), "two pending");
    send(&mut q, 1);
    assert!(q.driver.kick_prepare(), "third pending");
    assert_eq!(q.device.enable_notifications_for(3), Ok(true));
    assert_eq!(q.device.enable_notifications_for(4), Ok(false));
    // Without EVENT_IDX there is no threshold.
    let mut p = PackedMockQueue::new(5, PLAIN);
    assert!(!p.device.set_kick_threshold(3));
    assert_eq!(p.device.enable_notifications_for(2), Ok(false));
}
