//! The route-controller binary: parses the command line and runs a subcommand.
#![forbid(unsafe_code)]

use route_controller::cli::{self, Command, EXIT_USAGE};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let cli = cli::parse(&args);
    match cli.command {
        Command::Plan(plan) => match cli::run_plan(&plan) {
            Ok(text) => print!("{text}"),
            Err(e) => {
                eprintln!("error: {e}");
                std::process::exit(EXIT_USAGE);
            }
        },
    }
}
