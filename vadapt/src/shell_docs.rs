//! `vadapt completions SHELL` and `vadapt man`: shell completions and man
//! pages generated from the clap definitions in `cli.rs`, and
//! `vadapt.toml(5)` from the config types (`toml_manual.rs`), so they never
//! drift from what they describe. The Debian package ships their output
//! (`packaging/`).

use crate::cli::{Cli, CompletionsArgs, ManArgs};
use crate::exit::fail;
use clap::CommandFactory;
use std::io::Write;
use std::process::ExitCode;

/// The name the completions and pages are written for.
const BIN: &str = "vadapt";

/// `vadapt completions SHELL`: the completion script on stdout.
pub fn completions(a: CompletionsArgs) -> ExitCode {
    let mut cmd = Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(a.shell, &mut cmd, BIN, &mut out);
    write_stdout(&out)
}

/// `vadapt man`: the top-level page `vadapt(1)` on stdout, or with `--out DIR`
/// one page per command into DIR (`vadapt.1`, `vadapt-serve.1`, ...) and
/// `vadapt.toml.5`.
pub fn man(a: ManArgs) -> ExitCode {
    let cmd = Cli::command();
    match a.out {
        Some(dir) => {
            if let Err(e) = std::fs::create_dir_all(&dir) {
                return fail(format!("cannot create {}: {e}", dir.display()));
            }
            let toml_page = crate::toml_manual::render(env!("CARGO_PKG_VERSION"));
            match clap_mangen::generate_to(cmd, &dir)
                .and_then(|()| std::fs::write(dir.join("vadapt.toml.5"), toml_page))
            {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => fail(format!(
                    "cannot write man pages into {}: {e}",
                    dir.display()
                )),
            }
        }
        None => {
            let mut out = Vec::new();
            match clap_mangen::Man::new(cmd).render(&mut out) {
                Ok(()) => write_stdout(&out),
                Err(e) => fail(format!("cannot render the man page: {e}")),
            }
        }
    }
}

/// Write `bytes` to stdout; a closed pipe (`vadapt man | head`) is not an error.
fn write_stdout(bytes: &[u8]) -> ExitCode {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => fail(format!("cannot write to stdout: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn completion(shell: clap_complete::Shell) -> String {
        let mut out = Vec::new();
        clap_complete::generate(shell, &mut Cli::command(), BIN, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn completions_name_the_subcommands_and_their_flags() {
        use clap_complete::Shell;
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let text = completion(shell);
            for word in [
                "serve",
                "add-port",
                "del-port",
                "socket-group",
                "completions",
            ] {
                assert!(text.contains(word), "{shell}: no `{word}`");
            }
        }
    }

    #[test]
    fn man_pages_cover_every_subcommand() {
        let dir = tempfile::tempdir().unwrap();
        clap_mangen::generate_to(Cli::command(), dir.path()).unwrap();
        let top = std::fs::read_to_string(dir.path().join("vadapt.1")).unwrap();
        assert!(
            top.starts_with(".ie") || top.contains(".TH vadapt 1"),
            "{top}"
        );
        let serve = std::fs::read_to_string(dir.path().join("vadapt-serve.1")).unwrap();
        assert!(serve.contains("socket\\-group"), "{serve}");
        for sub in Cli::command().get_subcommands() {
            let page = dir.path().join(format!("vadapt-{}.1", sub.get_name()));
            assert!(page.is_file(), "no page {}", page.display());
        }
    }
}
