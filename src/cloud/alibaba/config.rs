//! The Alibaba Cloud provider's settings, read as cloud-provider-alibaba-cloud reads
//! its cloud config: a YAML (or JSON) file with a `Global` section whose keys are
//! matched without case (the peer unmarshals it with Go's `encoding/json`), and its
//! identity from the same places, in this order:
//!
//! 1. `Global.accessKeyID` and `Global.accessKeySecret`, base64-encoded as the peer
//!    stores them;
//! 2. `ALIBABA_CLOUD_ACCESS_KEY_ID` and `ALIBABA_CLOUD_ACCESS_KEY_SECRET` (with
//!    `ALIBABA_CLOUD_SECURITY_TOKEN` if set), the SDKs' names;
//! 3. `ACCESS_KEY_ID` and `ACCESS_KEY_SECRET`, the peer's names;
//! 4. RRSA: `ALIBABA_CLOUD_ROLE_ARN`, `ALIBABA_CLOUD_OIDC_PROVIDER_ARN` and
//!    `ALIBABA_CLOUD_OIDC_TOKEN_FILE`, exchanged at STS (`AssumeRoleWithOIDC`);
//! 5. the ECS instance's RAM role, from the instance metadata service
//!    (`ALIBABA_CLOUD_ECS_METADATA` names the role; else the one attached).
//!
//! Nothing here sends a request; a secret is read into a [`Secret`] and never shown.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use base64::Engine as _;
use serde_json::Value;

use crate::model::Cidr;
use crate::secret::Secret;

/// The SDKs' AccessKey variables.
pub const ENV_ACCESS_KEY_ID: &str = "ALIBABA_CLOUD_ACCESS_KEY_ID";
/// See [`ENV_ACCESS_KEY_ID`].
pub const ENV_ACCESS_KEY_SECRET: &str = "ALIBABA_CLOUD_ACCESS_KEY_SECRET";
/// An STS token to go with the SDKs' AccessKey pair.
pub const ENV_SECURITY_TOKEN: &str = "ALIBABA_CLOUD_SECURITY_TOKEN";
/// The peer's AccessKey variables.
pub const ENV_PEER_ACCESS_KEY_ID: &str = "ACCESS_KEY_ID";
/// See [`ENV_PEER_ACCESS_KEY_ID`].
pub const ENV_PEER_ACCESS_KEY_SECRET: &str = "ACCESS_KEY_SECRET";
/// RRSA (RAM Roles for Service Accounts): the role to assume.
pub const ENV_ROLE_ARN: &str = "ALIBABA_CLOUD_ROLE_ARN";
/// RRSA: the cluster's OIDC provider in RAM.
pub const ENV_OIDC_PROVIDER_ARN: &str = "ALIBABA_CLOUD_OIDC_PROVIDER_ARN";
/// RRSA: the projected service-account token, read again at every refresh.
pub const ENV_OIDC_TOKEN_FILE: &str = "ALIBABA_CLOUD_OIDC_TOKEN_FILE";
/// RRSA: the session name (default `route-controller`).
pub const ENV_ROLE_SESSION_NAME: &str = "ALIBABA_CLOUD_ROLE_SESSION_NAME";
/// The ECS RAM role's name, when the instance's is not to be discovered.
pub const ENV_ECS_METADATA: &str = "ALIBABA_CLOUD_ECS_METADATA";
/// The ECS instance metadata service: link-local, never proxied.
pub const DEFAULT_METADATA_ENDPOINT: &str = "http://100.100.100.200";
/// Custom entries a route table holds by default (the VPC quota
/// `vpc_quota_route_entrys_num`), when neither `routeEntryQuota` nor Quota Center
/// says otherwise.
pub const DEFAULT_ROUTE_ENTRY_QUOTA: usize = 200;

