//! vadapt coremgr (to be written).
