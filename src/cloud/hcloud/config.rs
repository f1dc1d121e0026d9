//! Configuration of the Hetzner Cloud provider: where the API is, which token and
//! network to use, and the tunables of caching, polling and rate limiting.
//!
//! The configuration is read from an injectable environment (a function from variable
//! name to value), so that tests never touch the process environment. The token is
//! held in a [`Secret`] whose `Debug` output is redacted; nothing in this module ever
//! prints a token, only its length.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use super::actions::ActionClock;
use crate::metrics::Metrics;
use crate::provider::{CloudError, CloudErrorKind};

/// The public Hetzner Cloud API.
pub const DEFAULT_ENDPOINT: &str = "https://api.hetzner.cloud/v1";

/// The API token, as a variable (`HCLOUD_TOKEN`).
pub const ENV_TOKEN: &str = "HCLOUD_TOKEN";
/// A file holding the API token (`HCLOUD_TOKEN_FILE`), e.g. a mounted Secret.
pub const ENV_TOKEN_FILE: &str = "HCLOUD_TOKEN_FILE";
/// The network's numeric ID or name (`HCLOUD_NETWORK`).
pub const ENV_NETWORK: &str = "HCLOUD_NETWORK";
/// The API base URL (`HCLOUD_ENDPOINT`), for tests and proxies.
pub const ENV_ENDPOINT: &str = "HCLOUD_ENDPOINT";
/// How long the server list is reused by `list_routes` (`HCLOUD_SERVER_CACHE_MAX_AGE`,
/// a Go duration, as in the Hetzner cloud-controller-manager).
pub const ENV_SERVER_CACHE_MAX_AGE: &str = "HCLOUD_SERVER_CACHE_MAX_AGE";
/// Routes the network may hold (`HCLOUD_NETWORK_ROUTE_LIMIT`, default 100, Hetzner's
/// documented limit): set it if Hetzner raised the limit of your project.
pub const ENV_NETWORK_ROUTE_LIMIT: &str = "HCLOUD_NETWORK_ROUTE_LIMIT";

/// Length of the tokens the Hetzner console issues; others are probably pasted wrong.
const EXPECTED_TOKEN_LEN: usize = 64;

pub use crate::secret::Secret;

/// Where the API token comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenSource {
    /// A fixed token (`HCLOUD_TOKEN`).
    Value(Secret),
    /// A file whose trimmed content is the token (`HCLOUD_TOKEN_FILE`). It is read
    /// again whenever its modification time or size changes, so a rotated Secret takes
    /// effect without a restart.
    File(PathBuf),
}

/// The network whose routes the provider manages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NetworkRef {
    /// A numeric `HCLOUD_NETWORK`: looked up by ID, and by name if no network has that
    /// ID (a network may be named `12345`).
    Id(u64),
    /// Any other `HCLOUD_NETWORK`: looked up by name.
    Name(String),
}

impl NetworkRef {
    /// Reads `HCLOUD_NETWORK`: all digits is an ID, anything else a name.
    pub fn parse(value: &str) -> NetworkRef {
        let value = value.trim();
        match value.parse::<u64>() {
            Ok(id) if value.bytes().all(|b| b.is_ascii_digit()) => NetworkRef::Id(id),
            _ => NetworkRef::Name(value.to_string()),
        }
    }
}

impl fmt::Display for NetworkRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NetworkRef::Id(id) => write!(f, "{id}"),
            NetworkRef::Name(name) => f.write_str(name),
        }
    }
}

