//! The control queue's commands, as Linux's driver sends them: one chain each (header and
//! data device-readable, the ack byte device-writable), waited for by spinning on the used
//! ring. `VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET` tells a multiqueue device how many queue pairs the
//! driver uses; `VIRTIO_NET_CTRL_MQ_RSS_CONFIG` sets its RSS key and indirection table
//! ([`crate::config::RssRequest`]); [`send_command`] sends any command, a hostile one too.

use std::time::Duration;

use vadapt_virtq::driver::Seg;
use vadapt_virtq::mem::GuestMemory;
use vadapt_virtq::AnyDriverQueue;
use virtio_bindings::virtio_net::VIRTIO_NET_OK;

use super::error::FrontendError;
use super::memory_plan::{CtrlPlan, PAGE};
use crate::driver::queue::Notifiers;
pub use crate::metrics::CtrlOutcome;

/// How long the guest waits for the control queue's answer (ms). Linux spins on it without
/// limit; a synthetic guest must not hang on a backend that ignores the queue.
const CTRL_TIMEOUT_MS: u64 = 1000;

/// Most data bytes a command may carry: the command page holds the header (at 0), the data
/// (from 8) and the ack byte after it.
pub const MAX_DATA: usize = PAGE as usize - 16;

/// Sends command (`class`, `command`) with `data` on the started control queue `vq`
/// (vhost-user index `index`), in `plan`'s buffer page; waits (bounded) for the ack by
/// polling the used ring, as Linux spins on `virtqueue_get_buf`. Data longer than
/// [`MAX_DATA`] is an error, not sent.
#[allow(clippy::too_many_arguments)]
pub(super) fn send_command(
    mem: &GuestMemory,
    vq: &mut AnyDriverQueue,
    notify: &Notifiers,
    plan: CtrlPlan,
    index: usize,
    class: u8,
    command: u8,
    data: &[u8],
) -> Result<CtrlOutcome, FrontendError> {
    if data.len() > MAX_DATA {
        return Err(FrontendError::Ring {
            index,
            reason: format!(
                "control command of {} bytes: at most {MAX_DATA}",
                data.len()
            ),
        });
    }
    // virtio_net_ctrl_hdr {class, cmd}, the command's data, ack.
    let data_gpa = plan.buf + 8;
    let ack_gpa = data_gpa + (data.len() as u64).max(8);
    let write = |gpa: u64, b: &[u8]| mem.write(gpa, b).map_err(FrontendError::Memory);
    write(plan.buf, &[class, command])?;
    write(data_gpa, data)?;
    write(ack_gpa, &[0xFF])?;
    let mut segs = vec![Seg {
        gpa: plan.buf,
        len: 2,
        writable: false,
    }];
    if !data.is_empty() {
        segs.push(Seg {
            gpa: data_gpa,
            len: data.len() as u32,
            writable: false,
        });
    }
    segs.push(Seg {
        gpa: ack_gpa,
        len: 1,
        writable: true,
    });
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
                CtrlOutcome::Acked
            } else {
                CtrlOutcome::Refused(ack[0])
            };
        }
        if start.elapsed() >= Duration::from_millis(CTRL_TIMEOUT_MS) {
            tracing::warn!(
                class,
                command,
                "control queue: no answer within {CTRL_TIMEOUT_MS} ms"
            );
            break CtrlOutcome::NoAnswer;
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
        AnyDeviceQueue, AnyLayout, Chain, DeviceQueue, DeviceRing, PackedDeviceQueue, RingFeatures,
    };
    use virtio_bindings::virtio_net::{VIRTIO_NET_CTRL_MQ, VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET};

    /// Sends VQ_PAIRS_SET for 3 pairs over a control queue of either kind to a device
    /// thread answering `status`; returns what the guest made of it and the command bytes
    /// the device read.
    fn exchange(packed: bool, status: u8) -> (CtrlOutcome, [u8; 4]) {
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
        let outcome = send_command(
            &mem,
            &mut vq,
            &notify,
            plan.ctrl,
            2,
            VIRTIO_NET_CTRL_MQ as u8,
            VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET as u8,
            &3u16.to_le_bytes(),
        )
        .unwrap();
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
                (CtrlOutcome::Acked, want),
                "packed {packed}"
            );
            assert_eq!(
                exchange(packed, 1),
                (CtrlOutcome::Refused(1), want),
                "packed {packed}"
            );
        }
    }
}
