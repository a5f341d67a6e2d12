//! VLANs as OVS spells them (issue 37): which VLAN a frame entering a
//! port is in, which ports a VLAN's frames may leave by, and whether they
//! leave tagged.
//!
//! Every port is an *access* port or a *trunk*:
//! - An access port (`vlan=N`; a VM, echo or sink port without it is an
//!   access port of VLAN 0, the untagged domain) carries one VLAN, untagged
//!   both ways. A frame its peer sends with a VLAN tag (802.1Q, 802.1ad or
//!   the old 0x9100, double tags included) is dropped (`vlan_tagged`): a
//!   guest cannot put itself into another VLAN.
//! - A trunk (`trunks=`, `native_vlan=`; a TAP or an uplink without VLAN
//!   keys is a trunk of every VLAN, as an OVS port without `tag` is)
//!   carries the VLANs it lists (all of 1..=4094 when the list is empty)
//!   tagged with 802.1Q, and its native VLAN (`native_vlan`, 0 when
//!   absent: the untagged domain) untagged. A frame tagged with a VLAN it
//!   does not carry, with VID 4095, or with an outer tag other than 802.1Q
//!   is dropped (`vlan_not_allowed`). A priority tag (VID 0) puts the frame
//!   in the native VLAN.
//!
//! The switch keys its table by (VLAN, MAC) and floods a frame only to the
//! ports of its VLAN. A frame keeps the form it entered in; when it leaves
//! by a port that wants the other form, the switch copies it with the tag
//! pushed or popped ([`Retag`]), moving the checksum and segmentation
//! offsets of a frame with offloads by the tag's four bytes.

pub use crate::config::{Vid, VlanKeys, MAX_VID};
use crate::frames::Offloaded;
use vadapt_wire::ethernet::{ETHERTYPE_OFFSET, ETHERTYPE_QINQ, ETHERTYPE_VLAN};
use vadapt_wire::Offload;

/// The pre-standard QinQ TPID some switches still send.
const ETHERTYPE_QINQ_OLD: u16 = 0x9100;

/// Bytes of one VLAN tag.
pub const TAG_LEN: usize = 4;

/// Whether the two bytes at the EtherType's place of `frame` are a VLAN
/// tag's TPID.
#[inline]
pub fn is_tagged(frame: &[u8]) -> bool {
    matches!(
        tpid(frame),
        Some(ETHERTYPE_VLAN | ETHERTYPE_QINQ | ETHERTYPE_QINQ_OLD)
    )
}

#[inline]
fn tpid(frame: &[u8]) -> Option<u16> {
    frame
        .get(ETHERTYPE_OFFSET..ETHERTYPE_OFFSET + 2)
        .map(|b| u16::from_be_bytes([b[0], b[1]]))
}

/// A set of VLAN ids, one bit each.
#[derive(Clone, PartialEq, Eq)]
pub struct VidSet(Box<[u64; 64]>);

impl VidSet {
    /// No VLAN.
    pub fn empty() -> Self {
        VidSet(Box::new([0; 64]))
    }

    /// Every VLAN, 1..=[`MAX_VID`].
    pub fn all() -> Self {
        (1..=MAX_VID).collect()
    }

    /// Add `vid`.
    pub fn insert(&mut self, vid: Vid) {
        let v = usize::from(vid & 0xfff);
        self.0[v / 64] |= 1 << (v % 64);
    }

    /// Whether `vid` is in.
    #[inline]
    pub fn contains(&self, vid: Vid) -> bool {
        let v = usize::from(vid & 0xfff);
        self.0[v / 64] & (1 << (v % 64)) != 0
    }

    /// Every VLAN in, ascending.
    pub fn iter(&self) -> impl Iterator<Item = Vid> + '_ {
        (0..=0xfff).filter(|&v| self.contains(v))
    }
}

impl FromIterator<Vid> for VidSet {
    fn from_iter<I: IntoIterator<Item = Vid>>(it: I) -> Self {
        let mut s = VidSet::empty();
        for v in it {
            s.insert(v);
        }
        s
    }
}

