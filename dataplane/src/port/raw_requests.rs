//! The two vhost-user requests the `vhost` crate reads but does not hand to
//! a backend (it answers them with "invalid message", which would end the
//! connection): `SEND_RARP` and `SET_LOG_FD`. The serve loop sees them in
//! the peeked header and lets this file take them off the socket instead.
//!
//! * `SEND_RARP` (19, with `VHOST_USER_PROTOCOL_F_RARP`): after a live
//!   migration, for a guest that did not negotiate
//!   `VIRTIO_NET_F_GUEST_ANNOUNCE`, QEMU asks the backend to announce the
//!   VM's MAC. vadapt sends the RARP frame into its switch from the port, as
//!   if the guest had sent it ([`Connection::announce`]): the switch learns
//!   the MAC on the destination port with that frame, and the broadcast
//!   tells everything behind the other ports (TAP, uplinks) the same.
//! * `SET_LOG_FD` (7): an eventfd the frontend would like written when the
//!   log changes. QEMU never sends it (it reads the shared log when it
//!   syncs); DPDK's vhost library takes and closes it. So does vadapt,
//!   answering it so that a frontend that does send it keeps going.
//!
//! Both carry one `u64` payload; any other size, flags other than version 1
//! and `NEED_REPLY`, or descriptors where none belong, end the connection
//! (the stream's framing cannot be trusted).
//!
//! [`reply`] is also how the serve loop answers a request the crate
//! refused without the REPLY_ACK it owed (`ADD_MEM_REG` with no or two
//! descriptors, say).

use super::handler::Connection;
use super::received_fds::recv_closing_fds;
use std::os::fd::RawFd;
use vadapt_wire::Mac;

/// `VHOST_USER_SET_LOG_FD`.
pub const SET_LOG_FD: u32 = 7;
/// `VHOST_USER_SEND_RARP`.
pub const SEND_RARP: u32 = 19;

/// Header length: request, flags, payload size (`u32` each).
const HDR_LEN: usize = 12;
/// The one payload both requests carry.
const PAYLOAD_LEN: usize = 8;
/// The header's version bits: version 1.
const VERSION: u32 = 0x1;
/// The header flag that asks for an answer (with `REPLY_ACK`).
const NEED_REPLY: u32 = 0x8;

/// Why a request of this file's ends the connection: the stream's framing
/// cannot be trusted, or the socket failed.
#[derive(Debug, thiserror::Error)]
pub enum RawRequestError {
    /// The payload is not the one `u64` both requests carry.
    #[error("vhost-user request {code} with a {size}-byte payload (want {PAYLOAD_LEN})")]
    PayloadSize {
        /// The request.
        code: u32,
        /// Its payload's size, as its header said (bytes).
        size: u32,
    },
    /// The request could not be read off the socket.
    #[error("reading request {code}")]
    Read {
        /// The request.
        code: u32,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The header's flags are not version 1 with `NEED_REPLY` at most.
    #[error("vhost-user request {code} with flags {flags:#x}")]
    Flags {
        /// The request.
        code: u32,
        /// Its flags.
        flags: u32,
    },
    /// `SEND_RARP` carried file descriptors.
    #[error("SEND_RARP with {fds} file descriptors")]
    SendRarpFds {
        /// How many.
        fds: usize,
    },
    /// `SET_LOG_FD` did not carry exactly one file descriptor.
    #[error("SET_LOG_FD with {fds} file descriptors")]
    SetLogFdFds {
        /// How many.
        fds: usize,
    },
    /// The answer the frontend asked for could not be sent.
    #[error("answering request {code}")]
    Answer {
        /// The request.
        code: u32,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

/// Why `SEND_RARP` was refused (answered; the connection goes on).
#[derive(Debug, thiserror::Error, Clone, Copy, PartialEq, Eq)]
pub enum AnnounceError {
    /// The frontend did not ack `VHOST_USER_PROTOCOL_F_RARP`.
    #[error("SEND_RARP without VHOST_USER_PROTOCOL_F_RARP acked")]
    FeatureNotAcked,
    /// No guest could send from this address (group, or all zeros).
    #[error("SEND_RARP for {0}, not a unicast address")]
    NotUnicast(Mac),
    /// The port's guest may not send from this address (port security).
    #[error(
        "SEND_RARP for {0}, not an address the port owns (port security: its mac= and \
         allowed_macs=)"
    )]
    Spoofed(Mac),
}

/// Whether the request `code` is one of this file's.
pub fn is_raw(code: u32) -> bool {
    matches!(code, SET_LOG_FD | SEND_RARP)
}

/// Takes the request `code` (of payload `size` bytes, as the peeked header
/// said) off `fd`, carries it out on `conn`, and answers it when the
/// frontend asked for an answer. `Ok(Err(why))`: refused, the connection
/// goes on (the refusal was answered where one was owed); `Err(why)`: the
/// connection must end.
pub fn serve_raw(
    fd: RawFd,
    code: u32,
    size: u32,
    conn: &mut Connection,
) -> Result<Result<(), AnnounceError>, RawRequestError> {
    if size as usize != PAYLOAD_LEN {
        return Err(RawRequestError::PayloadSize { code, size });
    }
    let (msg, fds) = read_message(fd).map_err(|source| RawRequestError::Read { code, source })?;
    let flags = u32::from_le_bytes([msg[4], msg[5], msg[6], msg[7]]);
    if flags & !(VERSION | NEED_REPLY) != 0 || flags & VERSION == 0 {
        return Err(RawRequestError::Flags { code, flags });
    }
    let payload: [u8; PAYLOAD_LEN] = msg[HDR_LEN..].try_into().expect("length checked");
    let outcome = match code {
        SEND_RARP if fds > 0 => return Err(RawRequestError::SendRarpFds { fds }),
        SEND_RARP => {
            let mac = Mac([
                payload[0], payload[1], payload[2], payload[3], payload[4], payload[5],
            ]);
            conn.announce(mac)
        }
        // The descriptor (if any) was closed by `read_message`.
        _ if fds != 1 => return Err(RawRequestError::SetLogFdFds { fds }),
        _ => Ok(()),
    };
    if flags & NEED_REPLY != 0 {
        reply(fd, code, outcome.is_ok())
            .map_err(|source| RawRequestError::Answer { code, source })?;
    }
    Ok(outcome)
}

/// Reads one message of header and `u64` payload; closes any descriptors
/// it carried and returns their number.
fn read_message(fd: RawFd) -> std::io::Result<([u8; HDR_LEN + PAYLOAD_LEN], usize)> {
    let mut data = [0u8; HDR_LEN + PAYLOAD_LEN];
    let (n, fds) = recv_closing_fds(fd, &mut data, libc::MSG_WAITALL)?;
    if n < data.len() {
        return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof));
    }
    Ok((data, fds))
}

