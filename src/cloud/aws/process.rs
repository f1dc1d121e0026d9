//! `credential_process`: a profile's command whose standard output is the
//! credentials as JSON (`Version` 1, `AccessKeyId`, `SecretAccessKey`, optionally
//! `SessionToken` and `Expiration`), run through `sh -c` as the Go SDK runs it, and
//! again before the credentials expire (never, without `Expiration`).
//!
//! A command that hangs is killed after its timeout, with every process it started
//! (it runs in a process group of its own, as exec plugins do); at most 64 KiB of its output is
//! read, and the start of its standard error is quoted in messages (it says why the
//! command failed; the credentials go to standard output, which is never quoted).

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use serde::Deserialize;

use super::credentials::{Credentials, Fetch};
use super::sts::parse_expiration;
use crate::provider::{CloudError, CloudErrorKind};

const MAX_OUTPUT_BYTES: u64 = 64 * 1024;
/// How much of standard error a message quotes.
const STDERR_SNIPPET: usize = 300;

/// A profile's `credential_process`.
pub struct Process {
    pub command: String,
    pub timeout: Duration,
    /// The profile and file that name it, for messages.
    pub profile: String,
}

impl Fetch for Process {
    fn fetch(&self, _now: SystemTime) -> Result<Credentials, CloudError> {
        let stdout = run(&self.command, self.timeout)?;
        parse_process_output(&stdout).map_err(CloudError::invalid)
    }

    fn origin(&self) -> String {
        format!("the credential_process of {}", self.profile)
    }
}

/// Runs `command` and returns its standard output, or why it failed: it could not
/// start, ran out of time, wrote too much, or exited with an error.
fn run(command: &str, timeout: Duration) -> Result<String, CloudError> {
    let retry = |message: String| CloudError::new(CloudErrorKind::Retry { after: None }, message);
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(command)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| {
            CloudError::invalid(format!("cannot run the credential_process with sh: {e}"))
        })?;
    let stdout = child.stdout.take().map(read_bounded);
    let stderr = child.stderr.take().map(read_bounded);
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() >= deadline => {
                crate::process_group::kill(&mut child);
                return Err(retry(format!(
                    "the credential_process did not finish within {}: it was stopped",
                    crate::duration::format(timeout)
                )));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => return Err(retry(format!("waiting for the credential_process: {e}"))),
        }
    };
    // A process it left behind may hold the pipes open: wait for the readers briefly.
    let collect = |reader: Option<mpsc::Receiver<Result<Vec<u8>, String>>>| {
        reader
            .and_then(|r| r.recv_timeout(Duration::from_secs(1)).ok())
            .unwrap_or_else(|| Err("its output did not end".into()))
    };
    let stderr = collect(stderr).unwrap_or_default();
    let stderr = String::from_utf8_lossy(&stderr);
    let stderr: String = stderr.trim().chars().take(STDERR_SNIPPET).collect();
    if !status.success() {
        return Err(retry(format!(
            "the credential_process failed ({status}){}",
            if stderr.is_empty() {
                String::new()
            } else {
                format!(": {stderr}")
            }
        )));
    }
    let stdout = collect(stdout)
        .map_err(|e| CloudError::invalid(format!("the credential_process's output: {e}")))?;
    String::from_utf8(stdout)
        .map_err(|_| CloudError::invalid("the credential_process wrote output that is not UTF-8"))
}

