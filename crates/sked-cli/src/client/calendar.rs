//! `sked calendar …`: dates on which the schedules that skip a calendar do not fire.

use clap::Subcommand;
use sked::api::{CalendarDates, CalendarList};
use sked::store::CalendarInfo;

use crate::output::table;
use crate::{CliError, CliResult, Remote};

use super::{connect, failed, show};

#[derive(Subcommand)]
pub(crate) enum CalendarCmd {
    /// Create or replace a calendar; a schedule skips it with `schedule add … --skip-calendar
    /// NAME`, and each occurrence on one of its dates is recorded as excluded.
    Add {
        /// The calendar's name
        name: String,
        /// Its dates, as YYYY-MM-DD separated by commas (2026-12-25,2027-01-01)
        #[arg(long, value_name = "DATES")]
        dates: String,
        /// The IANA time zone its dates are in (default: each schedule's own)
        #[arg(long, value_name = "ZONE")]
        tz: Option<String>,
    },
    /// List calendars.
    Ls,
    /// Show a calendar's dates.
    Get {
        /// The calendar's name
        name: String,
    },
    /// Remove a calendar no schedule skips.
    Rm {
        /// The calendar's name
        name: String,
    },
}

pub(crate) async fn calendar(cmd: CalendarCmd, remote: &Remote) -> CliResult {
    match cmd {
        CalendarCmd::Add { name, dates, tz } => {
            let dates = sked_core::parse_dates(&dates)
                .map_err(|e| CliError::usage(format!("invalid --dates: {e}")))?;
            let dates = CalendarDates { dates, tz };
            // Check locally first, so bad input is reported even without a server.
            dates
                .clone()
                .named(&name)
                .validate()
                .map_err(CliError::usage)?;
            let c = connect(remote)?
                .calendar_put(&name, dates)
                .await
                .map_err(failed)?;
            show(remote, &c, |c| out!("{} {} dates", c.name, c.dates.len()));
        }
        CalendarCmd::Ls => {
            let list = connect(remote)?.calendars().await.map_err(failed)?;
            show(remote, &list, print_list);
        }
        CalendarCmd::Get { name } => {
            let c = connect(remote)?.calendar(&name).await.map_err(failed)?;
            show(remote, &c, print_calendar);
        }
        CalendarCmd::Rm { name } => {
            connect(remote)?
                .calendar_delete(&name)
                .await
                .map_err(failed)?;
            if !remote.json {
                out!("removed {name}");
            }
        }
    }
    Ok(())
}

fn zone(c: &CalendarInfo) -> String {
    c.tz.clone().unwrap_or_else(|| "each schedule's".into())
}

fn print_list(list: &CalendarList) {
    let rows = (list.calendars.iter())
        .map(|c| {
            vec![
                c.name.clone(),
                c.dates.len().to_string(),
                c.dates.first().map(|d| d.to_string()).unwrap_or_default(),
                c.dates.last().map(|d| d.to_string()).unwrap_or_default(),
                zone(c),
            ]
        })
        .collect();
    table(&["NAME", "DATES", "FIRST", "LAST", "TZ"], rows);
}

fn print_calendar(c: &CalendarInfo) {
    let dates: Vec<String> = c.dates.iter().map(|d| d.to_string()).collect();
    crate::output::fields(&[
        ("name", c.name.clone()),
        ("tz", zone(c)),
        ("dates", dates.join(",")),
    ]);
}