/// The `Global` keys this provider honours.
pub const KEYS: &[&str] = &[
    "region",
    "vpcid",
    "routeTableIDs",
    "accessKeyID",
    "accessKeySecret",
    "uid",
    // Ours, not the peer's: where the APIs are (tests, private endpoints), the quota
    // when the account's differs from the default, the budget and the TLS trust.
    "vpcEndpoint",
    "ecsEndpoint",
    "stsEndpoint",
    "quotasEndpoint",
    "metadataEndpoint",
    "routeEntryQuota",
    "requestsPerSecond",
    "burst",
    "pollInterval",
    "caFile",
];

/// The peer's `Global` keys of its other controllers (service, node, pvtz).
pub const OTHER_KEYS: &[&str] = &[
    "clusterID",
    "kubernetesClusterTag",
    "zoneid",
    "vswitchid",
    "resourceGroupID",
    "serviceMaxConcurrentReconciles",
    "serviceBackendType",
    "disablePublicSLB",
    "nodeMaxConcurrentReconciles",
    "nodeMonitorPeriod",
    "nodeAddrSyncPeriod",
    "routeMaxConcurrentReconciles",
    "privateZoneId",
    "privateZoneRecordTTL",
    "featureGates",
];

/// Where the provider's identity comes from.
#[derive(Clone, Debug)]
pub enum Credentials {
    /// A fixed AccessKey pair (and an STS token, if given).
    AccessKey {
        /// The AccessKey ID (not secret; shown in `check-config`).
        id: String,
        /// The AccessKey secret.
        secret: Secret,
        /// An STS security token that goes with a temporary pair.
        security_token: Option<Secret>,
        /// Where it was read, for `check-config`.
        origin: &'static str,
    },
    /// RRSA: the service account's OIDC token exchanged at STS for a role's keys.
    Rrsa {
        /// The role to assume.
        role_arn: String,
        /// The OIDC provider RAM trusts.
        oidc_provider_arn: String,
        /// The token file, read again at each refresh (the kubelet rotates it).
        token_file: PathBuf,
        /// `RoleSessionName`.
        session_name: String,
    },
    /// The ECS instance's RAM role, from the metadata service.
    EcsRamRole {
        /// The role's name; `None`: the one attached to the instance.
        role: Option<String>,
    },
}

impl Credentials {
    /// One line for `check-config`: where the keys come from, never a secret.
    pub fn describe(&self) -> String {
        match self {
            Credentials::AccessKey {
                id,
                origin,
                security_token,
                ..
            } => format!(
                "the AccessKey {id} from {origin}{}",
                if security_token.is_some() {
                    " with an STS token"
                } else {
                    ""
                }
            ),
            Credentials::Rrsa {
                role_arn,
                token_file,
                ..
            } => format!(
                "RRSA: role {role_arn} assumed at STS with the OIDC token in {} (read again \
                 at each refresh)",
                token_file.display()
            ),
            Credentials::EcsRamRole { role } => match role {
                Some(r) => format!("the ECS RAM role {r}, from the instance metadata service"),
                None => {
                    "the ECS instance's RAM role, from the instance metadata service".to_string()
                }
            },
        }
    }
}