/// The provider's settings. [`Config::new`] gives every field its default.
#[derive(Clone, Debug)]
pub struct Config {
    /// API base URL (`HCLOUD_ENDPOINT`, default `https://api.hetzner.cloud/v1`).
    pub endpoint: String,
    /// The token (`HCLOUD_TOKEN` or `HCLOUD_TOKEN_FILE`; one is required). It needs
    /// read and write scope: route changes are writes.
    pub token: TokenSource,
    /// The network (`HCLOUD_NETWORK`, required).
    pub network: NetworkRef,
    /// Limit for one HTTP request, connection included (default 15 s, as HCCM).
    pub request_timeout: Duration,
    /// First poll of a new action after this delay (default 500 ms, as hcloud-go).
    pub action_first_poll: Duration,
    /// Later polls of a running action at this interval (default 1 s: a route action
    /// rarely ends between two polls 500 ms apart, and each poll costs budget).
    pub action_poll_interval: Duration,
    /// Give up waiting for an action after this long and report the operation as
    /// ambiguous (default 5 min).
    pub action_timeout: Duration,
    /// The time the waits for actions are measured and slept in (default the real
    /// clock; tests give a virtual one).
    pub action_clock: ActionClock,
    /// `list_routes` reuses the server list for this long (`HCLOUD_SERVER_CACHE_MAX_AGE`,
    /// default 10 s, as HCCM).
    pub server_cache_max_age: Duration,
    /// `create_route` finds a node's server in a server list up to this old (default
    /// 60 s, as HCCM): a server's private IP rarely changes, and a miss refreshes.
    pub server_lookup_max_age: Duration,
    /// A route whose gateway matches no server, or a node whose server is missing or
    /// not attached, refreshes the server list once if it is older than this (default
    /// 2 s), since a server created a moment ago may be missing from it.
    pub refresh_on_miss_after: Duration,
    /// Client-side rate: requests per second (default 1.0, Hetzner's 3600 per hour).
    pub rate_limit_per_second: f64,
    /// Client-side burst before the first reply (default 3600, Hetzner's bucket). The
    /// first `RateLimit-Limit`/`RateLimit-Remaining` headers replace it with what the
    /// API reports, which includes other clients of the same project.
    pub rate_limit_burst: u32,
    /// Route actions (add, delete) running at once on the network (default 1). The API
    /// answers `conflict` while the network is busy with another change, so parallel
    /// mutations would only collide and be retried; one at a time is the fastest
    /// order that never collides.
    pub max_concurrent_mutations: usize,
    /// Routes the network may hold (default 100, Hetzner's limit per network); the
    /// controller sends no create beyond it.
    pub network_route_limit: usize,
    /// `User-Agent` header (default `route-controller/<version>`).
    pub user_agent: String,
    /// Where to record `route_controller_cloud_api_requests_total` (optional).
    pub metrics: Option<Arc<Metrics>>,
    /// The CAs trusted and the certificate presented (default: the bundled roots and
    /// the machine's store; a private CA through `SSL_CERT_FILE`, as hcloud-go).
    pub trust: crate::Trust,
    /// Whether requests go through a proxy (default: as `HTTPS_PROXY`, `HTTP_PROXY`
    /// and `NO_PROXY` say, as every Kubernetes component reads them).
    pub proxying: crate::Proxying,
}

impl Config {
    /// A configuration with every default and the two required settings.
    pub fn new(token: TokenSource, network: NetworkRef) -> Config {
        Config {
            endpoint: DEFAULT_ENDPOINT.to_string(),
            token,
            network,
            request_timeout: Duration::from_secs(15),
            action_first_poll: Duration::from_millis(500),
            action_poll_interval: Duration::from_secs(1),
            action_timeout: Duration::from_secs(300),
            action_clock: ActionClock::Real,
            server_cache_max_age: Duration::from_secs(10),
            server_lookup_max_age: Duration::from_secs(60),
            refresh_on_miss_after: Duration::from_secs(2),
            rate_limit_per_second: 1.0,
            rate_limit_burst: 3600,
            max_concurrent_mutations: 1,
            network_route_limit: 100,
            user_agent: format!("route-controller/{}", env!("CARGO_PKG_VERSION")),
            metrics: None,
            trust: crate::Trust::new("SSL_CERT_FILE"),
            proxying: crate::Proxying::from_process(),
        }
    }

    /// Reads the configuration from an environment: `get` returns a variable's value.
    /// Empty values count as unset. Use `|k| std::env::var(k).ok()` for the process
    /// environment; tests pass a map.
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let get = |key: &str| get(key).filter(|v| !v.trim().is_empty());
        let token = match (get(ENV_TOKEN), get(ENV_TOKEN_FILE)) {
            (Some(_), Some(_)) => {
                return Err(ConfigError::new(
                    ENV_TOKEN_FILE,
                    format!("both {ENV_TOKEN} and {ENV_TOKEN_FILE} are set; set only one"),
                ));
            }
            (Some(token), None) => TokenSource::Value(Secret::new(token.trim())),
            (None, Some(path)) => TokenSource::File(PathBuf::from(path)),
            (None, None) => {
                return Err(ConfigError::new(
                    ENV_TOKEN,
                    format!(
                        "no API token: set {ENV_TOKEN} (or {ENV_TOKEN_FILE}) to a Hetzner Cloud \
                         API token with read and write scope"
                    ),
                ));
            }
        };
        let network = get(ENV_NETWORK)
            .map(|v| NetworkRef::parse(&v))
            .ok_or_else(|| {
                ConfigError::new(
                    ENV_NETWORK,
                    "no network: set it to the ID or name of the Hetzner Cloud network the \
                 nodes are attached to",
                )
            })?;
        let mut config = Config::new(token, network);
        if let Some(endpoint) = get(ENV_ENDPOINT) {
            config.endpoint = endpoint.trim().trim_end_matches('/').to_string();
            if !config.endpoint.starts_with("https://") && !config.endpoint.starts_with("http://") {
                return Err(ConfigError::new(
                    ENV_ENDPOINT,
                    format!(
                        "{:?} is not an http(s) URL (default {DEFAULT_ENDPOINT})",
                        config.endpoint
                    ),
                ));
            }
        }
        if let Some(age) = get(ENV_SERVER_CACHE_MAX_AGE) {
            config.server_cache_max_age = crate::duration::parse(age.trim())
                .map_err(|e| ConfigError::new(ENV_SERVER_CACHE_MAX_AGE, e.to_string()))?;
        }
        if let Some(limit) = get(ENV_NETWORK_ROUTE_LIMIT) {
            config.network_route_limit = limit
                .trim()
                .parse::<usize>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| {
                    ConfigError::new(
                        ENV_NETWORK_ROUTE_LIMIT,
                        format!("{limit:?} is not a positive number of routes (default 100)"),
                    )
                })?;
        }
        Ok(config)
    }

    /// Reads the configuration from the process environment.
    pub fn from_process_env() -> Result<Config, ConfigError> {
        Config::from_env(|key| std::env::var(key).ok())
    }
}

