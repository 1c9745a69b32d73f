//! The `sked` command. Exit codes: 0 ok, 1 runtime error, 2 invalid input or usage.

#[macro_use]
mod output;
mod bench;
mod client;
mod run;
mod top;

use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

/// A failure and the exit code it maps to.
#[derive(Debug)]
pub(crate) enum CliError {
    /// Bad input or usage: exit 2.
    Usage(String),
    /// Something failed at run time: exit 1.
    Runtime(String),
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
    #[command(subcommand)]
    command: Command,
}

#[derive(Args, Clone)]
pub(crate) struct Remote {
    /// URL of the sked server.
    #[arg(
        long = "server",
        env = "SKED_URL",
        default_value = "http://127.0.0.1:7070",
        global = true
    )]
    pub(crate) url: String,
    /// API token (needed when the server listens beyond loopback).
    #[arg(long, env = "SKED_TOKEN", global = true, hide_env_values = true)]
    pub(crate) token: Option<String>,
    /// Print JSON instead of tables.
    #[arg(long, global = true)]
    pub(crate) json: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Run the scheduler: HTTP API, schedules, maintenance, and (with --exec) built-in executors.
    Server(run::ServerArgs),
    /// Run a worker pool on the database directly.
    Worker(run::WorkerArgs),
    /// Enqueue, inspect and manage tasks.
    #[command(subcommand)]
    Task(client::TaskCmd),
    /// Manage recurring schedules.
    #[command(subcommand)]
    Schedule(client::ScheduleCmd),
    /// Pause, resume and limit queues.
    #[command(subcommand)]
    Queue(client::QueueCmd),
    /// A live overview: queues, activity, schedules, workers (redrawn until Ctrl-C).
    Top(top::TopArgs),
    /// Try cron expressions out.
    #[command(subcommand)]
    Cron(CronCmd),
    /// Measure the store and engine in-process.
    Bench(bench::BenchArgs),
}

#[derive(Subcommand)]
enum CronCmd {
    /// Print the next fire times of an expression, one per line, in RFC 3339.
    Next {
        expr: String,
        /// IANA time zone.
        #[arg(long, default_value = "UTC")]
        tz: String,
        /// Start after this time (RFC 3339); default now.
        #[arg(long)]
        after: Option<String>,
        /// How many.
        #[arg(short = 'n', default_value_t = 5)]
        n: u32,
    },
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    let result = match cli.command {
        Command::Cron(CronCmd::Next { expr, tz, after, n }) => {
            cron_next(&expr, &tz, after.as_deref(), n)
        }
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
                    Command::Server(a) => run::server(a).await,
                    Command::Worker(a) => run::worker(a).await,
                    Command::Task(c) => client::task(c).await,
                    Command::Schedule(c) => client::schedule(c).await,
                    Command::Queue(c) => client::queue(c).await,
                    Command::Bench(a) => bench::run(a).await,
                    Command::Top(a) => top::top(a).await,
                    Command::Cron(_) => unreachable!("handled above"),
                }
            })
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
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
    }
}

fn cron_next(expr: &str, tz: &str, after: Option<&str>, n: u32) -> CliResult {
    let cron = sked_core::CronExpr::parse(expr).map_err(CliError::usage)?;
    let zone = sked_core::parse_zone(tz).map_err(CliError::usage)?;
    let mut t = match after {
        Some(a) => sked_core::parse_time(a, jiff::Timestamp::now()).map_err(CliError::usage)?,
        None => jiff::Timestamp::now(),
    };
    for _ in 0..n {
        let Some(next) = cron.next_after(t, &zone) else {
            break;
        };
        out!("{}", output::rfc3339_in(next, &zone));
        t = next;
    }
    Ok(())
}