impl std::fmt::Debug for VidSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.iter().count();
        if n == usize::from(MAX_VID) {
            return f.write_str("VidSet(all)");
        }
        f.debug_set().entries(self.iter()).finish()
    }
}

/// A port's VLAN mode (see the module documentation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PortVlan {
    /// One VLAN, untagged both ways (0: the untagged domain).
    Access(Vid),
    /// The VLANs in `allowed` tagged, `native` untagged.
    Trunk {
        /// The tagged VLANs.
        allowed: VidSet,
        /// The untagged one (0: the untagged domain).
        native: Vid,
    },
}

impl Default for PortVlan {
    /// An access port of the untagged domain.
    fn default() -> Self {
        PortVlan::Access(0)
    }
}

/// Why a frame entering a port was dropped for its tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VlanRefusal {
    /// A tagged frame on an access port (`vlan_tagged`).
    Tagged,
    /// A tag the trunk does not carry (`vlan_not_allowed`).
    NotAllowed,
}

impl VlanRefusal {
    /// Its place in [`Forwarded::vlan`](super::Forwarded::vlan).
    pub fn index(self) -> usize {
        self as usize
    }
}

/// The VLAN a frame entered in, and whether it carries a tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entered {
    /// Its VLAN.
    pub vid: Vid,
    /// Whether its first tag is still on it (a trunk's tagged frame).
    pub tagged: bool,
}

/// What leaving by one port does to a frame's tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retag {
    /// Nothing: it leaves in the form it entered.
    Keep,
    /// Push an 802.1Q tag with this VID.
    Push(Vid),
    /// Pop its first tag.
    Pop,
}

impl PortVlan {
    /// The mode `keys` give a port whose default is an access port of the
    /// untagged domain (VM, echo, sink).
    pub fn access_port(keys: &VlanKeys<'_>) -> Self {
        PortVlan::Access(keys.vlan.unwrap_or(0))
    }

    /// The mode `keys` give a port whose default is a trunk of every VLAN
    /// (TAP, uplink), as an OVS port without `tag`.
    pub fn trunk_port(keys: &VlanKeys<'_>) -> Self {
        if let Some(v) = keys.vlan {
            return PortVlan::Access(v);
        }
        PortVlan::Trunk {
            allowed: if keys.trunks.is_empty() {
                VidSet::all()
            } else {
                keys.trunks.iter().copied().collect()
            },
            native: keys.native_vlan.unwrap_or(0),
        }
    }

    /// A trunk of every VLAN with the untagged domain native: a TAP's or an
    /// uplink's mode without VLAN keys.
    pub fn trunk_all() -> Self {
        PortVlan::Trunk {
            allowed: VidSet::all(),
            native: 0,
        }
    }

    /// The VLAN of the port's own addresses (a VM port's `mac=`, a sink's
    /// or an echo's): its access VLAN, a trunk's native one.
    pub fn home(&self) -> Vid {
        match self {
            PortVlan::Access(v) => *v,
            PortVlan::Trunk { native, .. } => *native,
        }
    }

    /// The VLAN `frame`, entering by this port, is in.
    #[inline]
    pub fn classify(&self, frame: &[u8]) -> Result<Entered, VlanRefusal> {
        match self {
            PortVlan::Access(v) => {
                if is_tagged(frame) {
                    return Err(VlanRefusal::Tagged);
                }
                Ok(Entered {
                    vid: *v,
                    tagged: false,
                })
            }
            PortVlan::Trunk { allowed, native } => match tpid(frame) {
                Some(ETHERTYPE_VLAN) => {
                    let Some(tci) = frame.get(14..16) else {
                        return Err(VlanRefusal::NotAllowed);
                    };
                    let vid = u16::from_be_bytes([tci[0], tci[1]]) & 0xfff;
                    match vid {
                        0 => Ok(Entered {
                            vid: *native,
                            tagged: true,
                        }),
                        v if v <= MAX_VID && (v == *native || allowed.contains(v)) => Ok(Entered {
                            vid: v,
                            tagged: true,
                        }),
                        _ => Err(VlanRefusal::NotAllowed),
                    }
                }
                Some(ETHERTYPE_QINQ | ETHERTYPE_QINQ_OLD) => Err(VlanRefusal::NotAllowed),
                _ => Ok(Entered {
                    vid: *native,
                    tagged: false,
                }),
            },
        }
    }