/// Reads a pipe on a thread of its own, keeping at most [`MAX_OUTPUT_BYTES`].
fn read_bounded(pipe: impl Read + Send + 'static) -> mpsc::Receiver<Result<Vec<u8>, String>> {
    let (send, receive) = mpsc::channel();
    std::thread::spawn(move || {
        let mut pipe = pipe;
        let mut kept = Vec::new();
        let result = match (&mut pipe)
            .take(MAX_OUTPUT_BYTES + 1)
            .read_to_end(&mut kept)
        {
            Ok(_) if kept.len() as u64 > MAX_OUTPUT_BYTES => {
                // Drain the rest so that the process is not blocked writing it.
                let _ = std::io::copy(&mut pipe, &mut std::io::sink());
                Err(format!("it wrote more than {MAX_OUTPUT_BYTES} bytes"))
            }
            Ok(_) => Ok(kept),
            Err(e) => Err(format!("reading it: {e}")),
        };
        let _ = send.send(result);
    });
    receive
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ProcessCredentials {
    version: u32,
    access_key_id: String,
    secret_access_key: String,
    #[serde(default)]
    session_token: Option<String>,
    #[serde(default)]
    expiration: Option<String>,
}

/// The JSON a credential process prints (the SDKs' format, version 1).
fn parse_process_output(output: &str) -> Result<Credentials, String> {
    let parsed: ProcessCredentials = serde_json::from_str(output).map_err(|e| {
        format!(
            "the credential_process's output is not the expected JSON ({{\"Version\": 1, \
             \"AccessKeyId\": ..., \"SecretAccessKey\": ..., \"SessionToken\": ..., \
             \"Expiration\": ...}}): {e}"
        )
    })?;
    if parsed.version != 1 {
        return Err(format!(
            "the credential_process's output has Version {}; only version 1 is known",
            parsed.version
        ));
    }
    if parsed.access_key_id.is_empty() || parsed.secret_access_key.is_empty() {
        return Err(
            "the credential_process's output has an empty AccessKeyId or SecretAccessKey".into(),
        );
    }
    let mut credentials = Credentials::new(&parsed.access_key_id, &parsed.secret_access_key);
    if let Some(token) = parsed.session_token.filter(|t| !t.is_empty()) {
        credentials = credentials.with_session_token(&token);
    }
    if let Some(expiration) = parsed.expiration {
        let expires = parse_expiration(&expiration).ok_or_else(|| {
            format!("the credential_process's Expiration {expiration:?} is not RFC 3339")
        })?;
        credentials = credentials.with_expiry(expires);
    }
    Ok(credentials)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_one_output_with_and_without_expiry() {
        let creds = parse_process_output(
            r#"{"Version":1,"AccessKeyId":"AKIDPROC","SecretAccessKey":"s",
                "SessionToken":"t","Expiration":"2030-01-01T00:00:00Z"}"#,
        )
        .expect("parses");
        assert_eq!(creds.access_key_id(), "AKIDPROC");
        assert_eq!(creds.session_token(), Some("t"));
        assert!(creds.expires().is_some());
        let long_lived =
            parse_process_output(r#"{"Version":1,"AccessKeyId":"A","SecretAccessKey":"s"}"#)
                .expect("parses");
        assert_eq!(
            (long_lived.session_token(), long_lived.expires()),
            (None, None)
        );
        let err = parse_process_output(r#"{"Version":2,"AccessKeyId":"A","SecretAccessKey":"s"}"#)
            .expect_err("version 2");
        assert!(err.contains("Version 2"), "{err}");
    }

    fn process(command: &str, timeout: Duration) -> Process {
        Process {
            command: command.into(),
            timeout,
            profile: "profile \"p\" in test".into(),
        }
    }

    #[test]
    fn a_process_that_hangs_is_stopped_at_its_timeout() {
        let started = Instant::now();
        let err = process("exec sleep 30", Duration::from_millis(200))
            .fetch(SystemTime::UNIX_EPOCH)
            .expect_err("times out");
        assert!(
            err.message.contains("did not finish within"),
            "{}",
            err.message
        );
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn a_process_that_hangs_is_stopped_with_every_process_it_started() {
        let dir = std::env::temp_dir().join(format!("rc-credproc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let pid_file = dir.join("grandchild.pid");
        // The shell starts a helper that would outlive it, as a login wrapper may.
        let command = format!("sleep 30 & echo $! > {}; wait", pid_file.display());
        process(&command, Duration::from_millis(300))
            .fetch(SystemTime::UNIX_EPOCH)
            .expect_err("times out");
        let pid = std::fs::read_to_string(&pid_file).expect("the shell wrote the pid");
        let alive = || {
            std::fs::read_to_string(format!("/proc/{}/stat", pid.trim()))
                // A killed process not yet reaped by its new parent is a zombie: gone.
                .is_ok_and(|stat| !stat.contains(") Z "))
        };
        // The kill is sent before `fetch` returns; its delivery is not instant.
        let give_up = Instant::now() + Duration::from_secs(5);
        while alive() && Instant::now() < give_up {
            std::thread::yield_now();
        }
        assert!(
            !alive(),
            "the credential_process's child {} survived",
            pid.trim()
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_failing_process_is_quoted_from_standard_error_and_its_output_is_bounded() {
        let err = process(
            "echo 'token expired, run login' >&2; exit 3",
            Duration::from_secs(10),
        )
        .fetch(SystemTime::UNIX_EPOCH)
        .expect_err("fails");
        assert!(
            err.message.contains("token expired, run login"),
            "{}",
            err.message
        );
        let err = process("head -c 200000 /dev/zero", Duration::from_secs(10))
            .fetch(SystemTime::UNIX_EPOCH)
            .expect_err("too much");
        assert!(
            err.message.contains("more than 65536 bytes"),
            "{}",
            err.message
        );
    }

    /// Invariant 8 for a credential process's output.
    mod fuzz {
        use proptest::prelude::*;

        use super::*;
        use crate::fuzz::{check, config, text};
        use crate::fuzz_seed;

        static OUTPUTS: &[&[u8]] = &[fuzz_seed!("aws-process-credentials.json")];

        proptest! {
            #![proptest_config(config())]

            #[test]
            fn process_output(input in text(OUTPUTS)) {
                check("the credential_process output parser", move || {
                    let _ = parse_process_output(&input).map(|_| ());
                });
            }
        }
    }
}
