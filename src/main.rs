//! The route-controller binary: parses the command line and runs a subcommand.
#![forbid(unsafe_code)]

use route_controller::cli::{self, Command, EXIT_USAGE};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (cli, _warnings) = cli::parse(&args);
    match cli.command {
        Command::Plan(args) => finish(cli::run_plan(&args)),
        Command::Simulate(args) => finish(cli::run_simulate(&args)),
    }
}

/// Prints a command's output, or its one-line error with exit status 2.
fn finish(result: Result<String, cli::UsageError>) {
    match result {
        Ok(text) => print!("{text}"),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(EXIT_USAGE);
        }
    }
}
