//! The `sked` command. Exit codes: 0 ok, 1 runtime error, 2 invalid input or usage.

#[macro_use]
mod output;
#[cfg(feature = "bench")]
mod bench;
mod client;
mod completions_and_man;
mod otel;
mod run;
mod schedule_file;
mod top;

use std::process::ExitCode;

use clap::{ArgMatches, Args, CommandFactory, FromArgMatches, Parser, Subcommand};

/// A failure and the exit code it maps to.
#[derive(Debug)]
pub(crate) enum CliError {
    /// Bad input or usage: exit 2.
    Usage(String),
    /// Something failed at run time: exit 1.
    Runtime(String),
    /// What was asked for ended otherwise than hoped (a task waited for ended dead, or the
    /// wait passed): this exit code, and the message.
    Exit(u8, String),
}

impl CliError {
    pub(crate) fn usage(m: impl std::fmt::Display) -> CliError {
        CliError::Usage(m.to_string())
    }

    pub(crate) fn runtime(m: impl std::fmt::Display) -> CliError {
        CliError::Runtime(m.to_string())
    }
}

pub(crate) type CliResult<T = ()> = Result<T, CliError>;

#[derive(Parser)]
#[command(
    name = "sked",
    version,
    about = "A durable, distributed task scheduler"
)]
struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Command,
}

/// The server URL used when neither `--server` nor `SKED_URL` names one.
pub(crate) const DEFAULT_SERVER: &str = "http://127.0.0.1:7070";

/// The heading the global options are listed under in every command's help, once.
const GLOBAL: &str = "Global options";

/// Options every command accepts, before or after the subcommand.
#[derive(Args, Clone)]
pub(crate) struct Global {
    /// URL of the sked server that `task`, `schedule`, `queue`, `top` and `worker` talk to
    /// [default: http://127.0.0.1:7070]
    #[arg(
        long = "server",
        env = "SKED_URL",
        global = true,
        value_name = "URL",
        help_heading = GLOBAL
    )]
    pub(crate) server: Option<String>,
    /// API token: sent by the client commands and remote workers; required of every client
    /// by `sked server` when set
    #[arg(
        long,
        env = "SKED_TOKEN",
        global = true,
        hide_env_values = true,
        help_heading = GLOBAL
    )]
    pub(crate) token: Option<String>,
    /// File holding the API token, instead of --token (which others may see in the process
    /// list); one trailing newline is ignored
    #[arg(
        long,
        env = "SKED_TOKEN_FILE",
        global = true,
        value_name = "PATH",
        conflicts_with = "token",
        help_heading = GLOBAL
    )]
    pub(crate) token_file: Option<std::path::PathBuf>,
    /// Print JSON (the API's values, as the server sent them) instead of tables
    #[arg(long, global = true, help_heading = GLOBAL)]
    pub(crate) json: bool,
    /// Where `--server` came from: the command line, or only the environment.
    #[arg(skip)]
    pub(crate) server_on_command_line: bool,
}

/// How a client command reaches the server.
#[derive(Clone)]
pub(crate) struct Remote {
    pub(crate) url: String,
    pub(crate) token: Option<String>,
    pub(crate) json: bool,
}

impl Global {
    pub(crate) fn remote(&self) -> Remote {
        Remote {
            url: self
                .server
                .clone()
                .unwrap_or_else(|| DEFAULT_SERVER.to_string()),
            token: self.token.clone(),
            json: self.json,
        }
    }
}

