//! `sked schedule apply -f FILE`: a file of schedules written in one transaction.

use clap::Args;
use sked::store::ScheduleSyncReport;

use crate::{CliResult, Remote};

use super::{connect, failed, show};

#[derive(Args)]
pub(crate) struct ScheduleApply {
    /// The file: a list of schedule definitions as the API takes them, or an object with a
    /// `schedules` list; JSON or YAML (`-` reads standard input)
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    file: std::path::PathBuf,
    /// The group the file's schedules belong to; one that exists keeps its paused flag
    #[arg(long, value_name = "NAME")]
    group: Option<String>,
    /// Remove the group's schedules missing from the file (their tasks stay)
    #[arg(long, requires = "group")]
    prune: bool,
    /// Print what would change, and change nothing
    #[arg(long)]
    dry_run: bool,
}

pub(crate) async fn apply(a: ScheduleApply, remote: &Remote) -> CliResult {
    // Checked here first, so that a bad file is named without a server.
    let defs = crate::schedule_file::read("-f", &a.file)?;
    let options = sked::ApplyOptions {
        group: a.group,
        prune: a.prune,
        dry_run: a.dry_run,
    };
    let report = connect(remote)?
        .schedules_apply(defs, options)
        .await
        .map_err(failed)?;
    show(remote, &report, |r| print_report(r, a.dry_run));
    Ok(())
}

/// Each schedule created, updated or removed, then the counts.
fn print_report(r: &ScheduleSyncReport, dry_run: bool) {
    let verbs = match dry_run {
        true => ["would create", "would update", "would remove"],
        false => ["created", "updated", "removed"],
    };
    for (verb, names) in verbs.iter().zip([&r.created, &r.updated, &r.removed]) {
        for name in names {
            out!("{verb} {name}");
        }
    }
    out!(
        "{}{} created, {} updated, {} unchanged, {} removed",
        if dry_run { "dry run: " } else { "" },
        r.created.len(),
        r.updated.len(),
        r.unchanged.len(),
        r.removed.len()
    );
}
