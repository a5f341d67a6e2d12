//! The virtio-net header (`struct virtio_net_hdr`, virtio 1.2 §5.1.6) as a
//! guest wrote it, and its check against the frame behind it.
//!
//! Every field is guest-controlled. [`VnetHdr::check`] turns the raw fields
//! into an [`Offload`] only if each offset it names lies inside the frame
//! and the segmentation it asks for is bounded; the offload code then
//! indexes the frame with checked values only.
//!
//! With `VIRTIO_F_VERSION_1` or `VIRTIO_NET_F_MRG_RXBUF` the header is
//! [`HDR_LEN_MRG`] bytes, the ten of [`VnetHdr`] followed by `num_buffers`
//! ([`num_buffers`]); a legacy device without either uses the ten alone.

/// Length of `struct virtio_net_hdr_mrg_rxbuf` (with `num_buffers`), used when
/// VERSION_1 or MRG_RXBUF is negotiated, bytes.
pub const HDR_LEN_MRG: usize = 12;
/// Length of the legacy `struct virtio_net_hdr` without `num_buffers`, bytes.
pub const HDR_LEN_LEGACY: usize = VnetHdr::LEN;
/// Offset of `num_buffers` (little-endian u16) in the header, bytes.
pub const HDR_NUM_BUFFERS_OFFSET: usize = VnetHdr::LEN;

/// `num_buffers` of a received [`HDR_LEN_MRG`]-byte header: how many receive
/// buffers the packet spans (1 when `VIRTIO_NET_F_MRG_RXBUF` is off; a
/// device may leave it 0, read as 1). `None` if `hdr` is shorter.
pub fn num_buffers(hdr: &[u8]) -> Option<u16> {
    let b = hdr.get(HDR_NUM_BUFFERS_OFFSET..HDR_NUM_BUFFERS_OFFSET + 2)?;
    Some(u16::from_le_bytes([b[0], b[1]]).max(1))
}

/// `VIRTIO_NET_HDR_F_NEEDS_CSUM`: the checksum at `csum_start + csum_offset`
/// is partial and must be completed.
pub const F_NEEDS_CSUM: u8 = 1;
/// `VIRTIO_NET_HDR_F_DATA_VALID`: (device to driver) the checksum was checked.
pub const F_DATA_VALID: u8 = 2;
/// `VIRTIO_NET_HDR_F_RSC_INFO`: (device to driver) coalescing information.
pub const F_RSC_INFO: u8 = 4;

/// `VIRTIO_NET_HDR_GSO_NONE`.
pub const GSO_NONE: u8 = 0;
/// `VIRTIO_NET_HDR_GSO_TCPV4`.
pub const GSO_TCPV4: u8 = 1;
/// `VIRTIO_NET_HDR_GSO_UDP` (UFO, deprecated; never offered).
pub const GSO_UDP: u8 = 3;
/// `VIRTIO_NET_HDR_GSO_TCPV6`.
pub const GSO_TCPV6: u8 = 4;
/// `VIRTIO_NET_HDR_GSO_UDP_L4` (USO; not offered yet).
pub const GSO_UDP_L4: u8 = 5;
/// `VIRTIO_NET_HDR_GSO_ECN`: ORed into `gso_type`, the segment has CWR set.
pub const GSO_ECN: u8 = 0x80;

/// Most segments one GSO frame may be cut into (issue #15: beyond it the
/// frame is dropped). With an MSS of 1 a 64 KiB frame would need more.
pub const MAX_SEGMENTS: usize = 65_535;

/// The ten bytes of `struct virtio_net_hdr`, little-endian as VERSION_1
/// requires (and as legacy x86 guests write them), without `num_buffers`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VnetHdr {
    /// `VIRTIO_NET_HDR_F_*` bits.
    pub flags: u8,
    /// `VIRTIO_NET_HDR_GSO_*`, possibly with [`GSO_ECN`].
    pub gso_type: u8,
    /// Length of the headers in front of the payload, bytes (a hint: Linux
    /// does not trust it either).
    pub hdr_len: u16,
    /// Payload bytes per segment (the MSS for TCP).
    pub gso_size: u16,
    /// Offset from the frame's start where checksumming starts, bytes.
    pub csum_start: u16,
    /// Offset from `csum_start` of the 16-bit checksum field, bytes.
    pub csum_offset: u16,
}

/// Where a partial checksum is: checked to lie inside its frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChecksumAt {
    /// Offset of the first byte covered, bytes from the frame's start.
    pub start: u16,
    /// Offset of the checksum field from `start`, bytes.
    pub offset: u16,
}

/// A TCP segmentation request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpGso {
    /// IPv6 (`GSO_TCPV6`) rather than IPv4 (`GSO_TCPV4`).
    pub ipv6: bool,
    /// [`GSO_ECN`] was set: the segment carries CWR, which only the first
    /// segment keeps (as Linux does whether or not the bit is set).
    pub ecn: bool,
    /// Most payload bytes per segment, > 0.
    pub mss: u16,
}

/// What a checked header asks of whoever takes the frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Offload {
    /// Nothing: the frame is complete as it is.
    None,
    /// A partial checksum to complete, no segmentation.
    Checksum(ChecksumAt),
    /// A TCP segment to cut into MSS-sized frames (with its checksum, if the
    /// guest left one partial, at the given place).
    Tcp(TcpGso, Option<ChecksumAt>),
}

