//! What kind of port a port's counters belong to.

use serde::{Deserialize, Serialize};

/// The kind of a port, as `vadapt stats` prints it and its JSON writes it
/// (`vm`, `sink`, `echo`, `tap`, `uplink`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PortKind {
    /// A VM port, served to its frontend over vhost-user.
    #[default]
    Vm,
    /// A sink.
    Sink,
    /// An echo port.
    Echo,
    /// A TAP port.
    Tap,
    /// An uplink port.
    Uplink,
}

impl PortKind {
    /// `vm`, `sink`, `echo`, `tap` or `uplink`.
    pub fn as_str(self) -> &'static str {
        match self {
            PortKind::Vm => "vm",
            PortKind::Sink => "sink",
            PortKind::Echo => "echo",
            PortKind::Tap => "tap",
            PortKind::Uplink => "uplink",
        }
    }
}

impl std::fmt::Display for PortKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `pad`, so that a table's width and alignment apply.
        f.pad(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_json_and_the_printed_form_are_the_names() {
        for k in [
            PortKind::Vm,
            PortKind::Sink,
            PortKind::Echo,
            PortKind::Tap,
            PortKind::Uplink,
        ] {
            let json = serde_json::to_string(&k).unwrap();
            assert_eq!(json, format!("\"{}\"", k.as_str()));
            assert_eq!(serde_json::from_str::<PortKind>(&json).unwrap(), k);
            assert_eq!(k.to_string(), k.as_str());
        }
        assert_eq!(format!("{:<5}|", PortKind::Tap), "tap  |");
    }
}