#[derive(Subcommand)]
enum Command {
    /// Run the scheduler: HTTP API, schedules, maintenance, and (with --exec) built-in executors.
    Server(run::ServerArgs),
    /// Run a worker: on the database (--db; it also takes part in maintenance), or through a
    /// server (--server or SKED_URL).
    Worker(run::WorkerArgs),
    /// Enqueue, inspect and manage tasks.
    #[command(subcommand)]
    Task(client::TaskCmd),
    /// Make and follow workflows: tasks that wait for one another by name.
    #[command(subcommand)]
    Workflow(client::WorkflowCmd),
    /// Open and close batches, whose callbacks run once when their tasks have ended.
    #[command(subcommand)]
    Batch(client::BatchCmd),
    /// Manage recurring schedules.
    #[command(subcommand)]
    Schedule(client::ScheduleCmd),
    /// Dates on which the schedules that skip a calendar do not fire.
    #[command(subcommand)]
    Calendar(client::CalendarCmd),
    /// Pause, resume and limit queues.
    #[command(subcommand)]
    Queue(client::QueueCmd),
    /// A live overview: queues, activity, schedules, workers (redrawn until Ctrl-C).
    Top(top::TopArgs),
    /// Try cron expressions out.
    #[command(subcommand)]
    Cron(CronCmd),
    /// Measure the store and engine in-process.
    #[cfg(feature = "bench")]
    Bench(bench::BenchArgs),
    /// Print the completion script for a shell: `source <(sked completions bash)`.
    Completions {
        /// bash, zsh, fish, elvish or powershell
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff): `sked man > sked.1; man -l sked.1`; with --out, write it
    /// and one page per subcommand (sked-server.1, sked-task-add.1, …) into a directory.
    Man {
        /// Directory for every page (created if missing)
        #[arg(long, value_name = "DIR")]
        out: Option<std::path::PathBuf>,
    },
}

#[derive(Subcommand)]
enum CronCmd {
    /// Print the next fire times of an expression, one per line, in the zone with its offset
    /// (with --json: an array of RFC 3339 times).
    Next {
        /// The cron expression (5 or 6 fields, or a macro like @daily), quoted
        expr: String,
        /// IANA time zone.
        #[arg(long, default_value = "UTC")]
        tz: String,
        /// Start after this time (RFC 3339); default now.
        #[arg(long)]
        after: Option<String>,
        /// How a job at a fixed hour and minute meets DST changes: debian (a skipped wall
        /// time runs after the gap, a repeated one once), skip (a skipped one does not run) or
        /// twice (a repeated one runs at both instants)
        #[arg(long, default_value = "debian", value_name = "POLICY")]
        dst: String,
        /// How many.
        #[arg(short = 'n', default_value_t = 5)]
        n: u32,
    },
}

/// jemalloc, for Rust and (unprefixed) for the SQLite linked in: see
/// docs/decisions/0003-the-sqlite-store.md.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let parsed = plain_usage(Cli::command())
        .try_get_matches()
        .and_then(|m| Ok((Cli::from_arg_matches(&m)?, m)));
    let (mut cli, matches) = match parsed {
        Ok(parsed) => parsed,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    cli.global.server_on_command_line = given_on_command_line(&matches, "server");
    if let Some(file) = &cli.global.token_file {
        match read_secret("--token-file", file) {
            Ok(token) => cli.global.token = Some(token),
            Err(e) => return fail(e),
        }
    }
    let global = cli.global;
    let result = match cli.command {
        Command::Cron(CronCmd::Next {
            expr,
            tz,
            after,
            n,
            dst,
        }) => cron_next(&expr, &tz, &dst, after.as_deref(), n, global.json),
        Command::Completions { shell } => completions_and_man::completions(shell),
        Command::Man { out } => completions_and_man::man(out.as_deref()),
        command => {
            let rt = match tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => return fail(CliError::runtime(format!("cannot start the runtime: {e}"))),
            };
            rt.block_on(async move {
                match command {
                    Command::Server(a) => run::server(a, &global).await,
                    Command::Worker(a) => run::worker(a, &global).await,
                    Command::Task(c) => client::task(c, &global.remote()).await,
                    Command::Workflow(c) => client::workflow(c, &global.remote()).await,
                    Command::Batch(c) => client::batch(c, &global.remote()).await,
                    Command::Schedule(c) => client::schedule(c, &global.remote()).await,
                    Command::Queue(c) => client::queue(c, &global.remote()).await,
                    Command::Calendar(c) => client::calendar(c, &global.remote()).await,
                    #[cfg(feature = "bench")]
                    Command::Bench(a) => bench::run(a).await,
                    Command::Top(a) => top::top(a, &global.remote()).await,
                    Command::Cron(_) | Command::Completions { .. } | Command::Man { .. } => {
                        unreachable!("handled above")
                    }
                }
            })
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}

/// A secret kept in a file (a token, a database URL with its password): the file's text
/// without one trailing newline.
pub(crate) fn read_secret(flag: &str, file: &std::path::Path) -> CliResult<String> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| CliError::usage(format!("cannot read {flag} {}: {e}", file.display())))?;
    let text = text
        .strip_suffix('\n')
        .map(|t| t.strip_suffix('\r').unwrap_or(t))
        .unwrap_or(&text);
    if text.is_empty() {
        return Err(CliError::usage(format!(
            "{flag} {} is empty",
            file.display()
        )));
    }
    Ok(text.to_string())
}

