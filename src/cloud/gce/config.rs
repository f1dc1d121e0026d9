//! The settings of the GCE provider: `gce.conf`, the gcfg file cloud-provider-gcp reads
//! (`--cloud-config`), and the environment Google's libraries read
//! (`GOOGLE_APPLICATION_CREDENTIALS`, `GCE_METADATA_HOST`).
//!
//! gcfg is git-config's syntax: `[section]` headers, `name = value` lines, `;` and `#`
//! comments, double-quoted values with `\"`, `\\`, `\n` and `\t` escapes, a name alone
//! meaning `true`, and a multi-valued variable (`node-tags`) given once per value, a
//! blank value clearing it. Only `[global]` concerns us, as it is the only section
//! cloud-provider-gcp defines. Names are case-insensitive.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::metrics::Metrics;
use crate::secret::Secret;

/// The API cloud-provider-gcp talks to when `api-endpoint` is not set.
pub const DEFAULT_API_ENDPOINT: &str = "https://compute.googleapis.com/compute/v1/";
/// The metadata server's host on GCE; `GCE_METADATA_HOST` overrides it, as in
/// Google's own libraries.
pub const DEFAULT_METADATA_HOST: &str = "metadata.google.internal";
/// The environment variable naming a service-account key file.
pub const ENV_CREDENTIALS: &str = "GOOGLE_APPLICATION_CREDENTIALS";
/// The environment variable overriding the metadata server's host (and port).
pub const ENV_METADATA_HOST: &str = "GCE_METADATA_HOST";

/// The `[global]` names that the route provider reads: cloud-provider-gcp's, then
/// this controller's own (a bucket per rate-quota group, [`QuotaGroup::key`]).
pub const ROUTE_KEYS: &[&str] = &[
    "project-id",
    "network-project-id",
    "network-name",
    "node-tags",
    "multizone",
    "local-zone",
    "token-url",
    "token-body",
    "api-endpoint",
    "rate-quota-mutations",
    "rate-quota-lists",
    "rate-quota-reads",
    "rate-quota-operation-reads",
    "rate-quota-zonal-reads",
];

/// A group of Compute API methods that GCE counts against one rate quota ("Compute
/// Engine rate quotas", <https://cloud.google.com/compute/docs/api-rate-limits>): per
/// project, per minute, in synchronized 60 s windows, each group apart from the others.
/// The provider keeps a bucket of each group its requests fall in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum QuotaGroup {
    /// "Queries" (`compute.googleapis.com/default`), the global mutation methods:
    /// `routes.insert`, `routes.delete`. 1500 requests a minute.
    Mutations,
    /// "List requests" (`compute.googleapis.com/list_requests`), the global `*.list`
    /// methods: `routes.list`. 1500 requests a minute.
    Lists,
    /// "Read requests" (`compute.googleapis.com/read_requests`), the global `*.get`
    /// methods: `projects.get`. 1500 requests a minute.
    Reads,
    /// "Operation read requests" (`compute.googleapis.com/operation_read_requests`):
    /// `globalOperations.get`, and `globalOperations.wait` as this provider counts it
    /// (the page names `get` only; a wait reads the same operation). 1500 a minute.
    OperationReads,
    /// "Read requests" of zonal methods, counted per region ("Read requests per minute
    /// per region", as GCE's refusals name the limit): `instances.get`. Its default was
    /// not found; it is taken as the global reads' 1500 a minute.
    ZonalReads,
}