    /// Whether a frame of VLAN `vid` may leave by this port, and how:
    /// `None` if the port does not carry `vid`.
    #[inline]
    pub fn leave(&self, vid: Vid, tagged: bool) -> Option<Retag> {
        let wants_tag = match self {
            PortVlan::Access(v) if *v == vid => false,
            PortVlan::Access(_) => return None,
            PortVlan::Trunk { native, .. } if *native == vid => false,
            PortVlan::Trunk { allowed, .. } if vid != 0 && allowed.contains(vid) => true,
            PortVlan::Trunk { .. } => return None,
        };
        Some(match (tagged, wants_tag) {
            (false, false) => Retag::Keep,
            (false, true) => Retag::Push(vid),
            (true, false) => Retag::Pop,
            // Tagged with `vid` on entry (a priority tag is the native
            // VLAN's, which leaves untagged): the same tag.
            (true, true) => Retag::Keep,
        })
    }
}

impl Retag {
    /// The frame's length after it.
    pub fn len(self, len: usize) -> usize {
        match self {
            Retag::Keep => len,
            Retag::Push(_) => len + TAG_LEN,
            Retag::Pop => len.saturating_sub(TAG_LEN),
        }
    }

    /// Write `from` as it leaves into `to` (of [`Retag::len`] bytes).
    pub fn edit(self, from: &[u8], to: &mut [u8]) {
        match self {
            Retag::Keep => to.copy_from_slice(from),
            Retag::Push(vid) => {
                to[..ETHERTYPE_OFFSET].copy_from_slice(&from[..ETHERTYPE_OFFSET]);
                to[12..14].copy_from_slice(&ETHERTYPE_VLAN.to_be_bytes());
                to[14..16].copy_from_slice(&vid.to_be_bytes());
                to[16..].copy_from_slice(&from[ETHERTYPE_OFFSET..]);
            }
            Retag::Pop => {
                to[..ETHERTYPE_OFFSET].copy_from_slice(&from[..ETHERTYPE_OFFSET]);
                to[ETHERTYPE_OFFSET..].copy_from_slice(&from[ETHERTYPE_OFFSET + TAG_LEN..]);
            }
        }
    }

