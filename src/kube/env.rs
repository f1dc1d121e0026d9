//! The process environment as the configuration loader sees it: a few variables, the
//! home directory and the service-account directory, captured once.
//!
//! Tests build an [`Env`] by hand instead of mutating the process environment, which
//! would race between tests running in parallel.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where Kubernetes mounts a pod's service-account token, CA and namespace.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// A snapshot of the environment variables and paths that decide where credentials
/// come from.
#[derive(Clone, Debug)]
pub struct Env {
    vars: BTreeMap<String, String>,
    home: Option<PathBuf>,
    service_account_dir: PathBuf,
}

/// The variables the loader reads; only these are captured, so that a Debug print of
/// an [`Env`] never shows unrelated secrets.
const VARS: &[&str] = &[
    "KUBECONFIG",
    "KUBERNETES_SERVICE_HOST",
    "KUBERNETES_SERVICE_PORT",
];

impl Env {
    /// An empty environment: no variables, no home directory, the standard
    /// service-account directory.
    pub fn empty() -> Env {
        Env {
            vars: BTreeMap::new(),
            home: None,
            service_account_dir: PathBuf::from(SERVICE_ACCOUNT_DIR),
        }
    }

    /// The real environment of this process.
    pub fn from_process() -> Env {
        let mut env = Env::empty();
        for name in VARS {
            if let Ok(value) = std::env::var(name) {
                env.vars.insert((*name).to_string(), value);
            }
        }
        env.home = std::env::var_os("HOME")
            .or_else(|| std::env::var_os("USERPROFILE"))
            .filter(|h| !h.is_empty())
            .map(PathBuf::from);
        env
    }

    pub fn with_var(mut self, name: &str, value: &str) -> Env {
        self.vars.insert(name.to_string(), value.to_string());
        self
    }

    pub fn with_home(mut self, home: impl Into<PathBuf>) -> Env {
        self.home = Some(home.into());
        self
    }

    pub fn with_service_account_dir(mut self, dir: impl Into<PathBuf>) -> Env {
        self.service_account_dir = dir.into();
        self
    }

    /// A variable's value; an empty value counts as unset, as in client-go.
    pub fn var(&self, name: &str) -> Option<&str> {
        self.vars
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    pub fn home(&self) -> Option<&Path> {
        self.home.as_deref()
    }

    pub fn service_account_dir(&self) -> &Path {
        &self.service_account_dir
    }
}