/// The provider's settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// The region (`Global.region`); `None`: the instance metadata's.
    pub region: Option<String>,
    /// The VPC (`Global.vpcid`); `None`: the instance metadata's.
    pub vpc_id: Option<String>,
    /// The route tables written (`Global.routeTableIDs`, comma-separated); empty:
    /// the VPC's one table, found with `DescribeRouteTableList`.
    pub route_table_ids: Vec<String>,
    /// The identity.
    pub credentials: Credentials,
    /// The cluster's CIDRs: only entries inside them, to a node's instance, are ours.
    pub cluster_cidrs: Vec<Cidr>,
    /// The VPC API's URL (`Global.vpcEndpoint`; default `https://vpc.<region>.aliyuncs.com`).
    pub vpc_endpoint: Option<String>,
    /// The ECS API's URL (`Global.ecsEndpoint`; default `https://ecs.<region>.aliyuncs.com`).
    pub ecs_endpoint: Option<String>,
    /// STS's URL (`Global.stsEndpoint`; default `https://sts.<region>.aliyuncs.com`).
    pub sts_endpoint: Option<String>,
    /// The instance metadata service (`Global.metadataEndpoint`; default
    /// [`DEFAULT_METADATA_ENDPOINT`]).
    pub metadata_endpoint: String,
    /// Quota Center's URL (`Global.quotasEndpoint`; default
    /// `https://quotas.aliyuncs.com`).
    pub quotas_endpoint: Option<String>,
    /// Custom entries a table may hold, when `Global.routeEntryQuota` says; `None`:
    /// read from Quota Center at the first list (default 200 when that fails).
    pub route_entry_quota: Option<usize>,
    /// Requests per second for the controller to spend (`Global.requestsPerSecond`,
    /// default 10: well below the VPC API's per-account flow control).
    pub requests_per_second: f64,
    /// Burst (`Global.burst`, default 20).
    pub burst: u32,
    /// Between two reads of a table while a batch's entries are `Creating` or
    /// `Deleting` (`Global.pollInterval`, a Go duration; default 1s).
    pub poll_interval: Duration,
    /// Per request (default 30s).
    pub request_timeout: Duration,
    /// Metrics of every request.
    pub metrics: Option<std::sync::Arc<crate::metrics::Metrics>>,
    /// The CAs trusted (default: the bundled roots and the machine's store;
    /// `Global.caFile` adds one).
    pub trust: crate::Trust,
    /// Whether API requests go through a proxy (as `HTTPS_PROXY`/`NO_PROXY` say);
    /// the metadata service never does.
    pub proxying: crate::Proxying,
}

/// A setting that cannot be used, or (`outage`) a cloud that did not answer at start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The message, naming the key or variable and the fix.
    pub message: String,
    /// The cloud did not answer at start: trying again may work.
    pub outage: bool,
}

