//! The control queue's one command: `VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET`, which tells a
//! multiqueue device how many queue pairs the driver uses.

use std::time::Duration;

use vadapt_virtq::driver::Seg;
use vadapt_virtq::mem::GuestMemory;
use vadapt_virtq::AnyDriverQueue;
use virtio_bindings::virtio_net::{
    VIRTIO_NET_CTRL_MQ, VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET, VIRTIO_NET_OK,
};

use super::error::FrontendError;
use super::memory_plan::CtrlPlan;
use crate::driver::queue::Notifiers;

/// Outcome of announcing the number of queue pairs on the control queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CtrlMq {
    /// Not sent: one pair, or `MQ`/`CTRL_VQ` not negotiated.
    NotNeeded,
    /// Not sent: the backend's queue count leaves no index for the control queue (QEMU
    /// handles the control queue itself and never gives it to a vhost-user backend, so many
    /// backends, DPDK's among them, have none). The pairs are enabled with
    /// `SET_VRING_ENABLE` either way.
    NoControlQueue,
    /// Sent and acknowledged with `VIRTIO_NET_OK`.
    Acked,
    /// Sent and refused (status byte other than `VIRTIO_NET_OK`).
    Refused(u8),
    /// Sent, and no answer within the timeout.
    NoAnswer,
}

/// How long the guest waits for the control queue's answer (ms). Linux spins on it without
/// limit; a synthetic guest must not hang on a backend that ignores the queue.
const CTRL_TIMEOUT_MS: u64 = 1000;

/// Sends `VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET` (`pairs`) on the started control queue `vq`
/// (vhost-user index `index`), its command in `plan`'s buffer page; waits (bounded) for the
/// ack by polling the used ring, as Linux spins on `virtqueue_get_buf`.
pub(super) fn send_vq_pairs_set(
    mem: &GuestMemory,
    vq: &mut AnyDriverQueue,
    notify: &Notifiers,
    plan: CtrlPlan,
    index: usize,
    pairs: u16,
) -> Result<CtrlMq, FrontendError> {
    // virtio_net_ctrl_hdr {class, cmd}, virtio_net_ctrl_mq {virtqueue_pairs: le16}, ack.
    let hdr = [
        VIRTIO_NET_CTRL_MQ as u8,
        VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET as u8,
    ];
    let ack_gpa = plan.buf + 16;
    let ack_init = [0xFFu8];
    let write = |gpa: u64, b: &[u8]| mem.write(gpa, b).map_err(FrontendError::Memory);
    write(plan.buf, &hdr)?;
    write(plan.buf + 8, &pairs.to_le_bytes())?;
    write(ack_gpa, &ack_init)?;
    let segs = [
        Seg {
            gpa: plan.buf,
            len: 2,
            writable: false,
        },
        Seg {
            gpa: plan.buf + 8,
            len: 2,
            writable: false,
        },
        Seg {
            gpa: ack_gpa,
            len: 1,
            writable: true,
        },
    ];
    vq.add(&segs).map_err(|e| FrontendError::Ring {
        index,
        reason: e.to_string(),
    })?;
    vq.publish();
    if vq.kick_prepare() {
        notify.kick();
    }
    let start = std::time::Instant::now();
    let outcome = loop {
        if vq.pop_used().is_some() {
            let mut ack = [0u8];
            mem.read(ack_gpa, &mut ack).map_err(FrontendError::Memory)?;
            break if u32::from(ack[0]) == VIRTIO_NET_OK {
                CtrlMq::Acked
            } else {
                CtrlMq::Refused(ack[0])
            };
        }
        if start.elapsed() >= Duration::from_millis(CTRL_TIMEOUT_MS) {
            tracing::warn!("control queue: no answer to VQ_PAIRS_SET within {CTRL_TIMEOUT_MS} ms");
            break CtrlMq::NoAnswer;
        }
        std::thread::sleep(Duration::from_micros(100));
    };
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frontend::memory_plan::{plan_memory, TxBufs};
    use vadapt_virtq::{
        AnyDeviceQueue, AnyLayout, Chain, DeviceQueue, PackedDeviceQueue, RingFeatures,
    };

    /// Sends VQ_PAIRS_SET for 3 pairs over a control queue of either kind to a device
    /// thread answering `status`; returns what the guest made of it and the command bytes
    /// the device read.
    fn exchange(packed: bool, status: u8) -> (CtrlMq, [u8; 4]) {
        let tx = TxBufs {
            stride: 128,
            payload: 0,
        };
        let plan = plan_memory(1, 64, tx, packed);
        let mem = GuestMemory::new_anonymous(plan.size).unwrap();
        let f = RingFeatures::all();
        let mut vq = AnyDriverQueue::new(&mem, plan.ctrl.ring, f).unwrap();
        assert_eq!(vq.is_packed(), packed);
        vq.disable_cb();
        let mut dev = match plan.ctrl.ring {
            AnyLayout::Split(l) => {
                AnyDeviceQueue::Split(DeviceQueue::new(&mem, l, false, f, 0).unwrap())
            }
            AnyLayout::Packed(l) => {
                AnyDeviceQueue::Packed(PackedDeviceQueue::new(&mem, l, false, f, 0x8000).unwrap())
            }
        };
        let notify = Notifiers::new().unwrap();
        let dmem = mem.clone();
        let device = std::thread::spawn(move || {
            let mut chain = Chain::with_capacity(64);
            for _ in 0..5000 {
                if let Some(head) = dev.pop(&dmem, &mut chain).unwrap() {
                    let mut cmd = [0u8; 4];
                    assert_eq!(chain.read_into(0, &mut cmd), 4);
                    assert_eq!(chain.write_from(0, &[status]), 1);
                    dev.push_used(head, 1);
                    dev.flush_used();
                    return cmd;
                }
                std::thread::sleep(Duration::from_micros(200));
            }
            panic!("no command on the control queue");
        });
        let outcome = send_vq_pairs_set(&mem, &mut vq, &notify, plan.ctrl, 2, 3).unwrap();
        (outcome, device.join().unwrap())
    }

    #[test]
    fn vq_pairs_set_goes_over_a_split_or_a_packed_control_queue() {
        let want = [
            VIRTIO_NET_CTRL_MQ as u8,
            VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET as u8,
            3,
            0,
        ];
        for packed in [false, true] {
            assert_eq!(
                exchange(packed, VIRTIO_NET_OK as u8),
                (CtrlMq::Acked, want),
                "packed {packed}"
            );
            assert_eq!(
                exchange(packed, 1),
                (CtrlMq::Refused(1), want),
                "packed {packed}"
            );
        }
    }
}
