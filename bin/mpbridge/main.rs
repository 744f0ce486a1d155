//! mpbridge: a learning bridge between taps and existing interfaces, with a
//! MAC table under the lock strategy of your choice, and the client that
//! operates a running one through its control socket. This file is the
//! entry: it parses the command line (`cli`) and hands over to the daemon
//! (`daemon`) or the client (`commands`).

#![deny(unsafe_code)]

mod api;
mod api_error;
mod capture;
mod cli;
mod client;
mod commands;
mod config;
mod control;
mod daemon;
mod evpn;
mod mcast;
mod metrics;
mod port_options;
mod ports;
mod protocol;
mod queue;
mod stp;
mod system;
mod watchdog;
mod workers;

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};

use cli::{Cli, Command};
use system::say;

fn main() -> ExitCode {
    let parsed = Cli::command()
        .try_get_matches()
        .and_then(|matches| Cli::from_arg_matches(&matches).map(|cli| (cli, matches)));
    let (mut cli, matches) = match parsed {
        Ok(parsed) => parsed,
        Err(error) if !error.use_stderr() => {
            // --help and --version.
            let _ = error.print();
            return ExitCode::SUCCESS;
        }
        Err(error) => {
            // One line, never the usage dump.
            let text = error.to_string();
            let line = text.lines().next().unwrap_or("invalid arguments");
            // What the usage dump would have listed on a line of its own.
            let values = match error.get(clap::error::ContextKind::ValidValue) {
                Some(clap::error::ContextValue::Strings(values)) => {
                    format!(" (possible values: {})", values.join(", "))
                }
                _ => String::new(),
            };
            say(&format!(
                "mpbridge: {}{values}\n",
                line.trim_start_matches("error: ")
            ));
            return ExitCode::from(2);
        }
    };
    let level = match cli.verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(level)).init();
    match std::mem::replace(&mut cli.command, Command::Reload) {
        Command::Run(args) => daemon::main(cli, *args, &matches),
        Command::Completions { shell } => {
            system::default_sigpipe();
            cli::completions(shell, &mut std::io::stdout());
            ExitCode::SUCCESS
        }
        other => {
            system::default_sigpipe();
            let socket = cli.socket();
            match commands::operate(&cli.name, &socket, other) {
                Ok(()) => ExitCode::SUCCESS,
                Err(failure) => {
                    say(&format!("mpbridge: {}\n", failure.message));
                    ExitCode::from(failure.code)
                }
            }
        }
    }
}
