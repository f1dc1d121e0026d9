//! Runs one plugin call: starts the process, writes the request, reads its stdout and
//! stderr into bounded buffers, and kills it (with every process it started) when it
//! passes its timeout or its output passes its bound.
//!
//! It must never hang and never let a plugin's output grow the controller's memory:
//! every wait here ends at the call's deadline, and a plugin whose leftover children
//! keep its pipes open after it exited is killed at the deadline as well. The plugin
//! runs in a process group of its own (std's safe `process_group(0)`), so that a kill
//! reaches a shell script's `sleep`, an `ip netns exec`'s child or an `ssh`.

use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::sync::lock;

/// Bytes of stderr kept for the log; the rest is read and dropped.
pub const STDERR_KEPT: usize = 8 * 1024;

/// What to run and its limits.
pub struct Invocation<'a> {
    pub command: &'a str,
    pub args: &'a [String],
    pub env: &'a [(String, String)],
    pub stdin: Vec<u8>,
    pub timeout: Duration,
    pub max_output: usize,
}

/// How a plugin process ended.
#[derive(Debug)]
pub enum Ended {
    /// It exited with this code.
    Exited(i32),
    /// A signal ended it (it crashed, or someone killed it).
    Signal(i32),
    /// It passed its timeout; it was killed.
    TimedOut,
    /// Its stdout passed the bound; it was killed.
    OutputTooLarge,
}

/// A finished call: how it ended, its stdout, and the start of its stderr.
#[derive(Debug)]
pub struct Finished {
    pub ended: Ended,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// stderr was longer than [`STDERR_KEPT`].
    pub stderr_cut: bool,
}

/// Runs the call. `Err` only when the process could not be started.
pub fn run(call: Invocation<'_>) -> Result<Finished, std::io::Error> {
    let deadline = Instant::now() + call.timeout;
    let mut command = Command::new(call.command);
    command
        .args(call.args)
        .envs(call.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = command.spawn()?;
    // The request is small, but a plugin that never reads stdin must not block us:
    // write from a thread, which ends when the pipe closes with the process.
    if let Some(mut stdin) = child.stdin.take() {
        let request = call.stdin;
        std::thread::spawn(move || {
            let _ = stdin.write_all(&request);
        });
    }
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let stdout = Arc::new(Mutex::new(Vec::new()));
    let stderr = Arc::new(Mutex::new(Vec::new()));
    let too_large = Arc::new(AtomicBool::new(false));
    let stderr_cut = Arc::new(AtomicBool::new(false));
    if let Some(pipe) = child.stdout.take() {
        let (buf, flag, done) = (stdout.clone(), too_large.clone(), done_tx.clone());
        std::thread::spawn(move || {
            // Stops reading past the bound: the plugin is killed, nothing more is kept.
            read_bounded(pipe, &buf, call.max_output, &flag, false);
            let _ = done.send(());
        });
    }
    if let Some(pipe) = child.stderr.take() {
        let (buf, flag, done) = (stderr.clone(), stderr_cut.clone(), done_tx.clone());
        std::thread::spawn(move || {
            // Keeps reading past the bound, so that a chatty plugin never blocks on a
            // full pipe; only the start is kept.
            read_bounded(pipe, &buf, STDERR_KEPT, &flag, true);
            let _ = done.send(());
        });
    }
    drop(done_tx);
    let ended = wait(&mut child, deadline, &too_large);
    // The pipes close when every process holding them is gone; wait for both readers,
    // but not past the deadline (a child of the plugin may hold them open).
    let ended = match ended {
        Ended::Exited(_) | Ended::Signal(_) => {
            let mut open = 2;
            while open > 0 {
                let left = deadline.saturating_duration_since(Instant::now());
                match done_rx.recv_timeout(left) {
                    Ok(()) => open -= 1,
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        crate::process_group::kill_group(child.id());
                        break;
                    }
                }
            }
            if open > 0 { Ended::TimedOut } else { ended }
        }
        other => other,
    };
    let too_large_now = too_large.load(Ordering::Relaxed);
    Ok(Finished {
        ended: if too_large_now {
            Ended::OutputTooLarge
        } else {
            ended
        },
        stdout: std::mem::take(&mut *lock(&stdout)),
        stderr: std::mem::take(&mut *lock(&stderr)),
        stderr_cut: stderr_cut.load(Ordering::Relaxed),
    })
}