impl QuotaGroup {
    /// Every group, in the order the README's table lists them.
    pub const ALL: &'static [QuotaGroup] = &[
        QuotaGroup::Mutations,
        QuotaGroup::Lists,
        QuotaGroup::Reads,
        QuotaGroup::OperationReads,
        QuotaGroup::ZonalReads,
    ];

    /// The name of its bucket in the controller's budget and in logs.
    pub fn bucket(self) -> &'static str {
        match self {
            QuotaGroup::Mutations => "mutations",
            QuotaGroup::Lists => "lists",
            QuotaGroup::Reads => "reads",
            QuotaGroup::OperationReads => "operation-reads",
            QuotaGroup::ZonalReads => "zonal-reads",
        }
    }

    /// The `gce.conf` name that sets its bucket (`<requests per second>,<burst>`).
    pub fn key(self) -> &'static str {
        match self {
            QuotaGroup::Mutations => "rate-quota-mutations",
            QuotaGroup::Lists => "rate-quota-lists",
            QuotaGroup::Reads => "rate-quota-reads",
            QuotaGroup::OperationReads => "rate-quota-operation-reads",
            QuotaGroup::ZonalReads => "rate-quota-zonal-reads",
        }
    }

    /// The group a `gce.conf` name sets, if it is one of [`QuotaGroup::key`].
    pub fn from_key(key: &str) -> Option<QuotaGroup> {
        QuotaGroup::ALL.iter().copied().find(|g| g.key() == key)
    }

    /// GCE's default quota of the group, in requests a minute, that the default
    /// bucket is sized from. Every group our requests fall in is documented at 1500
    /// but the zonal reads, whose number was not found: the global reads' 1500 is
    /// taken for it, the neighbour's, and no other group's default is lower.
    pub fn quota_per_minute(self) -> u32 {
        match self {
            QuotaGroup::Mutations
            | QuotaGroup::Lists
            | QuotaGroup::Reads
            | QuotaGroup::OperationReads
            | QuotaGroup::ZonalReads => 1500,
        }
    }
}

/// The client-side bucket of one [`QuotaGroup`]: its refill rate and size.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QuotaBucket {
    /// The group it paces.
    pub group: QuotaGroup,
    /// Requests per second, sustained.
    pub requests_per_second: f64,
    /// Requests that may go out at once after a quiet period.
    pub burst: u32,
}

impl QuotaBucket {
    /// The default bucket of `group`: see [`default_rate_quotas`].
    pub fn default_for(group: QuotaGroup) -> QuotaBucket {
        let quota = f64::from(group.quota_per_minute());
        let burst = (quota / 5.0).floor();
        QuotaBucket {
            group,
            requests_per_second: (quota * QUOTA_MARGIN - burst) / 60.0,
            burst: burst as u32,
        }
    }

    /// The most this bucket lets out in one of GCE's 60 s windows: full at the
    /// window's start, then refilled for 60 s.
    pub fn per_window(&self) -> f64 {
        f64::from(self.burst) + 60.0 * self.requests_per_second
    }
}

/// The part of a group's per-minute quota this controller plans to spend in any one
/// window: other users of the project (the CCM's other controllers, the cluster
/// autoscaler, Terraform, the console) count against the same quota, and requests
/// whose latencies vary arrive closer together than they were sent (pages and waits
/// beyond the first are charged when answered, so a window may see a few more).
pub const QUOTA_MARGIN: f64 = 0.8;

/// The default bucket of each group, sized so that it never lets out more than
/// [`QUOTA_MARGIN`] of the group's quota in a window. GCE counts a quota per minute
/// in synchronized windows and refuses the rest of a window once it is spent, so a
/// token bucket of size S refilling at r sends at most S + 60·r in one window:
/// S + 60·r ≤ 0.8 × quota. A fifth of the quota goes to the burst and the rest to the
/// refill: for 1500 a minute, bursts of 300 and 15 a second (300 + 900 = 1200).
pub fn default_rate_quotas() -> Vec<QuotaBucket> {
    QuotaGroup::ALL
        .iter()
        .copied()
        .map(QuotaBucket::default_for)
        .collect()
}

/// The other `[global]` names of cloud-provider-gcp's `ConfigGlobal`: accepted so that
/// a CCM's `gce.conf` works unchanged, with a warning.
pub const OTHER_KEYS: &[&str] = &[
    "subnetwork-name",
    "stack-type",
    "secondary-range-name",
    "node-instance-prefix",
    "regional",
    "container-api-endpoint",
    "alpha-features",
];

/// How the provider gets its OAuth access tokens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Credentials {
    /// The metadata server's token of the instance's service account (the default
    /// on GCE).
    Metadata,
    /// A service-account key file: a JWT signed with its key (RS256) is exchanged at
    /// its `token_uri`.
    KeyFile(PathBuf),
    /// cloud-provider-gcp's alternate token source: `token-body` POSTed to
    /// `token-url`, authenticated with the metadata server's token.
    TokenUrl {
        /// Where to POST.
        url: String,
        /// What to POST (it may hold a credential, so it is never shown).
        body: Secret,
    },
    /// `token-url = nil`: no token at all (a proxy in front of the API adds one).
    None,
}