/// A setting that cannot be used, with the variable to fix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The environment variable (or setting) to fix.
    pub variable: &'static str,
    /// What is wrong with it and how to fix it.
    pub message: String,
    /// Not a wrong setting but the API unreachable or failing (connection refused, a
    /// timeout, a 5xx, the rate limit): worth trying again.
    pub outage: bool,
}

impl ConfigError {
    /// An error about `variable`.
    pub fn new(variable: &'static str, message: impl Into<String>) -> ConfigError {
        ConfigError {
            variable,
            message: message.into(),
            outage: false,
        }
    }

    /// The API could not be reached or failed; `variable` is where it is configured.
    pub fn outage(variable: &'static str, message: impl Into<String>) -> ConfigError {
        ConfigError {
            outage: true,
            ..ConfigError::new(variable, message)
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.outage {
            write!(
                f,
                "hcloud: the API is unreachable or failing: {} (if this lasts, check {})",
                self.message, self.variable
            )
        } else {
            write!(f, "hcloud: {}: {}", self.variable, self.message)
        }
    }
}

impl std::error::Error for ConfigError {}

/// Hands out the current token, re-reading a token file when it changes.
#[derive(Debug)]
pub(super) struct TokenReader {
    source: TokenSource,
    /// The file's token with the modification time and size it was read at.
    cached: Mutex<Option<(Option<SystemTime>, u64, Secret)>>,
}

impl TokenReader {
    pub(super) fn new(source: TokenSource) -> TokenReader {
        if let TokenSource::Value(secret) = &source {
            warn_about_length(secret, ENV_TOKEN);
        }
        TokenReader {
            source,
            cached: Mutex::new(None),
        }
    }

    /// The token to send now.
    pub(super) fn token(&self) -> Result<Secret, CloudError> {
        match &self.source {
            TokenSource::Value(secret) => Ok(secret.clone()),
            TokenSource::File(path) => self.read_file(path),
        }
    }

