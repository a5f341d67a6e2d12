//! Scenarios: what host, which VMs with which load, which policy when.
//!
//! A scenario is a TOML file (every table `deny_unknown_fields`); see the
//! bundled ones in `sim/scenarios/`. Parsing keeps toml's byte spans so that
//! every error names the key and the line it is on.

//! [`model`] is what a scenario is; [`parse`] reads and checks one.

pub mod model;
pub mod parse;

pub use model::*;
