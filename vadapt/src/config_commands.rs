//! `vadapt config check FILE` and `vadapt config show`: the config file
//! checked, and the effective configuration printed, without a daemon.

use crate::cli::ConfigCommand;
use crate::exit::{chain, fail};
use crate::serve::build_config;
use std::process::ExitCode;
use vadapt_dataplane::config::DaemonConfig;

/// `vadapt config ...`.
pub fn run(c: ConfigCommand) -> ExitCode {
    match c {
        ConfigCommand::Check { file } => match DaemonConfig::from_file(&file) {
            Ok(cfg) => {
                println!("{}: valid, {} ports", file.display(), cfg.ports().len());
                ExitCode::SUCCESS
            }
            Err(e) => fail(chain(&e)),
        },
        ConfigCommand::Show(args) => match build_config(&args) {
            Ok(cfg) => match effective(&cfg) {
                Ok(text) => {
                    print!("{text}");
                    ExitCode::SUCCESS
                }
                Err(e) => fail(format!(
                    "cannot write the configuration as TOML: {}",
                    chain(&e)
                )),
            },
            Err(e) => fail(chain(&e)),
        },
    }
}

/// `cfg` as a config file that says every key it sets, defaults included.
pub fn effective(cfg: &DaemonConfig) -> Result<String, toml::ser::Error> {
    toml::to_string(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_effective_configuration_reads_back_as_itself_with_every_default() {
        let text = "backlog = 512\n[[vm]]\nname = \"vm1\"\nsocket = \"/run/vadapt/vm1.sock\"\n\
                    [vm.limits]\nstorm_control_pps = 200\n[[uplink]]\nname = \"up0\"\niface = \"eth1\"\n\
                    [cores]\nmargin = 1.2\n";
        let cfg = DaemonConfig::from_toml(text, "t.toml".as_ref()).unwrap();
        let shown = effective(&cfg).unwrap();
        for default in [
            "mac_ageing_s = 300",
            "margin = 1.2",
            "period_ms = 100",
            "kind = \"netap\"",
            "backlog = 512",
        ] {
            assert!(shown.contains(default), "no `{default}` in\n{shown}");
        }
        let again = DaemonConfig::from_toml(&shown, "shown.toml".as_ref()).unwrap();
        assert_eq!(again, cfg, "{shown}");
    }
}
