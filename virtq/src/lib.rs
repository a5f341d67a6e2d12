//! vadapt virtq (to be written).
