//! Configuration of the exec provider: which plugin to run, with which arguments and
//! environment, and its limits. Read from `--cloud-config`'s `KEY=VALUE` lines, the
//! format the other providers' files use:
//!
//! ```text
//! Command=/usr/local/lib/route-controller/linux-router
//! Arg=--verbose
//! Env=LINUX_ROUTER_TABLE=100
//! Timeout=10s
//! ```
//!
//! `Arg=` and `Env=NAME=VALUE` repeat, in order; `Env=` adds to the environment the
//! plugin inherits. A value runs to the end of its line (no trailing comments).

use std::time::Duration;

/// The plugin's command (`Command=`, required).
pub const KEY_COMMAND: &str = "Command";
/// One argument (`Arg=`, repeated in order).
pub const KEY_ARG: &str = "Arg";
/// One environment variable (`Env=NAME=VALUE`, repeated).
pub const KEY_ENV: &str = "Env";
/// How long one call may take (`Timeout=`, a Go duration).
pub const KEY_TIMEOUT: &str = "Timeout";
/// The plugin's name in logs and errors (`Name=`).
pub const KEY_NAME: &str = "Name";
/// Bytes of stdout one reply may have (`MaxOutputBytes=`).
pub const KEY_MAX_OUTPUT: &str = "MaxOutputBytes";

/// Every key the exec provider reads.
pub const KEYS: &[&str] = &[
    KEY_COMMAND,
    KEY_ARG,
    KEY_ENV,
    KEY_TIMEOUT,
    KEY_NAME,
    KEY_MAX_OUTPUT,
];

/// Default for [`Config::timeout`].
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest [`Config::timeout`] accepted: the fence's bound, the time an old
/// leader's last call may still run, grows with it.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(300);
/// Default for [`Config::max_output_bytes`]: a list of 50 000 routes is about 7 MiB.
pub const DEFAULT_MAX_OUTPUT: usize = 16 * 1024 * 1024;

/// The provider's settings. [`Config::new`] gives every field its default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// The plugin's name in logs and errors (`Name=`, default the command's file name).
    pub name: String,
    /// The program to run (`Command=`, required): a path, or a name looked up in `PATH`.
    pub command: String,
    /// Its arguments (`Arg=`, repeated; default none).
    pub args: Vec<String>,
    /// Variables added to the environment the plugin inherits from the controller
    /// (`Env=NAME=VALUE`, repeated; default none).
    pub env: Vec<(String, String)>,
    /// How long one call may take before the plugin and every process it started are
    /// killed (`Timeout=`, default 10s, at most 5m).
    pub timeout: Duration,
    /// Bytes of stdout one reply may have; a plugin printing more is killed
    /// (`MaxOutputBytes=`, default 16 MiB).
    pub max_output_bytes: usize,
}

impl Config {
    /// A configuration running `command` with every default.
    pub fn new(command: impl Into<String>) -> Config {
        let command = command.into();
        Config {
            name: default_name(&command),
            command,
            args: Vec::new(),
            env: Vec::new(),
            timeout: DEFAULT_TIMEOUT,
            max_output_bytes: DEFAULT_MAX_OUTPUT,
        }
    }

    /// Reads `--cloud-config`'s pairs (keys compared without case). Errors name the
    /// key and the fix.
    pub fn from_pairs(pairs: &[(String, String)]) -> Result<Config, String> {
        let all = |key: &'static str| {
            pairs
                .iter()
                .filter(move |(k, _)| k.eq_ignore_ascii_case(key))
                .map(|(_, v)| v.clone())
        };
        let last = |key: &'static str| all(key).next_back();
        let command = last(KEY_COMMAND)
            .filter(|c| !c.trim().is_empty())
            .ok_or_else(|| {
                format!(
                    "--cloud-provider=exec needs the plugin: add {KEY_COMMAND}=/path/to/plugin to \
                     --cloud-config (and {KEY_ARG}=… lines for its arguments)"
                )
            })?;
        let mut config = Config::new(command.trim());
        config.args = all(KEY_ARG).collect();
        for entry in all(KEY_ENV) {
            let (name, value) = entry
                .split_once('=')
                .filter(|(n, _)| !n.trim().is_empty())
                .ok_or_else(|| {
                    format!("--cloud-config: {KEY_ENV}={entry:?} is not {KEY_ENV}=NAME=VALUE")
                })?;
            config
                .env
                .push((name.trim().to_string(), value.to_string()));
        }
        if let Some(v) = last(KEY_TIMEOUT) {
            let timeout = crate::duration::parse(v.trim())
                .map_err(|e| format!("--cloud-config: {KEY_TIMEOUT}={v:?}: {e}"))?;
            if timeout.is_zero() || timeout > MAX_TIMEOUT {
                return Err(format!(
                    "--cloud-config: {KEY_TIMEOUT}={v:?} must be more than 0 and at most 5m \
                     (default 10s)"
                ));
            }
            config.timeout = timeout;
        }
        if let Some(v) = last(KEY_NAME).filter(|v| !v.trim().is_empty()) {
            config.name = v.trim().to_string();
        }
        if let Some(v) = last(KEY_MAX_OUTPUT) {
            config.max_output_bytes =
                v.trim()
                    .parse()
                    .ok()
                    .filter(|n| *n >= 1024)
                    .ok_or_else(|| {
                        format!(
                            "--cloud-config: {KEY_MAX_OUTPUT}={v:?} is not a number of bytes of at \
                         least 1024 (default {DEFAULT_MAX_OUTPUT})"
                        )
                    })?;
        }
        Ok(config)
    }
}

/// The command's file name: `linux-router` for `/opt/plugins/linux-router`.
fn default_name(command: &str) -> String {
    command
        .rsplit('/')
        .next()
        .filter(|n| !n.is_empty())
        .unwrap_or(command)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(lines: &[(&str, &str)]) -> Vec<(String, String)> {
        lines
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn command_args_env_and_timeout_come_from_the_file() {
        let c = Config::from_pairs(&pairs(&[
            ("Command", "/opt/p/linux-router"),
            ("Arg", "netns"),
            ("arg", "--x=1"),
            ("Env", "TABLE=100"),
            ("Timeout", "3s"),
        ]))
        .unwrap();
        assert_eq!(c.name, "linux-router");
        assert_eq!(c.args, ["netns", "--x=1"]);
        assert_eq!(c.env, [("TABLE".to_string(), "100".to_string())]);
        assert_eq!(c.timeout, Duration::from_secs(3));
        assert_eq!(c.max_output_bytes, DEFAULT_MAX_OUTPUT);
    }

    #[test]
    fn a_missing_command_a_bad_env_or_timeout_name_the_key_and_the_fix() {
        let e = Config::from_pairs(&[]).unwrap_err();
        assert!(e.contains("Command=/path/to/plugin"), "{e}");
        let e = Config::from_pairs(&pairs(&[("Command", "p"), ("Env", "NOVALUE")])).unwrap_err();
        assert!(e.contains("Env=NAME=VALUE"), "{e}");
        let e = Config::from_pairs(&pairs(&[("Command", "p"), ("Timeout", "0s")])).unwrap_err();
        assert!(e.contains("at most 5m"), "{e}");
        let e = Config::from_pairs(&pairs(&[("Command", "p"), ("Timeout", "ten")])).unwrap_err();
        assert!(e.contains("Timeout"), "{e}");
    }
}