/// The answer vhost-user's REPLY_ACK defines: the request's code, the
/// reply flag, and a `u64` that is 0 for success. Also the serve loop's,
/// for a request the `vhost` crate refused without the ack it owed.
pub(super) fn reply(fd: RawFd, code: u32, ok: bool) -> std::io::Result<()> {
    const VERSION_AND_REPLY: u32 = VERSION | 0x4;
    let mut m = [0u8; HDR_LEN + PAYLOAD_LEN];
    m[0..4].copy_from_slice(&code.to_le_bytes());
    m[4..8].copy_from_slice(&VERSION_AND_REPLY.to_le_bytes());
    m[8..12].copy_from_slice(&(PAYLOAD_LEN as u32).to_le_bytes());
    m[12..20].copy_from_slice(&u64::from(!ok).to_le_bytes());
    // SAFETY: `m` is a valid buffer of its length for the call's duration.
    let n = unsafe { libc::send(fd, m.as_ptr().cast(), m.len(), libc::MSG_NOSIGNAL) };
    match n {
        n if n < 0 => Err(std::io::Error::last_os_error()),
        n if n as usize != m.len() => Err(std::io::Error::from(std::io::ErrorKind::WriteZero)),
        _ => Ok(()),
    }
}

impl Connection {
    /// `SEND_RARP`: sends the RARP announcement of `mac` into the switch
    /// from this port, as if the guest had sent it. Refused unless the
    /// frontend acked `VHOST_USER_PROTOCOL_F_RARP`, for an address no
    /// guest could send from (group, or all zeros), and for one the port's
    /// guest may not send from (port security; the switch drops and counts
    /// it as `spoofed_src`).
    pub fn announce(&mut self, mac: Mac) -> Result<(), AnnounceError> {
        use vhost::vhost_user::message::VhostUserProtocolFeatures as P;
        if self.protocol & P::RARP.bits() == 0 {
            return Err(AnnounceError::FeatureNotAcked);
        }
        if mac.is_multicast() || mac == Mac::default() {
            return Err(AnnounceError::NotUnicast(mac));
        }
        let mut frames = crate::frames::FrameBatch::new(1);
        frames.push(&vadapt_wire::rarp::rarp_announcement(mac));
        let refused = self
            .port
            .ingress()
            .and_then(|i| i.forward(0, &frames, &mut crate::switch::FdbCache::default()));
        if let Some(r) = &refused {
            r.count_into(&self.port.stats, 0);
            if r.spoofed > 0 {
                return Err(AnnounceError::Spoofed(mac));
            }
        }
        if let Some(held_back) = self.port.may_log("SEND_RARP announced") {
            tracing::info!(
                port = self.port.name(),
                %mac,
                sent = refused.is_some(),
                held_back,
                "announced the VM's MAC for its frontend (SEND_RARP, after a live migration)"
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_two_uncovered_requests_are_raw() {
        assert!(is_raw(SEND_RARP) && is_raw(SET_LOG_FD));
        for code in [1, 6, 11, 18, 24, 37, 38] {
            assert!(!is_raw(code), "{code}");
        }
    }
}