/// Waits for the process until `deadline`, killing its group on a timeout or when its
/// stdout passed the bound.
fn wait(child: &mut Child, deadline: Instant, too_large: &AtomicBool) -> Ended {
    // Short polls first: most plugins answer in milliseconds.
    let mut pause = Duration::from_millis(1);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                return match (status.code(), status.signal()) {
                    (Some(code), _) => Ended::Exited(code),
                    (None, Some(signal)) => Ended::Signal(signal),
                    (None, None) => Ended::Signal(0),
                };
            }
            Ok(None) => {}
            // The child cannot be waited for (it is not ours any more): treat as a hang.
            Err(_) => {
                crate::process_group::kill(child);
                return Ended::TimedOut;
            }
        }
        if too_large.load(Ordering::Relaxed) {
            crate::process_group::kill(child);
            return Ended::OutputTooLarge;
        }
        let now = Instant::now();
        if now >= deadline {
            crate::process_group::kill(child);
            return Ended::TimedOut;
        }
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}

fn read_bounded(
    mut pipe: impl Read,
    buf: &Mutex<Vec<u8>>,
    max: usize,
    past: &AtomicBool,
    drain: bool,
) {
    let mut chunk = [0u8; 16 * 1024];
    loop {
        let n = match pipe.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let mut kept = lock(buf);
        let room = max.saturating_sub(kept.len());
        kept.extend_from_slice(&chunk[..n.min(room)]);
        if n > room {
            past.store(true, Ordering::Relaxed);
            if !drain {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str, timeout_ms: u64, max_output: usize) -> Finished {
        let args = vec!["-c".to_string(), script.to_string()];
        run(Invocation {
            command: "sh",
            args: &args,
            env: &[],
            stdin: b"{\"verb\":\"list\"}".to_vec(),
            timeout: Duration::from_millis(timeout_ms),
            max_output,
        })
        .unwrap()
    }

    #[test]
    fn the_request_goes_in_and_the_reply_and_stderr_come_out() {
        let f = sh("cat; echo oops >&2; exit 3", 5000, 1024);
        assert!(matches!(f.ended, Ended::Exited(3)), "{f:?}");
        assert_eq!(f.stdout, b"{\"verb\":\"list\"}");
        assert_eq!(f.stderr, b"oops\n");
    }

    /// Whether the process `pid` still runs (a zombie has ended).
    fn alive(pid: &str) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|stat| {
                !stat
                    .rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            })
            .unwrap_or(false)
    }

    #[test]
    fn a_hanging_plugin_and_its_children_are_killed_at_the_timeout() {
        let pidfile = std::env::temp_dir().join(format!("rc-exec-hang-{}", std::process::id()));
        let start = Instant::now();
        // The shell's child `sleep` holds stdout open and would outlive a kill of the
        // shell alone.
        let f = sh(
            &format!("sleep 30 & echo $! >{}; wait", pidfile.display()),
            300,
            1024,
        );
        assert!(matches!(f.ended, Ended::TimedOut), "{f:?}");
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{:?}",
            start.elapsed()
        );
        let pid = std::fs::read_to_string(&pidfile).unwrap();
        let _ = std::fs::remove_file(&pidfile);
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            !alive(pid.trim()),
            "the plugin's child {pid} survived the kill"
        );
    }

    #[test]
    fn a_plugin_that_exits_but_leaves_a_child_holding_stdout_is_bounded_too() {
        let start = Instant::now();
        let f = sh("(sleep 30) & echo '{}'", 300, 1024);
        assert!(matches!(f.ended, Ended::TimedOut), "{f:?}");
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{:?}",
            start.elapsed()
        );
    }

    #[test]
    fn output_past_the_bound_is_cut_and_the_plugin_killed() {
        let f = sh("yes", 5000, 64 * 1024);
        assert!(matches!(f.ended, Ended::OutputTooLarge), "{:?}", f.ended);
        assert!(f.stdout.len() <= 64 * 1024);
        let f = sh("head -c 100000 /dev/zero >&2; echo ok", 5000, 1024);
        assert!(matches!(f.ended, Ended::Exited(0)), "{:?}", f.ended);
        assert!(f.stderr_cut && f.stderr.len() == STDERR_KEPT);
        assert_eq!(f.stdout, b"ok\n");
    }
}