    fn read_file(&self, path: &Path) -> Result<Secret, CloudError> {
        let unreadable = |e: std::io::Error| {
            CloudError::new(
                CloudErrorKind::Invalid,
                format!(
                    "hcloud: cannot read the token file {} ({ENV_TOKEN_FILE}): {e}",
                    path.display()
                ),
            )
        };
        let meta = std::fs::metadata(path).map_err(unreadable)?;
        let stamp = (meta.modified().ok(), meta.len());
        let mut cached = crate::sync::lock(&self.cached);
        if let Some((modified, len, secret)) = cached.as_ref()
            && (*modified, *len) == stamp
        {
            return Ok(secret.clone());
        }
        let text = std::fs::read_to_string(path).map_err(unreadable)?;
        let secret = Secret::new(text.trim());
        if secret.is_empty() {
            return Err(CloudError::invalid(format!(
                "hcloud: the token file {} ({ENV_TOKEN_FILE}) is empty",
                path.display()
            )));
        }
        if cached.is_some() {
            log::info!(
                "hcloud: the token file {} changed; using the new token",
                path.display()
            );
        }
        warn_about_length(&secret, ENV_TOKEN_FILE);
        *cached = Some((stamp.0, stamp.1, secret.clone()));
        Ok(secret)
    }
}

/// HCCM warns about the same thing: a token of another length is usually truncated
/// or has stray characters from copying.
fn warn_about_length(secret: &Secret, variable: &str) {
    if secret.len() != EXPECTED_TOKEN_LEN {
        log::warn!(
            "hcloud: the token from {variable} has {} characters, not the usual {EXPECTED_TOKEN_LEN}; \
             check that it was copied whole",
            secret.len()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn defaults_are_documented_values() {
        let c = Config::from_env(env(&[("HCLOUD_TOKEN", "t"), ("HCLOUD_NETWORK", "k8s")])).unwrap();
        assert_eq!(c.endpoint, DEFAULT_ENDPOINT);
        assert_eq!(c.request_timeout, Duration::from_secs(15));
        assert_eq!(c.server_cache_max_age, Duration::from_secs(10));
        assert_eq!(c.rate_limit_per_second, 1.0);
        assert_eq!(c.max_concurrent_mutations, 1);
        assert_eq!(c.network, NetworkRef::Name("k8s".into()));
        assert_eq!(c.token, TokenSource::Value(Secret::new("t")));
    }

    #[test]
    fn numeric_network_is_an_id_and_anything_else_a_name() {
        assert_eq!(NetworkRef::parse("4711"), NetworkRef::Id(4711));
        assert_eq!(NetworkRef::parse(" 4711 "), NetworkRef::Id(4711));
        assert_eq!(NetworkRef::parse("+4711"), NetworkRef::Name("+4711".into()));
        assert_eq!(NetworkRef::parse("k8s-1"), NetworkRef::Name("k8s-1".into()));
    }

    #[test]
    fn missing_token_names_the_variable_to_set() {
        let err = Config::from_env(env(&[("HCLOUD_NETWORK", "1")])).unwrap_err();
        assert_eq!(err.variable, "HCLOUD_TOKEN");
        assert!(err.to_string().contains("read and write"), "{err}");
        let err =
            Config::from_env(env(&[("HCLOUD_TOKEN", "  "), ("HCLOUD_NETWORK", "1")])).unwrap_err();
        assert_eq!(err.variable, "HCLOUD_TOKEN");
    }

    #[test]
    fn missing_network_and_bad_endpoint_name_their_variables() {
        let err = Config::from_env(env(&[("HCLOUD_TOKEN", "t")])).unwrap_err();
        assert_eq!(err.variable, "HCLOUD_NETWORK");
        let err = Config::from_env(env(&[
            ("HCLOUD_TOKEN", "t"),
            ("HCLOUD_NETWORK", "1"),
            ("HCLOUD_ENDPOINT", "api.example"),
        ]))
        .unwrap_err();
        assert_eq!(err.variable, "HCLOUD_ENDPOINT");
        let err = Config::from_env(env(&[
            ("HCLOUD_TOKEN", "t"),
            ("HCLOUD_NETWORK", "1"),
            ("HCLOUD_SERVER_CACHE_MAX_AGE", "ten"),
        ]))
        .unwrap_err();
        assert_eq!(err.variable, "HCLOUD_SERVER_CACHE_MAX_AGE");
    }

    #[test]
    fn token_and_token_file_together_are_refused() {
        let err = Config::from_env(env(&[
            ("HCLOUD_TOKEN", "t"),
            ("HCLOUD_TOKEN_FILE", "/run/token"),
            ("HCLOUD_NETWORK", "1"),
        ]))
        .unwrap_err();
        assert_eq!(err.variable, "HCLOUD_TOKEN_FILE");
    }

    #[test]
    fn endpoint_override_drops_a_trailing_slash() {
        let c = Config::from_env(env(&[
            ("HCLOUD_TOKEN", "t"),
            ("HCLOUD_NETWORK", "1"),
            ("HCLOUD_ENDPOINT", "http://127.0.0.1:8080/v1/"),
            ("HCLOUD_SERVER_CACHE_MAX_AGE", "30s"),
        ]))
        .unwrap();
        assert_eq!(c.endpoint, "http://127.0.0.1:8080/v1");
        assert_eq!(c.server_cache_max_age, Duration::from_secs(30));
    }

    #[test]
    fn debug_output_never_shows_the_token() {
        let token = "x".repeat(64);
        let c = Config::new(
            TokenSource::Value(Secret::new(token.clone())),
            NetworkRef::Id(1),
        );
        let debug = format!("{c:?}");
        assert!(!debug.contains(&token), "{debug}");
        assert!(debug.contains("redacted"), "{debug}");
    }

    #[test]
    fn token_file_is_read_again_when_it_changes() {
        let dir = std::env::temp_dir().join(format!(
            "hcloud-token-test-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("token");
        std::fs::write(&path, "first\n").unwrap();
        let reader = TokenReader::new(TokenSource::File(path.clone()));
        assert_eq!(reader.token().unwrap().expose(), "first");
        // A different size is a change even when the modification time has the
        // filesystem's coarse resolution.
        std::fs::write(&path, "second-token\n").unwrap();
        assert_eq!(reader.token().unwrap().expose(), "second-token");
        std::fs::write(&path, "").unwrap();
        assert_eq!(reader.token().unwrap_err().kind, CloudErrorKind::Invalid);
        std::fs::remove_dir_all(&dir).unwrap();
        let err = reader.token().unwrap_err();
        assert!(err.message.contains("HCLOUD_TOKEN_FILE"), "{err}");
    }
}
