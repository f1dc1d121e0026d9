//! Killing a child process with everything it started: the exec plugins and AWS's
//! `credential_process` run in a process group of their own (std's safe
//! `process_group(0)`), so that a timeout's kill reaches a shell script's `sleep`, an
//! `ip netns exec`'s child or an `ssh`, which would otherwise live on holding the
//! pipes open.

use std::process::{Child, Command, Stdio};

/// Kills the child's process group, then the child itself should the group kill
/// fail, and reaps it.
pub(crate) fn kill(child: &mut Child) {
    kill_group(child.id());
    let _ = child.kill();
    let _ = child.wait();
}

/// `kill -KILL -- -PGID`: std has no killpg, and calling libc would need unsafe code.
/// The group's ID is the child's PID (`process_group(0)`); it cannot be reused while
/// a process of the group lives. Found at its usual paths first, since the controller
/// may run without PATH; where there is no `kill` at all (a distroless image), only
/// the child itself is killed, and the caller's wait is still bounded by its deadline.
pub(crate) fn kill_group(pid: u32) {
    let kill = ["/bin/kill", "/usr/bin/kill"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .unwrap_or("kill");
    let _ = Command::new(kill)
        .args(["-KILL", "--", &format!("-{pid}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}
