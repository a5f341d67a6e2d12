//! Golden-section maximiser (to be written).