/// Why a header was refused (the frame is dropped as `bad_vnet_hdr`).
#[derive(Debug, thiserror::Error, Clone, Copy, PartialEq, Eq)]
pub enum VnetHdrError {
    /// `gso_type` is none of the types vadapt knows.
    #[error("unknown gso_type {0:#x}")]
    UnknownGsoType(u8),
    /// `gso_type` is known but not offered (UFO, USO).
    #[error("gso_type {0:#x} is not offered")]
    GsoTypeNotOffered(u8),
    /// A GSO frame with `gso_size` 0.
    #[error("GSO frame with gso_size 0")]
    ZeroGsoSize,
    /// `hdr_len` beyond the frame.
    #[error("hdr_len {hdr_len} beyond the {frame_len}-byte frame")]
    HdrLenBeyondFrame {
        /// The header's `hdr_len`.
        hdr_len: u16,
        /// The frame's length, bytes.
        frame_len: usize,
    },
    /// The checksum field (`csum_start + csum_offset`, two bytes) beyond
    /// the frame.
    #[error("checksum field at {csum_start}+{csum_offset} beyond the {frame_len}-byte frame")]
    ChecksumBeyondFrame {
        /// The header's `csum_start`.
        csum_start: u16,
        /// The header's `csum_offset`.
        csum_offset: u16,
        /// The frame's length, bytes.
        frame_len: usize,
    },
    /// Segmentation would make more than [`MAX_SEGMENTS`] frames.
    #[error("{segments} segments (at most {MAX_SEGMENTS})")]
    TooManySegments {
        /// Segments the frame would be cut into.
        segments: usize,
    },
}

impl VnetHdr {
    /// Bytes of the header without `num_buffers`.
    pub const LEN: usize = 10;

    /// Reads the first [`Self::LEN`] bytes of `bytes`; `None` if shorter.
    pub fn read(bytes: &[u8]) -> Option<Self> {
        let b: &[u8; Self::LEN] = bytes.get(..Self::LEN)?.try_into().ok()?;
        let le = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        Some(VnetHdr {
            flags: b[0],
            gso_type: b[1],
            hdr_len: le(2),
            gso_size: le(4),
            csum_start: le(6),
            csum_offset: le(8),
        })
    }

    /// The header's [`Self::LEN`] bytes.
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0] = self.flags;
        b[1] = self.gso_type;
        b[2..4].copy_from_slice(&self.hdr_len.to_le_bytes());
        b[4..6].copy_from_slice(&self.gso_size.to_le_bytes());
        b[6..8].copy_from_slice(&self.csum_start.to_le_bytes());
        b[8..10].copy_from_slice(&self.csum_offset.to_le_bytes());
        b
    }

    /// True when the header asks for nothing (no partial checksum, no GSO):
    /// the fast path, one comparison.
    pub fn is_plain(&self) -> bool {
        self.flags & F_NEEDS_CSUM == 0 && self.gso_type == GSO_NONE
    }

    /// Checks the header against the `frame_len` bytes of frame behind it
    /// and says what it asks for. Flags the driver must not send
    /// (`DATA_VALID`, `RSC_INFO`) are ignored, as Linux's tun does.
    ///
    /// Refuses: an unknown or unoffered `gso_type`, `gso_size` 0 with GSO,
    /// `hdr_len` beyond the frame, a partial checksum's field beyond the
    /// frame, more than [`MAX_SEGMENTS`] segments. Whether the frame really
    /// is TCP over IP is for [`crate::TcpSegmenter::new`] to find out.
    pub fn check(&self, frame_len: usize) -> Result<Offload, VnetHdrError> {
        let csum = if self.flags & F_NEEDS_CSUM != 0 {
            let field = usize::from(self.csum_start) + usize::from(self.csum_offset);
            if field + 2 > frame_len {
                return Err(VnetHdrError::ChecksumBeyondFrame {
                    csum_start: self.csum_start,
                    csum_offset: self.csum_offset,
                    frame_len,
                });
            }
            Some(ChecksumAt {
                start: self.csum_start,
                offset: self.csum_offset,
            })
        } else {
            None
        };
        if usize::from(self.hdr_len) > frame_len {
            return Err(VnetHdrError::HdrLenBeyondFrame {
                hdr_len: self.hdr_len,
                frame_len,
            });
        }
        let ipv6 = match self.gso_type & !GSO_ECN {
            GSO_NONE if self.gso_type & GSO_ECN == 0 => {
                return Ok(csum.map_or(Offload::None, Offload::Checksum));
            }
            GSO_TCPV4 => false,
            GSO_TCPV6 => true,
            GSO_UDP | GSO_UDP_L4 => return Err(VnetHdrError::GsoTypeNotOffered(self.gso_type)),
            _ => return Err(VnetHdrError::UnknownGsoType(self.gso_type)),
        };
        if self.gso_size == 0 {
            return Err(VnetHdrError::ZeroGsoSize);
        }
        let payload = frame_len - usize::from(self.hdr_len);
        let segments = payload.div_ceil(usize::from(self.gso_size));
        if segments > MAX_SEGMENTS {
            return Err(VnetHdrError::TooManySegments { segments });
        }
        Ok(Offload::Tcp(
            TcpGso {
                ipv6,
                ecn: self.gso_type & GSO_ECN != 0,
                mss: self.gso_size,
            },
            csum,
        ))
    }
}
