//! vadapt sim (to be written).
