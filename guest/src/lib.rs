//! vadapt guest (to be written).