fn fail(e: CliError) -> ExitCode {
    match e {
        CliError::Usage(m) => {
            eprintln!("error: {m}");
            ExitCode::from(2)
        }
        CliError::Runtime(m) => {
            eprintln!("error: {m}");
            ExitCode::from(1)
        }
        CliError::Exit(code, m) => {
            eprintln!("{m}");
            ExitCode::from(code)
        }
    }
}

fn cron_next(
    expr: &str,
    tz: &str,
    dst: &str,
    after: Option<&str>,
    n: u32,
    json: bool,
) -> CliResult {
    let dst: sked_core::DstPolicy = dst
        .parse()
        .map_err(|e| CliError::usage(format!("invalid --dst: {e}")))?;
    let cron = sked_core::CronExpr::parse(expr)
        .map_err(CliError::usage)?
        .with_dst(dst);
    let zone = sked_core::parse_zone(tz).map_err(CliError::usage)?;
    let mut t = match after {
        Some(a) => sked_core::parse_time(a, jiff::Timestamp::now()).map_err(CliError::usage)?,
        None => jiff::Timestamp::now(),
    };
    let mut times = Vec::new();
    for _ in 0..n {
        let Some(next) = cron.next_after(t, &zone) else {
            break;
        };
        if json {
            times.push(output::rfc3339_in(next, &zone));
        } else {
            // One line at a time: `-n 100000 | head` starts at once.
            out!("{}", output::human_in(next, &zone));
        }
        t = next;
    }
    if json {
        out!(
            "{}",
            serde_json::to_string_pretty(&times).unwrap_or_default()
        );
    }
    Ok(())
}

/// `cmd` with each (sub)command's usage line in errors the same as in its help. clap's errors
/// otherwise list the options that were given, those from the environment included, so that
/// with `SKED_URL` set `--server <URL>` reads as if it were required.
fn plain_usage(mut cmd: clap::Command) -> clap::Command {
    cmd.build();
    fn fix(mut cmd: clap::Command) -> clap::Command {
        let usage = cmd.render_usage().to_string();
        let usage = usage.strip_prefix("Usage: ").unwrap_or(&usage).to_owned();
        let names: Vec<String> = cmd
            .get_subcommands()
            .map(|s| s.get_name().to_owned())
            .collect();
        let mut cmd = cmd.override_usage(usage);
        for name in names {
            cmd = cmd.mut_subcommand(name, fix);
        }
        cmd
    }
    fix(cmd)
}

/// Whether an option was given on the command line (at any level: global options may follow
/// the subcommand), not only through its environment variable.
fn given_on_command_line(m: &ArgMatches, id: &str) -> bool {
    if m.value_source(id) == Some(clap::parser::ValueSource::CommandLine) {
        return true;
    }
    m.subcommand()
        .is_some_and(|(_, sub)| given_on_command_line(sub, id))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every option and argument of every subcommand says what it is for.
    #[test]
    fn every_option_has_help() {
        fn check(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in cmd.get_arguments() {
                if arg.is_hide_set() || ["help", "version"].contains(&arg.get_id().as_str()) {
                    continue;
                }
                if arg.get_help().is_none() && arg.get_long_help().is_none() {
                    missing.push(format!("{path} {}", arg.get_id()));
                }
            }
            for sub in cmd.get_subcommands() {
                if sub.get_name() == "help" {
                    continue;
                }
                if sub.get_about().is_none() {
                    missing.push(format!("{path} {} (the command)", sub.get_name()));
                }
                check(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        check(&Cli::command(), "sked", &mut missing);
        assert!(missing.is_empty(), "without help text: {missing:#?}");
    }

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }
}