    /// `o` moved by the tag: `None` when an offset would fall inside the
    /// Ethernet header once the tag is gone (the frame is dropped).
    pub fn reoffload(self, mut o: Offloaded) -> Option<Offloaded> {
        let shift = |at: u16| -> Option<u16> {
            match self {
                Retag::Keep => Some(at),
                Retag::Push(_) => at.checked_add(TAG_LEN as u16),
                Retag::Pop => at
                    .checked_sub(TAG_LEN as u16)
                    .filter(|&a| usize::from(a) >= vadapt_wire::ethernet::ETH_HDR_LEN),
            }
        };
        let shift_at = |c: vadapt_wire::ChecksumAt| -> Option<vadapt_wire::ChecksumAt> {
            Some(vadapt_wire::ChecksumAt {
                start: shift(c.start)?,
                offset: c.offset,
            })
        };
        o.offload = match o.offload {
            Offload::None => Offload::None,
            Offload::Checksum(c) => Offload::Checksum(shift_at(c)?),
            Offload::Tcp(g, Some(c)) => Offload::Tcp(g, Some(shift_at(c)?)),
            Offload::Tcp(g, None) => Offload::Tcp(g, None),
        };
        if o.hdr.csum_start != 0 || o.hdr.csum_offset != 0 {
            o.hdr.csum_start = shift(o.hdr.csum_start)?;
        }
        if o.hdr.hdr_len != 0 {
            o.hdr.hdr_len = shift(o.hdr.hdr_len)?;
        }
        let per = TAG_LEN as u32 * o.cut_frames;
        o.cut_bytes = match self {
            Retag::Keep => o.cut_bytes,
            Retag::Push(_) => o.cut_bytes.saturating_add(per),
            Retag::Pop => o.cut_bytes.saturating_sub(per),
        };
        Some(o)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(tags: &[(u16, u16)]) -> Vec<u8> {
        let mut f = vec![0xff; 6];
        f.extend_from_slice(&[2, 0, 0, 0, 0, 1]);
        for &(tpid, tci) in tags {
            f.extend_from_slice(&tpid.to_be_bytes());
            f.extend_from_slice(&tci.to_be_bytes());
        }
        f.extend_from_slice(&0x0800u16.to_be_bytes());
        f.resize(f.len() + 46, 0xab);
        f
    }

    fn trunk(allowed: &[Vid], native: Vid) -> PortVlan {
        PortVlan::Trunk {
            allowed: allowed.iter().copied().collect(),
            native,
        }
    }

    #[test]
    fn an_access_port_refuses_every_tag_and_puts_the_rest_in_its_vlan() {
        let p = PortVlan::Access(10);
        let untagged = Entered {
            vid: 10,
            tagged: false,
        };
        assert_eq!(p.classify(&frame(&[])), Ok(untagged));
        for tags in [
            &[(0x8100, 20)][..],
            &[(0x8100, 0)],
            &[(0x88a8, 20), (0x8100, 30)],
            &[(0x8100, 10), (0x8100, 20)],
            &[(0x9100, 5)],
        ] {
            assert_eq!(
                p.classify(&frame(tags)),
                Err(VlanRefusal::Tagged),
                "{tags:?}"
            );
        }
        assert_eq!(PortVlan::default().classify(&frame(&[])).unwrap().vid, 0);
        assert_eq!(p.classify(&[0; 5]), Ok(untagged), "runts are the switch's");
    }

    #[test]
    fn a_trunk_takes_the_tags_it_carries_and_its_native_vlan_untagged() {
        let p = trunk(&[10, 20], 30);
        let e = |vid, tagged| Ok(Entered { vid, tagged });
        assert_eq!(p.classify(&frame(&[(0x8100, 10)])), e(10, true));
        assert_eq!(
            p.classify(&frame(&[(0x8100, 0x2000 | 20)])),
            e(20, true),
            "PCP ignored"
        );
        assert_eq!(
            p.classify(&frame(&[(0x8100, 30)])),
            e(30, true),
            "native, tagged"
        );
        assert_eq!(
            p.classify(&frame(&[(0x8100, 0)])),
            e(30, true),
            "priority tag"
        );
        assert_eq!(p.classify(&frame(&[])), e(30, false));
        for tags in [
            &[(0x8100, 11)][..],
            &[(0x8100, 4095)],
            &[(0x88a8, 10), (0x8100, 10)],
            &[(0x9100, 10)],
        ] {
            assert_eq!(
                p.classify(&frame(tags)),
                Err(VlanRefusal::NotAllowed),
                "{tags:?}"
            );
        }
        let mut short = frame(&[(0x8100, 10)]);
        short.truncate(15);
        assert_eq!(p.classify(&short), Err(VlanRefusal::NotAllowed));
        let all = PortVlan::trunk_all();
        assert_eq!(all.classify(&frame(&[(0x8100, 4094)])), e(4094, true));
        assert_eq!(all.classify(&frame(&[])), e(0, false));
    }

    #[test]
    fn a_frame_leaves_only_by_the_ports_of_its_vlan_in_the_form_they_want() {
        let a = PortVlan::Access(10);
        assert_eq!(a.leave(10, false), Some(Retag::Keep));
        assert_eq!(a.leave(10, true), Some(Retag::Pop));
        assert_eq!(a.leave(11, false), None);
        assert_eq!(a.leave(0, false), None);
        let t = trunk(&[10], 20);
        assert_eq!(t.leave(10, false), Some(Retag::Push(10)));
        assert_eq!(t.leave(10, true), Some(Retag::Keep));
        assert_eq!(t.leave(20, false), Some(Retag::Keep));
        assert_eq!(t.leave(20, true), Some(Retag::Pop));
        assert_eq!(t.leave(11, false), None);
        assert_eq!(
            t.leave(0, false),
            None,
            "the untagged domain is not native here"
        );
        assert_eq!(PortVlan::trunk_all().leave(0, false), Some(Retag::Keep));
        assert_eq!(PortVlan::default().leave(0, false), Some(Retag::Keep));
    }

    #[test]
    fn push_then_pop_gives_the_frame_back() {
        let f = frame(&[]);
        let pushed_len = Retag::Push(0x123).len(f.len());
        let mut pushed = vec![0; pushed_len];
        Retag::Push(0x123).edit(&f, &mut pushed);
        assert_eq!(pushed, frame(&[(0x8100, 0x123)]));
        let mut popped = vec![0; Retag::Pop.len(pushed.len())];
        Retag::Pop.edit(&pushed, &mut popped);
        assert_eq!(popped, f);
    }

    #[test]
    fn offsets_move_with_the_tag_and_never_into_the_header() {
        let at = |start| vadapt_wire::ChecksumAt { start, offset: 16 };
        let mut o = Offloaded::plain(100);
        o.offload = Offload::Checksum(at(34));
        o.hdr.csum_start = 34;
        o.hdr.csum_offset = 16;
        o.hdr.hdr_len = 54;
        let pushed = Retag::Push(5).reoffload(o).unwrap();
        assert_eq!(pushed.offload, Offload::Checksum(at(38)));
        assert_eq!((pushed.hdr.csum_start, pushed.hdr.hdr_len), (38, 58));
        assert_eq!(pushed.cut_bytes, 104);
        assert_eq!(Retag::Pop.reoffload(pushed), Some(o));
        o.offload = Offload::Checksum(at(16));
        assert_eq!(
            Retag::Pop.reoffload(o),
            None,
            "would start inside the header"
        );
        assert_eq!(Retag::Keep.reoffload(o), Some(o));
    }

    #[test]
    fn keys_make_access_ports_and_trunks() {
        let k = |vlan, trunks: &'static [Vid], native_vlan| VlanKeys {
            vlan,
            trunks,
            native_vlan,
        };
        assert_eq!(
            PortVlan::access_port(&k(None, &[], None)),
            PortVlan::Access(0)
        );
        assert_eq!(
            PortVlan::access_port(&k(Some(7), &[], None)),
            PortVlan::Access(7)
        );
        assert_eq!(
            PortVlan::trunk_port(&k(Some(7), &[], None)),
            PortVlan::Access(7)
        );
        assert_eq!(
            PortVlan::trunk_port(&k(None, &[], None)),
            PortVlan::trunk_all()
        );
        let t = PortVlan::trunk_port(&k(None, &[10, 20], Some(30)));
        assert_eq!(t.home(), 30);
        assert_eq!(t.leave(10, false), Some(Retag::Push(10)));
        assert_eq!(t.leave(11, false), None);
    }

    #[test]
    fn vid_sets_hold_what_was_put_in() {
        let s: VidSet = [1, 64, 4094].into_iter().collect();
        assert!(s.contains(1) && s.contains(64) && s.contains(4094) && !s.contains(2));
        assert_eq!(s.iter().collect::<Vec<_>>(), [1, 64, 4094]);
        assert_eq!(VidSet::all().iter().count(), 4094);
        assert!(!VidSet::all().contains(0) && !VidSet::all().contains(4095));
        assert_eq!(format!("{:?}", VidSet::all()), "VidSet(all)");
    }
}
