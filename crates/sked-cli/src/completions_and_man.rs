//! What a shell and a system need of the command: completions (`sked completions bash|zsh|fish`)
//! and the manual page (`sked man`), both generated from the command's own definition, so that
//! they never disagree with it.

use std::io::Write;

use clap::CommandFactory;

use crate::{CliError, CliResult};

/// Writes the completion script for `shell` to standard output.
pub(crate) fn completions(shell: clap_complete::Shell) -> CliResult {
    // Into memory first: the generator panics when a write fails (a closed pipe).
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut crate::Cli::command(), "sked", &mut script);
    print(&script)
}

/// Writes `text` to standard output; a reader that went away (`| head`) is no failure.
fn print(text: &[u8]) -> CliResult {
    let mut out = std::io::stdout().lock();
    match out.write_all(text).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(CliError::runtime(e)),
        _ => Ok(()),
    }
}

/// Writes the manual page (roff, section 1) to standard output, or, with `dir`, every page
/// (the command's and each subcommand's) into it.
pub(crate) fn man(dir: Option<&std::path::Path>) -> CliResult {
    if let Some(dir) = dir {
        let failed = |e: std::io::Error| CliError::runtime(format!("{}: {e}", dir.display()));
        std::fs::create_dir_all(dir).map_err(failed)?;
        return clap_mangen::generate_to(crate::Cli::command(), dir).map_err(failed);
    }
    let mut page = Vec::new();
    clap_mangen::Man::new(crate::Cli::command())
        .render(&mut page)
        .map_err(CliError::runtime)?;
    print(&page)
}
