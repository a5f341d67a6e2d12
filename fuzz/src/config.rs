//! The daemon's configuration parsers: the TOML file
//! (`DaemonConfig::from_toml`, which validates), the `--vm` and
//! `--sink`/`--echo` specs, and the policy and retune names of the command
//! line. The first byte of an input picks the parser, the rest (UTF-8) is
//! its text.
//!
//! Checked beyond "no panic": a config that parses survives a round trip
//! through TOML unchanged (so validation accepts nothing the serializer
//! cannot write back, e.g. a NaN); a `--vm` spec that parses has a queue
//! count in range and validates in a config of its own without panicking;
//! a policy name gives a policy whose default parameters are valid.

use std::path::Path;
use std::str::FromStr;
use vadapt_dataplane::config::{parse_local_spec, parse_vm_spec, DaemonConfig, MAX_QUEUE_PAIRS};
use vadapt_policy::{PolicyConfig, Retune};

/// Parse `data` with the parser its first byte picks.
pub fn run(data: &[u8]) {
    let Some((mode, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    match mode % 5 {
        0 => toml(text),
        1 => {
            if let Ok(vm) = parse_vm_spec(text) {
                assert!((1..=MAX_QUEUE_PAIRS).contains(&vm.queues), "{vm:?}");
                let cfg = DaemonConfig {
                    vm: vec![vm],
                    ..DaemonConfig::default()
                };
                let _ = cfg.validate();
            }
        }
        2 => {
            let flag = if mode & 8 == 0 { "--sink" } else { "--echo" };
            if let Ok(p) = parse_local_spec(flag, text) {
                assert!(!p.name.is_empty(), "{p:?}");
            }
        }
        3 => {
            if let Ok(p) = PolicyConfig::from_str(text) {
                p.validate().expect("a policy's defaults are valid");
                assert_eq!(p.kind().as_str().parse().ok(), Some(p.kind()));
            }
        }
        _ => {
            let _ = Retune::from_str(text);
        }
    }
}

fn toml(text: &str) {
    let path = Path::new("fuzz.toml");
    let Ok(cfg) = DaemonConfig::from_toml(text, path) else {
        return;
    };
    let again = toml::to_string(&cfg).expect("a valid config serializes");
    match DaemonConfig::from_toml(&again, path) {
        Ok(back) => assert_eq!(back, cfg, "round trip through:\n{again}"),
        Err(e) => panic!("a valid config written back is refused: {e}\n{again}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The seeds reach past the parsers: each parses.
    #[test]
    fn seeds_parse() {
        let text = |b: &'static [u8]| std::str::from_utf8(&b[1..]).unwrap();
        let full = text(include_bytes!("../seeds/config/full.toml"));
        let cfg = DaemonConfig::from_toml(full, Path::new("full.toml")).unwrap();
        assert_eq!((cfg.vm.len(), cfg.tap.len()), (2, 1));
        parse_vm_spec(text(include_bytes!("../seeds/config/vm-spec"))).unwrap();
        parse_local_spec("--sink", text(include_bytes!("../seeds/config/local-spec"))).unwrap();
        PolicyConfig::from_str(text(include_bytes!("../seeds/config/policy"))).unwrap();
        Retune::from_str(text(include_bytes!("../seeds/config/retune"))).unwrap();
        for seed in [
            &include_bytes!("../seeds/config/full.toml")[..],
            include_bytes!("../seeds/config/vm-spec"),
            include_bytes!("../seeds/config/local-spec"),
            include_bytes!("../seeds/config/policy"),
            include_bytes!("../seeds/config/retune"),
        ] {
            run(seed);
        }
    }
}
