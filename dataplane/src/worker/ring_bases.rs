//! Where a worker left each guest ring ([`RingBases`]): what
//! `GET_VRING_BASE` answers once the worker has stopped.

/// One ring's position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingBase {
    /// The ring's vhost-user index (`2 × pair` receive, `2 × pair + 1`
    /// transmit).
    pub ring: usize,
    /// The next available index the device would have taken.
    pub next_avail: u16,
}

/// The positions of the rings a stopped worker served (none for queues
/// without guest rings, such as a NIC queue).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RingBases(Vec<RingBase>);

impl RingBases {
    /// Records ring `ring` stopped before `next_avail`.
    pub fn push(&mut self, ring: usize, next_avail: u16) {
        self.0.push(RingBase { ring, next_avail });
    }

    /// The rings, in the order they were recorded.
    pub fn iter(&self) -> impl Iterator<Item = &RingBase> {
        self.0.iter()
    }

    /// Whether no ring was recorded.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl IntoIterator for RingBases {
    type Item = RingBase;
    type IntoIter = std::vec::IntoIter<RingBase>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}
