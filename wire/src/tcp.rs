//! TCP header facts that both building segments (`tcp_build`) and cutting
//! them ([`crate::tcp_cut`]) use: the protocol number, the flag bits, and
//! where the checksum field is.

/// IP protocol number of TCP.
pub const IPPROTO_TCP: u8 = 6;

/// FIN: the sender's last segment.
pub const TCP_FIN: u8 = 0x01;
/// PSH: push the data to the application.
pub const TCP_PSH: u8 = 0x08;
/// ACK: the acknowledgment number is valid.
pub const TCP_ACK: u8 = 0x10;
/// CWR: congestion window reduced (ECN).
pub const TCP_CWR: u8 = 0x80;

/// Offset of the flags byte in the TCP header, bytes.
pub const TCP_FLAGS_OFFSET: usize = 13;
/// Offset of the checksum field in the TCP header (`csum_offset`), bytes.
pub const TCP_CSUM_OFFSET: usize = 16;
