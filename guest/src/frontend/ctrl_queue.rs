//! The control queue's commands, as Linux's driver sends them: one chain each (header and
//! data device-readable, the ack byte device-writable), waited for by spinning on the used
//! ring. `VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET` tells a multiqueue device how many queue pairs the
//! driver uses; `VIRTIO_NET_CTRL_MQ_RSS_CONFIG` sets its RSS key and indirection table
//! ([`crate::config::RssRequest`]); [`send_command`] sends any command, a hostile one too.

use std::time::Duration;

use vadapt_virtq::driver::{DriverQueue, Seg};
use vadapt_virtq::mem::GuestMemory;
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
    vq: &mut DriverQueue,
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
