//! vadapt dataplane (to be written).