impl ConfigError {
    pub(crate) fn new(message: impl Into<String>) -> ConfigError {
        ConfigError {
            message: message.into(),
            outage: false,
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
    /// Reads the peer's cloud config (`text`, YAML or JSON; `None`: no file) and the
    /// environment (`env`). Returns the settings and a warning for each key that does
    /// not apply or is unknown.
    pub fn from_cloud_config(
        text: Option<&str>,
        cluster_cidrs: &[Cidr],
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<(Config, Vec<String>), ConfigError> {
        let global = match text {
            Some(text) => global_section(text)?,
            None => serde_json::Map::new(),
        };
        let mut warnings = Vec::new();
        let get = |key: &str| -> Result<Option<String>, ConfigError> {
            let found = global.iter().find(|(k, _)| k.eq_ignore_ascii_case(key));
            match found.map(|(_, v)| v) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.trim().to_string()).filter(|s| !s.is_empty())),
                Some(Value::Number(n)) => Ok(Some(n.to_string())),
                Some(Value::Bool(b)) => Ok(Some(b.to_string())),
                Some(_) => Err(ConfigError::new(format!(
                    "Global.{key}: expected a string or a number"
                ))),
            }
        };
        let region = get("region")?;
        let vpc_id = get("vpcid")?;
        let route_table_ids: Vec<String> = get("routeTableIDs")?
            .map(|s| {
                s.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default();
        let credentials = credentials(get("accessKeyID")?, get("accessKeySecret")?, &env)?;
        if get("uid")?.is_some() && matches!(credentials, Credentials::AccessKey { .. }) {
            warnings.push(
                "Global.uid: the peer's service-token mode runs ACK's servicetoken program, \
                 which exists only inside ACK; the AccessKey pair is used as it is"
                    .to_string(),
            );
        }
        let number = |key: &str, value: Option<String>| -> Result<Option<f64>, ConfigError> {
            value
                .map(|v| {
                    v.parse::<f64>()
                        .ok()
                        .filter(|n| n.is_finite() && *n > 0.0)
                        .ok_or_else(|| {
                            ConfigError::new(format!(
                                "Global.{key}: {v:?} is not a positive number"
                            ))
                        })
                })
                .transpose()
        };
        let quota = number("routeEntryQuota", get("routeEntryQuota")?)?;
        let rps = number("requestsPerSecond", get("requestsPerSecond")?)?;
        let burst = number("burst", get("burst")?)?;
        let poll_interval = match get("pollInterval")? {
            Some(v) => crate::duration::parse(&v)
                .map_err(|e| ConfigError::new(format!("Global.pollInterval: {e}")))?,
            None => Duration::from_secs(1),
        };
        let mut trust = crate::Trust::new("Global.caFile");
        if let Some(ca) = get("caFile")? {
            trust
                .add_ca_file(std::path::Path::new(&ca), "Global.caFile")
                .map_err(|e| ConfigError::new(format!("Global.caFile: {e}")))?;
        }
        let url = |key: &str, v: Option<String>| -> Result<Option<String>, ConfigError> {
            match v {
                Some(u) if u.starts_with("https://") || u.starts_with("http://") => {
                    Ok(Some(u.trim_end_matches('/').to_string()))
                }
                Some(u) => Err(ConfigError::new(format!(
                    "Global.{key}: {u:?} is not an http:// or https:// URL"
                ))),
                None => Ok(None),
            }
        };
        let config = Config {
            region,
            vpc_id,
            route_table_ids,
            credentials,
            cluster_cidrs: cluster_cidrs.to_vec(),
            vpc_endpoint: url("vpcEndpoint", get("vpcEndpoint")?)?,
            ecs_endpoint: url("ecsEndpoint", get("ecsEndpoint")?)?,
            sts_endpoint: url("stsEndpoint", get("stsEndpoint")?)?,
            metadata_endpoint: url("metadataEndpoint", get("metadataEndpoint")?)?
                .unwrap_or_else(|| DEFAULT_METADATA_ENDPOINT.to_string()),
            quotas_endpoint: url("quotasEndpoint", get("quotasEndpoint")?)?,
            route_entry_quota: quota.map(|q| q as usize),
            requests_per_second: rps.unwrap_or(10.0),
            burst: burst.map_or(20, |b| b as u32),
            poll_interval,
            request_timeout: Duration::from_secs(30),
            metrics: None,
            trust,
            proxying: crate::Proxying::from_process(),
        };
        warnings.extend(key_warnings(&global));
        Ok((config, warnings))
    }
}

/// The `Global` object of the file, keys as written.
fn global_section(text: &str) -> Result<serde_json::Map<String, Value>, ConfigError> {
    let doc: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(_) => serde_saphyr::from_str(text).map_err(|e| {
            ConfigError::new(format!(
                "not the peer's cloud config (YAML or JSON with a Global section): {e}"
            ))
        })?,
    };
    let Value::Object(top) = doc else {
        return Err(ConfigError::new(
            "not the peer's cloud config: expected a mapping with a Global section",
        ));
    };
    let mut warnings_free = serde_json::Map::new();
    for (key, value) in top {
        if key.eq_ignore_ascii_case("Global") {
            match value {
                Value::Object(m) => warnings_free = m,
                Value::Null => {}
                _ => return Err(ConfigError::new("Global: expected a mapping of keys")),
            }
        }
    }
    Ok(warnings_free)
}

/// One line for each key of `Global` that does not apply: the peer's other
/// controllers' keys, named as such; unknown keys with the closest known one.
fn key_warnings(global: &serde_json::Map<String, Value>) -> Vec<String> {
    let is = |list: &[&str], key: &str| list.iter().any(|k| k.eq_ignore_ascii_case(key));
    let mut warnings = Vec::new();
    for key in global.keys() {
        if is(KEYS, key) {
            continue;
        }
        if is(OTHER_KEYS, key) {
            warnings.push(format!("Global.{key} does not concern routes; ignored"));
            continue;
        }
        let hint = match crate::spelling::closest(key, KEYS.iter().chain(OTHER_KEYS).copied()) {
            Some(c) => format!("did you mean {c}?"),
            None => format!("known keys: {}", KEYS.join(", ")),
        };
        warnings.push(format!(
            "unknown key Global.{key} for --cloud-provider=alibaba; ignored ({hint})"
        ));
    }
    warnings
}

/// The identity, in the order of the module's doc.
fn credentials(
    key_id: Option<String>,
    key_secret: Option<String>,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<Credentials, ConfigError> {
    let decode = |key: &str, value: &str| -> Result<String, ConfigError> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(value.trim())
            .map_err(|_| {
                ConfigError::new(format!(
                    "Global.{key}: not base64; the peer's cloud config holds the AccessKey \
                     base64-encoded (echo -n <key> | base64)"
                ))
            })?;
        String::from_utf8(bytes)
            .map(|s| s.trim().to_string())
            .map_err(|_| ConfigError::new(format!("Global.{key}: not UTF-8 once decoded")))
    };
    match (key_id, key_secret) {
        (Some(id), Some(secret)) => {
            return Ok(Credentials::AccessKey {
                id: decode("accessKeyID", &id)?,
                secret: Secret::new(decode("accessKeySecret", &secret)?),
                security_token: None,
                origin: "the cloud config (Global.accessKeyID)",
            });
        }
        (Some(_), None) | (None, Some(_)) => {
            return Err(ConfigError::new(
                "Global.accessKeyID and Global.accessKeySecret go together: set both or neither",
            ));
        }
        (None, None) => {}
    }
    let set = |name: &str| {
        env(name)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    for (id_var, secret_var, origin) in [
        (ENV_ACCESS_KEY_ID, ENV_ACCESS_KEY_SECRET, ENV_ACCESS_KEY_ID),
        (
            ENV_PEER_ACCESS_KEY_ID,
            ENV_PEER_ACCESS_KEY_SECRET,
            ENV_PEER_ACCESS_KEY_ID,
        ),
    ] {
        match (set(id_var), set(secret_var)) {
            (Some(id), Some(secret)) => {
                return Ok(Credentials::AccessKey {
                    id,
                    secret: Secret::new(secret),
                    security_token: set(ENV_SECURITY_TOKEN).map(Secret::new),
                    origin,
                });
            }
            (Some(_), None) | (None, Some(_)) => {
                return Err(ConfigError::new(format!(
                    "{id_var} and {secret_var} go together: set both or neither"
                )));
            }
            (None, None) => {}
        }
    }
    let rrsa = [ENV_ROLE_ARN, ENV_OIDC_PROVIDER_ARN, ENV_OIDC_TOKEN_FILE].map(|v| (v, set(v)));
    if rrsa.iter().any(|(_, v)| v.is_some()) {
        let missing: Vec<&str> = rrsa
            .iter()
            .filter(|(_, v)| v.is_none())
            .map(|(n, _)| *n)
            .collect();
        if !missing.is_empty() {
            return Err(ConfigError::new(format!(
                "RRSA needs {ENV_ROLE_ARN}, {ENV_OIDC_PROVIDER_ARN} and {ENV_OIDC_TOKEN_FILE}; \
                 {} not set (ACK's pod identity webhook sets all three)",
                missing.join(", ")
            )));
        }
        let [(_, role), (_, provider), (_, file)] = rrsa;
        return Ok(Credentials::Rrsa {
            role_arn: role.unwrap_or_default(),
            oidc_provider_arn: provider.unwrap_or_default(),
            token_file: PathBuf::from(file.unwrap_or_default()),
            session_name: set(ENV_ROLE_SESSION_NAME)
                .unwrap_or_else(|| "route-controller".to_string()),
        });
    }
    Ok(Credentials::EcsRamRole {
        role: set(ENV_ECS_METADATA),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    /// Guards reading the peer's file as the peer does: keys without case, several
    /// route tables, the AccessKey pair base64-decoded, the other controllers' keys
    /// accepted with a line each and a typo answered with the key meant.
    #[test]
    fn the_peers_cloud_config_is_read_as_the_peer_reads_it() {
        let text = "Global:\n  Region: cn-hangzhou\n  vpcid: vpc-1\n  routeTableIDs: \
                    \"vtb-a, vtb-b\"\n  accessKeyID: QUtJRDE=\n  accessKeySecret: c2VjcmV0\n  \
                    clusterID: c1\n  routeTableID: vtb-x\n";
        let (c, warnings) = Config::from_cloud_config(Some(text), &[], env(&[])).unwrap();
        assert_eq!(c.region.as_deref(), Some("cn-hangzhou"));
        assert_eq!(c.vpc_id.as_deref(), Some("vpc-1"));
        assert_eq!(c.route_table_ids, ["vtb-a", "vtb-b"]);
        match &c.credentials {
            Credentials::AccessKey { id, secret, .. } => {
                assert_eq!(id, "AKID1");
                assert_eq!(secret.expose(), "secret");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(c.route_entry_quota, None);
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].contains("clusterID does not concern routes"));
        assert!(
            warnings[1].contains("did you mean routeTableIDs?"),
            "{warnings:?}"
        );
        // The secret is in no message, not even in Debug.
        assert!(!format!("{c:?}").contains("secret\""), "{c:?}");
    }

    /// Guards the order of the identity sources and the rules of each.
    #[test]
    fn the_identity_comes_from_the_first_source_set() {
        let sdk = env(&[
            (ENV_ACCESS_KEY_ID, "sdk"),
            (ENV_ACCESS_KEY_SECRET, "s"),
            (ENV_PEER_ACCESS_KEY_ID, "peer"),
            (ENV_PEER_ACCESS_KEY_SECRET, "s"),
            (ENV_ROLE_ARN, "acs:ram::1:role/r"),
        ]);
        let (c, _) = Config::from_cloud_config(None, &[], sdk).unwrap();
        assert!(matches!(c.credentials, Credentials::AccessKey { ref id, .. } if id == "sdk"));
        let peer = env(&[
            (ENV_PEER_ACCESS_KEY_ID, "peer"),
            (ENV_PEER_ACCESS_KEY_SECRET, "s"),
        ]);
        let (c, _) = Config::from_cloud_config(None, &[], peer).unwrap();
        assert!(matches!(c.credentials, Credentials::AccessKey { ref id, .. } if id == "peer"));
        let half = env(&[(ENV_ROLE_ARN, "acs:ram::1:role/r")]);
        let e = Config::from_cloud_config(None, &[], half).unwrap_err();
        assert!(e.message.contains(ENV_OIDC_TOKEN_FILE), "{e}");
        let rrsa = env(&[
            (ENV_ROLE_ARN, "acs:ram::1:role/r"),
            (ENV_OIDC_PROVIDER_ARN, "acs:ram::1:oidc-provider/p"),
            (ENV_OIDC_TOKEN_FILE, "/var/run/token"),
        ]);
        let (c, _) = Config::from_cloud_config(None, &[], rrsa).unwrap();
        assert!(matches!(c.credentials, Credentials::Rrsa { .. }));
        let (c, _) = Config::from_cloud_config(None, &[], env(&[])).unwrap();
        assert!(matches!(
            c.credentials,
            Credentials::EcsRamRole { role: None }
        ));
        let e = Config::from_cloud_config(
            Some("Global:\n  accessKeyID: '%%'\n  accessKeySecret: x\n"),
            &[],
            env(&[]),
        )
        .unwrap_err();
        assert!(e.message.contains("base64"), "{e}");
    }
}
