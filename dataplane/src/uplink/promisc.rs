//! The NIC in promiscuous mode while the uplink runs.
//!
//! A NIC's MAC filter passes frames addressed to its own address (and the
//! multicast groups it joined). The uplink carries frames for the VMs
//! behind the switch, whose addresses the NIC does not know, so a real NIC
//! would drop them before the XDP program sees them. Linux's bridge and
//! Open vSwitch put every port they enslave into promiscuous mode for the
//! same reason; the uplink does too.
//!
//! It asks as libpcap does: a packet socket's `PACKET_MR_PROMISC`
//! membership. The kernel counts promiscuity per interface, so an operator's
//! `ip link set … promisc on` or a running `tcpdump` is left as it is, and
//! it drops the membership when the socket closes: at stop, and equally
//! when the daemon is killed, so a crash never leaves the NIC promiscuous.
//! The socket is bound to no protocol, so it receives nothing.
//!
//! Needs `CAP_NET_RAW`, which the AF_XDP sockets need as well. veth, the
//! interface the tests use, honours the flag (`IFF_PROMISC` in
//! `/sys/class/net/IFACE/flags`).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// Errors putting the interface into promiscuous mode.
#[derive(Debug, thiserror::Error)]
pub enum PromiscError {
    /// The interface's name cannot be an interface name.
    #[error("bad interface name {0:?}")]
    Name(String),
    /// No interface has that name.
    #[error("no interface {iface}")]
    NoSuchInterface {
        /// The interface.
        iface: String,
        /// `if_nametoindex`'s error.
        #[source]
        source: io::Error,
    },
    /// The packet socket could not be opened (needs `CAP_NET_RAW`).
    #[error("cannot open a packet socket to make {iface} promiscuous (needs CAP_NET_RAW)")]
    Socket {
        /// The interface.
        iface: String,
        /// `socket`'s error.
        #[source]
        source: io::Error,
    },
    /// The kernel refused the membership.
    #[error("cannot put {iface} into promiscuous mode")]
    Membership {
        /// The interface.
        iface: String,
        /// `setsockopt`'s error.
        #[source]
        source: io::Error,
    },
}

/// The interface held in promiscuous mode until this is dropped.
#[derive(Debug)]
pub struct PromiscGuard {
    iface: String,
    /// The packet socket holding the membership.
    _socket: OwnedFd,
}

impl PromiscGuard {
    /// Put `iface` into promiscuous mode for as long as the guard lives.
    pub fn take(iface: &str) -> Result<Self, PromiscError> {
        let name = CString::new(iface).map_err(|_| PromiscError::Name(iface.to_owned()))?;
        // SAFETY: `name` is a valid NUL-terminated string for the call.
        let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
        if index == 0 {
            return Err(PromiscError::NoSuchInterface {
                iface: iface.to_owned(),
                source: io::Error::last_os_error(),
            });
        }
        // Protocol 0: the socket is bound to no protocol and receives nothing.
        // SAFETY: plain system call; the result is checked before use.
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(PromiscError::Socket {
                iface: iface.to_owned(),
                source: io::Error::last_os_error(),
            });
        }
        // SAFETY: `fd` is a new descriptor that nothing else owns.
        let socket = unsafe { OwnedFd::from_raw_fd(fd) };
        let mreq = libc::packet_mreq {
            mr_ifindex: index as libc::c_int,
            mr_type: libc::PACKET_MR_PROMISC as libc::c_ushort,
            mr_alen: 0,
            mr_address: [0; 8],
        };
        // SAFETY: `mreq` is a valid `packet_mreq` that outlives the call, and
        // the length passed is its size.
        let rc = unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_ADD_MEMBERSHIP,
                std::ptr::addr_of!(mreq).cast(),
                std::mem::size_of::<libc::packet_mreq>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(PromiscError::Membership {
                iface: iface.to_owned(),
                source: io::Error::last_os_error(),
            });
        }
        tracing::info!(
            iface,
            "interface in promiscuous mode while the uplink runs (frames for the VMs' addresses)"
        );
        Ok(PromiscGuard {
            iface: iface.to_owned(),
            _socket: socket,
        })
    }

    /// The interface.
    pub fn iface(&self) -> &str {
        &self.iface
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_interface_is_a_clear_error() {
        let e = PromiscGuard::take("vadapt-nonesuch0").unwrap_err();
        assert!(matches!(e, PromiscError::NoSuchInterface { .. }), "{e:?}");
        assert!(e.to_string().contains("vadapt-nonesuch0"));
    }

    #[test]
    fn a_name_with_a_nul_is_refused() {
        assert!(matches!(
            PromiscGuard::take("a\0b"),
            Err(PromiscError::Name(_))
        ));
    }
}
