//! `ringvisor`: the command line with the built-in behaviours (`ringvisor::app::command` documents the
//! commands, and how a program with behaviours of its own becomes the same command).

fn main() -> std::process::ExitCode {
    ringvisor::app::command::ringvisor()
}