/// The GCE provider's settings. Defaults as in [`Config::default`].
#[derive(Clone, Debug)]
pub struct Config {
    /// The project of the instances (`project-id`); read from the metadata server
    /// when not set.
    pub project_id: Option<String>,
    /// The project of the network and so of its routes (`network-project-id`, a
    /// shared VPC's host project); `project_id` when not set.
    pub network_project_id: Option<String>,
    /// The network whose routes are managed (`network-name`); read from the
    /// metadata server (the instance's first interface) when not set.
    pub network_name: Option<String>,
    /// `node-tags`: parsed for compatibility; routes do not use them (the peer uses
    /// them for firewall rules).
    pub node_tags: Vec<String>,
    /// `multizone`: nodes may run in any zone of the region. A node's zone comes from
    /// its providerID either way; without one, only a single-zone cluster can find
    /// the instance (in `local_zone`).
    pub multizone: bool,
    /// `local-zone`: the zone of a node without a providerID in a single-zone cluster;
    /// read from the metadata server when needed and not set.
    pub local_zone: Option<String>,
    /// The Compute API's base URL, ending in `/compute/v1/` (`api-endpoint`).
    pub api_endpoint: String,
    /// Where tokens come from.
    pub credentials: Credentials,
    /// The metadata server's base URL (`http://metadata.google.internal`).
    pub metadata_url: String,
    /// How long one HTTP request may take. Default 30 s.
    pub request_timeout: Duration,
    /// How long an insert or delete may take, its operation followed to the end.
    /// Default 5 minutes.
    pub operation_timeout: Duration,
    /// The bucket of each rate-quota group this provider's requests fall in, spent
    /// by the controller. Default: [`default_rate_quotas`], at most 80 % of each
    /// group's default quota in any minute; `rate-quota-<group> = <per second>,<burst>`
    /// in `gce.conf` overrides one. (This replaces one bucket of 10 requests a second
    /// and bursts of 20 for every request together.)
    pub rate_quotas: Vec<QuotaBucket>,
    /// Route changes in flight at once. Default 100: GCE documents no limit of
    /// operations in flight (its rate quotas count requests a minute), and upstream's
    /// route controller sends up to 200 creates at once against it; each change in
    /// flight holds a worker thread and a connection in its operation's long-poll
    /// wait, so this keeps half of that while 100 new nodes still go in one round.
    /// `--concurrent-route-operations` caps it lower.
    pub mutations_at_once: usize,
    /// Where to count HTTP requests, if anywhere.
    pub metrics: Option<Arc<Metrics>>,
    /// The CAs trusted and the certificate presented (default: the bundled roots and
    /// the machine's store; a private CA through `SSL_CERT_FILE`).
    pub trust: crate::Trust,
    /// Whether requests go through a proxy (default: as `HTTPS_PROXY`, `HTTP_PROXY`
    /// and `NO_PROXY` say, as every Kubernetes component reads them).
    pub proxying: crate::Proxying,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            project_id: None,
            network_project_id: None,
            network_name: None,
            node_tags: Vec::new(),
            multizone: false,
            local_zone: None,
            api_endpoint: DEFAULT_API_ENDPOINT.to_string(),
            credentials: Credentials::Metadata,
            metadata_url: format!("http://{DEFAULT_METADATA_HOST}"),
            request_timeout: Duration::from_secs(30),
            operation_timeout: Duration::from_secs(300),
            rate_quotas: default_rate_quotas(),
            mutations_at_once: 100,
            metrics: None,
            trust: crate::Trust::new("SSL_CERT_FILE"),
            proxying: crate::Proxying::from_process(),
        }
    }
}

/// A setting that cannot be used; the message names the file, line or variable and
/// the fix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// What is wrong and how to fix it.
    pub message: String,
    /// The metadata server or the API did not answer: trying again may work.
    pub outage: bool,
}

impl ConfigError {
    pub(crate) fn new(message: impl Into<String>) -> ConfigError {
        ConfigError {
            message: message.into(),
            outage: false,
        }
    }

