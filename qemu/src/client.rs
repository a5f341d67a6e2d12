//! The core manager's clients of QEMU's control sockets: QMP ([`qmp`]) and
//! the guest agent ([`qga`]). Both read through the one bounded
//! [`JsonLines`](crate::json_lines::JsonLines) reader, and both carry the
//! peer's text in their errors as [`PeerText`](crate::peer_text::PeerText).

pub mod qga;
pub mod qmp;
