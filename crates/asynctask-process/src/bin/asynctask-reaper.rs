//! `asynctask-reaper`: the reaper as a program of its own (see
//! `asynctask_process::reaper`): `asynctask-reaper [--parent PID] [--grace-ms MS]
//! -- PROGRAM [ARGS...]`, or `asynctask-reaper [--parent PID] --warm` with the
//! command on stdin.

#[cfg(unix)]
fn main() -> std::process::ExitCode {
    asynctask_process::reaper::main(std::env::args_os().skip(1))
}

#[cfg(not(unix))]
fn main() -> std::process::ExitCode {
    eprintln!("asynctask-reaper: runs only on Unix");
    std::process::ExitCode::FAILURE
}