    pub(crate) fn outage(message: impl Into<String>) -> ConfigError {
        ConfigError {
            message: message.into(),
            outage: true,
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ConfigError {}

impl Config {
    /// The settings of `gce.conf` (its text, `None` without `--cloud-config`) and of
    /// the environment (`env`), with warnings for the log: names of other
    /// controllers, sections other than `[global]`. An unknown name is an error: a
    /// typo would otherwise be ignored in silence.
    pub fn from_gce_conf(
        text: Option<&str>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<(Config, Vec<String>), ConfigError> {
        let mut config = Config::default();
        let mut warnings = Vec::new();
        let mut token_url = None;
        let mut token_body = None;
        let mut ignored_sections = std::collections::BTreeSet::new();
        for entry in parse_gcfg(text.unwrap_or(""))? {
            if entry.section != "global" {
                // One line for the section, not one for each of its names.
                if ignored_sections.insert(entry.section.clone()) {
                    warnings.push(format!(
                        "gce.conf line {}: section [{}] does not concern routes; ignored",
                        entry.line, entry.section
                    ));
                }
                continue;
            }
            let value = entry.value.clone();
            let nonempty = || value.clone().filter(|v| !v.trim().is_empty());
            match entry.name.as_str() {
                "project-id" => config.project_id = nonempty(),
                "network-project-id" => config.network_project_id = nonempty(),
                "network-name" => config.network_name = nonempty(),
                "local-zone" => config.local_zone = nonempty(),
                "api-endpoint" => {
                    if let Some(v) = nonempty() {
                        config.api_endpoint = v;
                    }
                }
                "token-url" => token_url = nonempty(),
                "token-body" => token_body = value.map(Secret::new),
                "node-tags" => match nonempty() {
                    Some(tag) => config.node_tags.push(tag),
                    // gcfg: a blank value clears a multi-valued variable.
                    None => config.node_tags.clear(),
                },
                "multizone" => config.multizone = boolean(&entry)?,
                name if QuotaGroup::from_key(name).is_some() => {
                    rate_quota(&entry, &mut config.rate_quotas, &mut warnings)?;
                }
                name if OTHER_KEYS.contains(&name) => warnings.push(format!(
                    "gce.conf line {}: {name} does not concern routes; ignored",
                    entry.line
                )),
                // cloud-provider-gcp reads the file with gcfg.FatalOnly, which lets an
                // unknown name pass; a warning keeps a typo from passing in silence.
                name => {
                    let known = ROUTE_KEYS.iter().chain(OTHER_KEYS).copied();
                    warnings.push(match crate::spelling::closest(name, known) {
                        Some(c) => format!(
                            "gce.conf line {}: unknown name {name:?} in [global]; ignored (did \
                             you mean {c}?)",
                            entry.line
                        ),
                        None => format!(
                            "gce.conf line {}: unknown name {name:?} in [global]; ignored (the \
                             route controller reads {})",
                            entry.line,
                            ROUTE_KEYS.join(", ")
                        ),
                    });
                }
            }
        }
        if !config.api_endpoint.ends_with('/') {
            config.api_endpoint.push('/');
        }
        if !config.api_endpoint.starts_with("http://")
            && !config.api_endpoint.starts_with("https://")
        {
            return Err(ConfigError::new(format!(
                "gce.conf: api-endpoint {:?} is not an http(s) URL (e.g. {DEFAULT_API_ENDPOINT})",
                config.api_endpoint
            )));
        }
        config.credentials = match (token_url, env(ENV_CREDENTIALS).filter(|f| !f.is_empty())) {
            (Some(url), _) if url == "nil" => Credentials::None,
            (Some(url), _) => Credentials::TokenUrl {
                url,
                body: token_body.unwrap_or_else(|| Secret::new("")),
            },
            (None, Some(file)) => Credentials::KeyFile(PathBuf::from(file)),
            (None, None) => Credentials::Metadata,
        };
        if let Some(host) = env(ENV_METADATA_HOST).filter(|h| !h.is_empty()) {
            config.metadata_url = format!("http://{host}");
        }
        Ok((config, warnings))
    }
}

/// `rate-quota-<group> = <requests per second>,<burst>`: sets that group's bucket,
/// with a warning when it may spend more than the group's default quota in a minute
/// (right only where GCE raised the project's quota).
fn rate_quota(
    entry: &Entry,
    buckets: &mut Vec<QuotaBucket>,
    warnings: &mut Vec<String>,
) -> Result<(), ConfigError> {
    let Some(group) = QuotaGroup::from_key(&entry.name) else {
        return Ok(());
    };
    let default = QuotaBucket::default_for(group);
    let value = entry.value.as_deref().unwrap_or("");
    let parsed = value.split_once(',').and_then(|(rate, burst)| {
        let rate: f64 = rate.trim().parse().ok()?;
        let burst: u32 = burst.trim().parse().ok()?;
        (rate.is_finite() && rate > 0.0 && burst > 0).then_some((rate, burst))
    });
    let Some((requests_per_second, burst)) = parsed else {
        return Err(ConfigError::new(format!(
            "gce.conf line {}: {} = {value:?} is not <requests per second>,<burst> with both \
             positive (the default is {},{}: at most 80 % of GCE's default quota of {} \
             requests a minute)",
            entry.line,
            entry.name,
            default.requests_per_second,
            default.burst,
            group.quota_per_minute()
        )));
    };
    let bucket = QuotaBucket {
        group,
        requests_per_second,
        burst,
    };
    let quota = group.quota_per_minute();
    if bucket.per_window() > f64::from(quota) {
        warnings.push(format!(
            "gce.conf line {}: {} = {value} may send {} requests in a minute, more than GCE's \
             default quota of {quota}; right only if the project's quota was raised",
            entry.line,
            entry.name,
            bucket.per_window()
        ));
    }
    match buckets.iter_mut().find(|b| b.group == group) {
        Some(b) => *b = bucket,
        None => buckets.push(bucket),
    }
    Ok(())
}

fn boolean(entry: &Entry) -> Result<bool, ConfigError> {
    // gcfg: a name alone is true.
    let Some(v) = entry.value.as_deref() else {
        return Ok(true);
    };
    match v.trim().to_ascii_lowercase().as_str() {
        "true" | "yes" | "on" | "1" => Ok(true),
        "false" | "no" | "off" | "0" | "" => Ok(false),
        _ => Err(ConfigError::new(format!(
            "gce.conf line {}: {} = {v:?} is not a boolean (true or false)",
            entry.line, entry.name
        ))),
    }
}

/// One `name = value` of a gcfg file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    /// The section, lower-cased (`global`).
    pub section: String,
    /// The subsection, as given (`[ServiceOverride "1"]` gives `1`).
    pub subsection: Option<String>,
    /// The name, lower-cased.
    pub name: String,
    /// The value; `None` for a name alone (a boolean `true`).
    pub value: Option<String>,
    /// The line, from 1, for messages.
    pub line: usize,
}

/// Parses gcfg text into its entries, in order. Errors name the line.
pub(crate) fn parse_gcfg(text: &str) -> Result<Vec<Entry>, ConfigError> {
    let mut entries = Vec::new();
    let mut section: Option<(String, Option<String>)> = None;
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with(';') || trimmed.starts_with('#') {
            continue;
        }
        if let Some(rest) = trimmed.strip_prefix('[') {
            let header = strip_comment(rest);
            let Some(inner) = header.trim_end().strip_suffix(']') else {
                return Err(ConfigError::new(format!(
                    "gce.conf line {line}: section header {trimmed:?} lacks its ']'"
                )));
            };
            let name = inner.split_whitespace().next().unwrap_or("");
            if name.is_empty() {
                return Err(ConfigError::new(format!(
                    "gce.conf line {line}: empty section name"
                )));
            }
            let subsection = inner[name.len()..].trim();
            let subsection =
                (!subsection.is_empty()).then(|| subsection.trim_matches('"').to_string());
            section = Some((name.to_ascii_lowercase(), subsection));
            continue;
        }
        let Some((section, subsection)) = section.clone() else {
            return Err(ConfigError::new(format!(
                "gce.conf line {line}: {trimmed:?} comes before any section; put it under [global]"
            )));
        };
        let (name, value) = match trimmed.split_once('=') {
            Some((n, v)) => (n.trim(), Some(unquote(v, line)?)),
            None => (strip_comment(trimmed).trim(), None),
        };
        let valid = !name.is_empty()
            && name.starts_with(|c: char| c.is_ascii_alphabetic())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
        if !valid {
            return Err(ConfigError::new(format!(
                "gce.conf line {line}: {name:?} is not a variable name (letters, digits, '-')"
            )));
        }
        entries.push(Entry {
            section,
            subsection,
            name: name.to_ascii_lowercase(),
            value,
            line,
        });
    }
    Ok(entries)
}

/// The part of a line before an unquoted `;` or `#`.
fn strip_comment(s: &str) -> &str {
    s.find([';', '#']).map_or(s, |i| &s[..i])
}

/// A gcfg value: unquoted parts trimmed and ended by a comment, quoted parts kept as
/// they are with their escapes resolved.
fn unquote(raw: &str, line: usize) -> Result<String, ConfigError> {
    let mut out = String::new();
    let mut quoted = false;
    // Whitespace outside quotes is kept only between words, as gcfg does.
    let mut pending_space = false;
    let mut chars = raw.trim().chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => quoted = !quoted,
            '\\' => {
                let escaped = match chars.next() {
                    Some('"') => '"',
                    Some('\\') => '\\',
                    Some('n') => '\n',
                    Some('t') => '\t',
                    Some('b') => '\u{8}',
                    other => {
                        return Err(ConfigError::new(format!(
                            "gce.conf line {line}: unknown escape \\{} in a value",
                            other.map(String::from).unwrap_or_default()
                        )));
                    }
                };
                if pending_space {
                    out.push(' ');
                    pending_space = false;
                }
                out.push(escaped);
            }
            ';' | '#' if !quoted => break,
            c if c.is_whitespace() && !quoted => pending_space = !out.is_empty(),
            c => {
                if pending_space {
                    out.push(' ');
                    pending_space = false;
                }
                out.push(c);
            }
        }
    }
    if quoted {
        return Err(ConfigError::new(format!(
            "gce.conf line {line}: a value's quote is not closed"
        )));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GKE_STYLE: &str = r#"
[global]
project-id = my-project
network-project-id = host-project ; a shared VPC
network-name = "k8s net"
node-tags = k8s-node
node-tags = k8s-extra # two tags
multizone = true
token-url = https://example.com/token
token-body = "{\"secret\": 1}"
subnetwork-name = nodes
api-endpoint = http://127.0.0.1:1/compute/v1
"#;

    #[test]
    fn a_gce_conf_sets_every_route_field_and_repeats_collect() {
        let (c, warnings) = Config::from_gce_conf(Some(GKE_STYLE), |_| None).unwrap();
        assert_eq!(c.project_id.as_deref(), Some("my-project"));
        assert_eq!(c.network_project_id.as_deref(), Some("host-project"));
        assert_eq!(c.network_name.as_deref(), Some("k8s net"));
        assert_eq!(c.node_tags, ["k8s-node", "k8s-extra"]);
        assert!(c.multizone);
        assert_eq!(c.api_endpoint, "http://127.0.0.1:1/compute/v1/");
        match &c.credentials {
            Credentials::TokenUrl { url, body } => {
                assert_eq!(url, "https://example.com/token");
                assert_eq!(body.expose(), "{\"secret\": 1}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("subnetwork-name"), "{warnings:?}");
    }

    #[test]
    fn credentials_follow_token_url_then_the_key_file_then_the_metadata_server() {
        let env = |k: &str| (k == ENV_CREDENTIALS).then(|| "/k.json".to_string());
        let (c, _) = Config::from_gce_conf(Some("[Global]\nproject-id=p\n"), env).unwrap();
        assert_eq!(c.credentials, Credentials::KeyFile("/k.json".into()));
        let (c, _) = Config::from_gce_conf(None, |_| None).unwrap();
        assert_eq!(c.credentials, Credentials::Metadata);
        assert_eq!(c.metadata_url, "http://metadata.google.internal");
        let (c, _) = Config::from_gce_conf(Some("[global]\ntoken-url = nil"), env).unwrap();
        assert_eq!(c.credentials, Credentials::None);
        let host = |k: &str| (k == ENV_METADATA_HOST).then(|| "127.0.0.1:9".to_string());
        let (c, _) = Config::from_gce_conf(None, host).unwrap();
        assert_eq!(c.metadata_url, "http://127.0.0.1:9");
    }

    #[test]
    fn gcfg_rules_blank_values_clear_lists_and_a_name_alone_is_true() {
        let text = "[global]\nnode-tags = a\nnode-tags =\nnode-tags = b\nmultizone\n";
        let (c, _) = Config::from_gce_conf(Some(text), |_| None).unwrap();
        assert_eq!(c.node_tags, ["b"]);
        assert!(c.multizone);
    }

    #[test]
    fn mistakes_name_their_line_and_the_fix() {
        let err = |text: &str| {
            Config::from_gce_conf(Some(text), |_| None)
                .unwrap_err()
                .message
        };
        assert!(err("project-id = p").contains("put it under [global]"));
        assert!(err("[global\n").contains("lacks its ']'"));
        assert!(err("[global]\nnetwork-name = \"open").contains("quote is not closed"));
        assert!(err("[global]\nmultizone = maybe").contains("not a boolean"));
        assert!(err("[global]\napi-endpoint = ftp://x/").contains("not an http(s) URL"));
    }

    /// cloud-provider-gcp reads gce.conf with gcfg.FatalOnly: an unknown name passes
    /// (its TestExtraKeyInConfig); here it also gives a warning naming the closest.
    #[test]
    fn an_unknown_name_is_a_warning_naming_the_closest_as_the_peer_lets_it_pass() {
        let text = "[Global]\nproject-id = my-project\nunknown-key = abc\nnetwork-name = \
                    my-network\n   ";
        let (c, w) = Config::from_gce_conf(Some(text), |_| None).unwrap();
        assert_eq!(c.project_id.as_deref(), Some("my-project"));
        assert_eq!(c.network_name.as_deref(), Some("my-network"));
        assert_eq!(w.len(), 1);
        assert!(
            w[0].contains("line 3: unknown name \"unknown-key\""),
            "{w:?}"
        );
        let (_, w) = Config::from_gce_conf(Some("[global]\nproject-idd = p"), |_| None).unwrap();
        assert!(w[0].contains("did you mean project-id?"), "{w:?}");
    }

    /// cloud-provider-gcp's TestReadConfigFile, whole: what concerns routes is read,
    /// the rest accepted with a line each.
    #[test]
    fn the_peers_own_config_file_test_reads_the_same() {
        let text = "[Global]\ntoken-url = my-token-url\ntoken-body = my-token-body\n\
                    project-id = my-project\nnetwork-project-id = my-network-project\n\
                    network-name = my-network\nsubnetwork-name = my-subnetwork\n\
                    secondary-range-name = my-secondary-range\nnode-tags = my-node-tag1\n\
                    node-instance-prefix = my-prefix\nmultizone = true\nregional = true\n   ";
        let (c, w) = Config::from_gce_conf(Some(text), |_| None).unwrap();
        assert_eq!(c.project_id.as_deref(), Some("my-project"));
        assert_eq!(c.network_project_id.as_deref(), Some("my-network-project"));
        assert_eq!(c.network_name.as_deref(), Some("my-network"));
        assert_eq!(c.node_tags, ["my-node-tag1"]);
        assert!(c.multizone);
        assert_eq!(
            c.credentials,
            Credentials::TokenUrl {
                url: "my-token-url".into(),
                body: Secret::new("my-token-body"),
            }
        );
        let ignored: Vec<&str> = w.iter().filter_map(|w| w.split(": ").nth(1)).collect();
        assert_eq!(
            ignored,
            [
                "subnetwork-name does not concern routes; ignored",
                "secondary-range-name does not concern routes; ignored",
                "node-instance-prefix does not concern routes; ignored",
                "regional does not concern routes; ignored",
            ]
        );
    }

    #[test]
    fn other_sections_are_ignored_with_a_warning() {
        let (_, warnings) = Config::from_gce_conf(
            Some("[global]\n[LoadBalancer \"x\"]\nfoo = 1\nbar = 2\n"),
            |_| None,
        )
        .unwrap();
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].contains("[loadbalancer]"), "{warnings:?}");
    }
}
