//! The Azure provider's settings: the `azure.json` that cloud-provider-azure reads
//! (`--cloud-config`), the workload-identity variables its webhook injects, and the
//! cloud's endpoints (a named cloud, or an Azure Stack environment file).
//!
//! Only the keys that concern routes are read; every other key of a CCM's file is
//! accepted and ignored, so that the same file serves both. Field names and their
//! precedence follow cloud-provider-azure (`pkg/provider/config/azure.go`,
//! `pkg/azclient/{arm_conf,auth_conf,auth,cloud}.go`), read from its code:
//! workload identity first, then managed identity, then a client secret.
//!
//! Nothing here logs or formats a secret; errors name the key or variable to fix.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use crate::metrics::Metrics;
use crate::secret::Secret;

/// The variable naming an Azure Stack environment file (cloud-provider-azure's).
pub const ENV_ENVIRONMENT_FILEPATH: &str = "AZURE_ENVIRONMENT_FILEPATH";
/// Workload identity: the projected service-account token (set by the webhook).
pub const ENV_FEDERATED_TOKEN_FILE: &str = "AZURE_FEDERATED_TOKEN_FILE";
/// Workload identity: the identity's client ID (set by the webhook).
pub const ENV_CLIENT_ID: &str = "AZURE_CLIENT_ID";
/// Workload identity: the tenant (set by the webhook).
pub const ENV_TENANT_ID: &str = "AZURE_TENANT_ID";
/// Workload identity: the authority host (set by the webhook).
pub const ENV_AUTHORITY_HOST: &str = "AZURE_AUTHORITY_HOST";
/// A client secret given outside the file, as cloud-provider-azure accepts it.
pub const ENV_CLIENT_SECRET: &str = "AZURE_CLIENT_SECRET";
/// Where the instance metadata service answers (default `http://169.254.169.254`):
/// ours, for tests and for nodes that reach IMDS through a proxy.
pub const ENV_IMDS_ENDPOINT: &str = "ROUTE_CONTROLLER_AZURE_IMDS_ENDPOINT";

/// The routes a route table may hold unless `routeTableRouteLimit` says otherwise:
/// Azure's documented limit, "User-defined routes per route table: 1,000"
/// (learn.microsoft.com/azure/azure-resource-manager/management/
/// azure-subscription-service-limits, Azure networking limits; raised from 400 in
/// 2026, Azure update 562695).
///
/// A lower real limit (an older subscription, Azure Stack Hub) is set with the key.
/// The table is written whole, and this provider never writes more routes than the
/// limit (the creates beyond it are held with `RouteTableFull`); Azure's code for a
/// table over its limit is in none of its API definitions, so a limit set too high
/// shows as the PUT's 400 with ARM's own message on the nodes of the batch.
pub const DEFAULT_ROUTE_TABLE_LIMIT: usize = 1000;

/// The keys of `azure.json` this provider reads (for `--cloud-config` checks).
pub const KEYS: &[&str] = &[
    "cloud",
    "tenantId",
    "subscriptionId",
    "resourceGroup",
    "location",
    "vnetName",
    "vnetResourceGroup",
    "routeTableName",
    "routeTableResourceGroup",
    "aadClientId",
    "aadClientSecret",
    "useManagedIdentityExtension",
    "userAssignedIdentityID",
    "aadFederatedTokenFile",
    "useFederatedWorkloadIdentityExtension",
    "routeTableRouteLimit",
];

/// A wrong or missing setting, naming the key or variable and the fix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The `azure.json` key or environment variable to fix.
    pub key: &'static str,
    /// What is wrong and how to fix it.
    pub message: String,
    /// Not a wrong setting but Azure unreachable or failing: worth trying again.
    pub outage: bool,
}

impl ConfigError {
    /// An error about `key`.
    pub fn new(key: &'static str, message: impl Into<String>) -> ConfigError {
        ConfigError {
            key,
            message: message.into(),
            outage: false,
        }
    }

    /// Azure could not be reached or failed at start; `key` is where it is configured.
    pub fn outage(key: &'static str, message: impl Into<String>) -> ConfigError {
        ConfigError {
            outage: true,
            ..ConfigError::new(key, message)
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "azure: {}: {}", self.key, self.message)
    }
}

impl std::error::Error for ConfigError {}

/// Where the cloud answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoints {
    /// The cloud's name as given (`AzurePublicCloud`, …).
    pub name: String,
    /// Azure Resource Manager, e.g. `https://management.azure.com`, without the
    /// trailing slash.
    pub resource_manager: String,
    /// Microsoft Entra ID (the authority host), e.g. `https://login.microsoftonline.com`.
    pub authority: String,
    /// The token audience of Resource Manager (the resource of a managed-identity
    /// token; `<audience>/.default` is the scope of the others).
    pub audience: String,
}

impl Endpoints {
    /// The endpoints of a named cloud, as cloud-provider-azure names them (case does
    /// not matter; empty is the public cloud). `AzureStackCloud` has none of its own.
    pub fn named(name: &str) -> Option<Endpoints> {
        let (rm, authority) = match name.to_ascii_uppercase().as_str() {
            "" | "AZUREPUBLICCLOUD" | "AZURECLOUD" => (
                "https://management.azure.com",
                "https://login.microsoftonline.com",
            ),
            "AZURECHINACLOUD" => (
                "https://management.chinacloudapi.cn",
                "https://login.chinacloudapi.cn",
            ),
            "AZUREUSGOVERNMENTCLOUD" | "AZUREUSGOVERNMENT" => (
                "https://management.usgovcloudapi.net",
                "https://login.microsoftonline.us",
            ),
            _ => return None,
        };
        Some(Endpoints {
            name: if name.is_empty() {
                "AzurePublicCloud".into()
            } else {
                name.into()
            },
            resource_manager: rm.into(),
            authority: authority.into(),
            audience: format!("{rm}/"),
        })
    }

    /// The endpoints of an Azure Stack environment file (the JSON that
    /// `AZURE_ENVIRONMENT_FILEPATH` names): `resourceManagerEndpoint`,
    /// `activeDirectoryEndpoint` and, if given, `tokenAudience`.
    pub fn from_environment_file(name: &str, text: &str) -> Result<Endpoints, String> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct EnvironmentFile {
            #[serde(default)]
            resource_manager_endpoint: String,
            #[serde(default)]
            active_directory_endpoint: String,
            #[serde(default)]
            token_audience: String,
        }
        let file: EnvironmentFile =
            serde_json::from_str(text).map_err(|e| format!("not the JSON expected: {e}"))?;
        let trim = |s: &str| s.trim().trim_end_matches('/').to_string();
        let rm = trim(&file.resource_manager_endpoint);
        let authority = trim(&file.active_directory_endpoint);
        if rm.is_empty() || authority.is_empty() {
            return Err(
                "resourceManagerEndpoint and activeDirectoryEndpoint must both be set".into(),
            );
        }
        let audience = match file.token_audience.trim() {
            "" => format!("{rm}/"),
            a => a.to_string(),
        };
        Ok(Endpoints {
            name: name.into(),
            resource_manager: rm,
            authority,
            audience,
        })
    }
}

/// How the provider signs in.
#[derive(Clone, PartialEq, Eq)]
pub enum Identity {
    /// A service principal with a secret (`aadClientId`, `aadClientSecret`).
    ClientSecret {
        /// The application's client ID.
        client_id: String,
        /// Its secret.
        secret: Secret,
    },
    /// The VM's managed identity through IMDS (`useManagedIdentityExtension`); a
    /// user-assigned one when `client_id` is given (`userAssignedIdentityID`).
    ManagedIdentity {
        /// The user-assigned identity's client ID; `None`: the system-assigned one.
        client_id: Option<String>,
    },
    /// Workload identity: a projected service-account token exchanged for an Entra
    /// token (`AZURE_FEDERATED_TOKEN_FILE`, or `aadFederatedTokenFile` with
    /// `useFederatedWorkloadIdentityExtension`).
    WorkloadIdentity {
        /// The identity's client ID (`AZURE_CLIENT_ID`, else `aadClientId`).
        client_id: String,
        /// The file holding the service-account token; re-read for every exchange,
        /// since the kubelet rotates it.
        token_file: PathBuf,
    },
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Identity::ClientSecret { client_id, secret } => f
                .debug_struct("ClientSecret")
                .field("client_id", client_id)
                .field("secret", secret)
                .finish(),
            Identity::ManagedIdentity { client_id } => f
                .debug_struct("ManagedIdentity")
                .field("client_id", client_id)
                .finish(),
            Identity::WorkloadIdentity {
                client_id,
                token_file,
            } => f
                .debug_struct("WorkloadIdentity")
                .field("client_id", client_id)
                .field("token_file", token_file)
                .finish(),
        }
    }
}

impl Identity {
    /// A short description for the start-up log line.
    pub fn describe(&self) -> String {
        match self {
            Identity::ClientSecret { client_id, .. } => {
                format!("service principal {client_id} (client secret)")
            }
            Identity::ManagedIdentity { client_id: None } => {
                "the VM's system-assigned managed identity".into()
            }
            Identity::ManagedIdentity {
                client_id: Some(id),
            } => format!("user-assigned managed identity {id}"),
            Identity::WorkloadIdentity {
                client_id,
                token_file,
            } => format!(
                "workload identity {client_id} (token file {})",
                token_file.display()
            ),
        }
    }
}

/// The provider's settings.
#[derive(Clone)]
pub struct Config {
    /// Where the cloud answers.
    pub endpoints: Endpoints,
    /// `tenantId` (or `AZURE_TENANT_ID` for workload identity).
    pub tenant_id: String,
    /// `subscriptionId`.
    pub subscription_id: String,
    /// `resourceGroup`: the cluster's resource group.
    pub resource_group: String,
    /// `routeTableName`.
    pub route_table_name: String,
    /// `routeTableResourceGroup` (default: `resourceGroup`).
    pub route_table_resource_group: String,
    /// `location`, for log lines only (the table exists already).
    pub location: String,
    /// How the provider signs in.
    pub identity: Identity,
    /// `routeTableRouteLimit` (ours; default [`DEFAULT_ROUTE_TABLE_LIMIT`]).
    pub route_table_limit: usize,
    /// The instance metadata service ([`ENV_IMDS_ENDPOINT`]).
    pub imds_endpoint: String,
    /// How long one HTTP request may take (default 30 s).
    pub request_timeout: Duration,
    /// Between two polls of a long-running operation when Azure does not say
    /// (`Retry-After`); default 2 s.
    pub poll_interval: Duration,
    /// How long a route-table write may run before it counts as lost (default 3 min).
    pub operation_timeout: Duration,
    /// Requests per second declared to the controller (default 5: half of ARM's write
    /// refill of 10 a second per subscription and principal, shared with the CCM's
    /// load-balancer and node controllers).
    pub rate_limit_per_second: f64,
    /// Requests at once after a quiet period (default 20, a tenth of ARM's bucket).
    pub rate_limit_burst: u32,
    /// The `User-Agent` of every request.
    pub user_agent: String,
    /// Where the provider records its HTTP requests, if anywhere.
    pub metrics: Option<Arc<Metrics>>,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("endpoints", &self.endpoints)
            .field("tenant_id", &self.tenant_id)
            .field("subscription_id", &self.subscription_id)
            .field("route_table", &self.route_table_id())
            .field("identity", &self.identity)
            .field("route_table_limit", &self.route_table_limit)
            .finish_non_exhaustive()
    }
}

/// The keys read from `azure.json`. Unknown keys are allowed: a CCM's file has many.
#[derive(Deserialize, Default)]
#[serde(default)]
struct File {
    cloud: String,
    #[serde(rename = "tenantId")]
    tenant_id: String,
    #[serde(rename = "subscriptionId")]
    subscription_id: String,
    #[serde(rename = "resourceGroup")]
    resource_group: String,
    location: String,
    #[serde(rename = "routeTableName")]
    route_table_name: String,
    #[serde(rename = "routeTableResourceGroup")]
    route_table_resource_group: String,
    #[serde(rename = "aadClientId")]
    aad_client_id: String,
    #[serde(rename = "aadClientSecret")]
    aad_client_secret: String,
    #[serde(rename = "useManagedIdentityExtension")]
    use_managed_identity_extension: bool,
    #[serde(rename = "userAssignedIdentityID")]
    user_assigned_identity_id: String,
    #[serde(rename = "aadFederatedTokenFile")]
    aad_federated_token_file: String,
    #[serde(rename = "useFederatedWorkloadIdentityExtension")]
    use_federated_workload_identity_extension: bool,
    #[serde(rename = "routeTableRouteLimit")]
    route_table_route_limit: Option<u64>,
}

impl Config {
    /// Reads `azure.json` (`text`) with the variables of `env` (the process
    /// environment in the binary, a map in tests). Every error names its key.
    pub fn parse(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        // cloud-provider-azure reads the file as JSON or YAML (its config loader); a
        // file that is neither is reported with the JSON error, the usual form.
        let file: File = match serde_json::from_str(text) {
            Ok(f) => f,
            Err(json) => serde_saphyr::from_str(text).map_err(|_| {
                ConfigError::new(
                    "--cloud-config",
                    format!(
                        "neither the JSON nor the YAML of an azure.json ({json}); \
                         cloud-provider-azure's file is read as is"
                    ),
                )
            })?,
        };
        let var = |k: &str| env(k).filter(|v| !v.trim().is_empty());
        let required = |key: &'static str, value: &str| {
            if value.trim().is_empty() {
                Err(ConfigError::new(
                    key,
                    format!(
                        "missing; set \"{key}\" in azure.json (as cloud-provider-azure reads it)"
                    ),
                ))
            } else {
                Ok(value.trim().to_string())
            }
        };
        let subscription_id = required("subscriptionId", &file.subscription_id)?;
        let resource_group = required("resourceGroup", &file.resource_group)?;
        let route_table_name = required("routeTableName", &file.route_table_name)?;
        let route_table_resource_group = match file.route_table_resource_group.trim() {
            "" => resource_group.clone(),
            rg => rg.to_string(),
        };
        let mut endpoints = endpoints(&file.cloud, &var)?;
        let identity = identity(&file, &var)?;
        let tenant_id = match (&identity, var(ENV_TENANT_ID)) {
            (Identity::WorkloadIdentity { .. }, Some(t)) => t,
            _ => file.tenant_id.trim().to_string(),
        };
        if tenant_id.is_empty() && !matches!(identity, Identity::ManagedIdentity { .. }) {
            return Err(ConfigError::new(
                "tenantId",
                "missing; a client secret or workload identity signs in to a tenant: set \
                 \"tenantId\" in azure.json (or AZURE_TENANT_ID)",
            ));
        }
        if let (Identity::WorkloadIdentity { .. }, Some(host)) =
            (&identity, var(ENV_AUTHORITY_HOST))
        {
            endpoints.authority = host.trim().trim_end_matches('/').to_string();
        }
        let route_table_limit = match file.route_table_route_limit {
            None => DEFAULT_ROUTE_TABLE_LIMIT,
            Some(0) => {
                return Err(ConfigError::new(
                    "routeTableRouteLimit",
                    format!(
                        "0 routes; give the routes the table may hold (default \
                         {DEFAULT_ROUTE_TABLE_LIMIT})"
                    ),
                ));
            }
            Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
        };
        Ok(Config {
            endpoints,
            tenant_id,
            subscription_id,
            resource_group,
            route_table_name,
            route_table_resource_group,
            location: file.location.trim().to_string(),
            identity,
            route_table_limit,
            imds_endpoint: var(ENV_IMDS_ENDPOINT)
                .map(|e| e.trim().trim_end_matches('/').to_string())
                .unwrap_or_else(|| "http://169.254.169.254".into()),
            request_timeout: Duration::from_secs(30),
            poll_interval: Duration::from_secs(2),
            operation_timeout: Duration::from_secs(180),
            rate_limit_per_second: 5.0,
            rate_limit_burst: 20,
            user_agent: format!("route-controller/{}", env!("CARGO_PKG_VERSION")),
            metrics: None,
        })
    }

    /// The route table's resource ID.
    pub fn route_table_id(&self) -> String {
        format!(
            "/subscriptions/{}/resourceGroups/{}/providers/Microsoft.Network/routeTables/{}",
            self.subscription_id, self.route_table_resource_group, self.route_table_name
        )
    }
}

/// The cloud's endpoints: a named cloud, or `AzureStackCloud` from its file.
fn endpoints(cloud: &str, var: &dyn Fn(&str) -> Option<String>) -> Result<Endpoints, ConfigError> {
    let cloud = cloud.trim();
    if cloud.eq_ignore_ascii_case("AzureStackCloud") {
        let Some(path) = var(ENV_ENVIRONMENT_FILEPATH) else {
            return Err(ConfigError::new(
                ENV_ENVIRONMENT_FILEPATH,
                "\"cloud\": \"AzureStackCloud\" needs an environment file: set \
                 AZURE_ENVIRONMENT_FILEPATH to the JSON that names resourceManagerEndpoint \
                 and activeDirectoryEndpoint",
            ));
        };
        let text = std::fs::read_to_string(&path).map_err(|e| {
            ConfigError::new(
                ENV_ENVIRONMENT_FILEPATH,
                format!("cannot read the environment file {path}: {e}"),
            )
        })?;
        return Endpoints::from_environment_file(cloud, &text).map_err(|e| {
            ConfigError::new(
                ENV_ENVIRONMENT_FILEPATH,
                format!("environment file {path}: {e}"),
            )
        });
    }
    Endpoints::named(cloud).ok_or_else(|| {
        ConfigError::new(
            "cloud",
            format!(
                "unknown cloud {cloud:?}; use AzurePublicCloud, AzureChinaCloud, \
                 AzureUSGovernmentCloud or AzureStackCloud (with AZURE_ENVIRONMENT_FILEPATH)"
            ),
        )
    })
}

/// The identity, in cloud-provider-azure's order (`pkg/azclient/auth.go`): workload
/// identity when a federated token file is given, then managed identity, then a
/// client secret.
fn identity(file: &File, var: &dyn Fn(&str) -> Option<String>) -> Result<Identity, ConfigError> {
    let federated = var(ENV_FEDERATED_TOKEN_FILE).or_else(|| {
        (file.use_federated_workload_identity_extension
            && !file.aad_federated_token_file.trim().is_empty())
        .then(|| file.aad_federated_token_file.trim().to_string())
    });
    if federated.is_none() && file.use_federated_workload_identity_extension {
        return Err(ConfigError::new(
            "aadFederatedTokenFile",
            "\"useFederatedWorkloadIdentityExtension\": true needs the projected token: set \
             \"aadFederatedTokenFile\" or AZURE_FEDERATED_TOKEN_FILE (the workload-identity \
             webhook sets it)",
        ));
    }
    if let Some(token_file) = federated {
        let client_id = var(ENV_CLIENT_ID)
            .or_else(|| Some(file.aad_client_id.trim().to_string()).filter(|s| !s.is_empty()))
            .ok_or_else(|| {
                ConfigError::new(
                    ENV_CLIENT_ID,
                    "workload identity needs the identity's client ID: AZURE_CLIENT_ID (the \
                     webhook sets it from the service account's azure.workload.identity/client-id \
                     annotation) or \"aadClientId\"",
                )
            })?;
        return Ok(Identity::WorkloadIdentity {
            client_id: client_id.trim().to_string(),
            token_file: PathBuf::from(token_file.trim()),
        });
    }
    if file.use_managed_identity_extension {
        let id = file.user_assigned_identity_id.trim();
        return Ok(Identity::ManagedIdentity {
            client_id: (!id.is_empty()).then(|| id.to_string()),
        });
    }
    let secret = var(ENV_CLIENT_SECRET).unwrap_or_else(|| file.aad_client_secret.clone());
    let client_id = var(ENV_CLIENT_ID).unwrap_or_else(|| file.aad_client_id.trim().to_string());
    match (client_id.is_empty(), secret.is_empty()) {
        (false, false) => Ok(Identity::ClientSecret {
            client_id,
            secret: Secret::new(secret),
        }),
        (true, false) => Err(ConfigError::new(
            "aadClientId",
            "a client secret is given without its client ID: set \"aadClientId\"",
        )),
        _ => Err(ConfigError::new(
            "aadClientSecret",
            "no identity: give \"aadClientId\" and \"aadClientSecret\", or \
             \"useManagedIdentityExtension\": true (with \"userAssignedIdentityID\" for a \
             user-assigned identity), or workload identity (AZURE_FEDERATED_TOKEN_FILE)",
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn parse(text: &str, vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::parse(text, &|k| vars.get(k).cloned())
    }

    const BASE: &str = r#""cloud": "AzurePublicCloud", "tenantId": "t-1",
        "subscriptionId": "sub-1", "resourceGroup": "rg-1", "location": "westeurope",
        "vnetName": "vnet", "routeTableName": "rt-1", "loadBalancerSku": "standard""#;

    #[test]
    fn a_client_secret_file_as_aks_engine_writes_it_is_read() {
        let c = parse(
            &format!(r#"{{ {BASE}, "aadClientId": "app-1", "aadClientSecret": "s3cret" }}"#),
            &[],
        )
        .unwrap();
        assert_eq!(c.subscription_id, "sub-1");
        assert_eq!(
            c.route_table_resource_group, "rg-1",
            "defaults to resourceGroup"
        );
        assert_eq!(c.endpoints.resource_manager, "https://management.azure.com");
        assert_eq!(c.endpoints.authority, "https://login.microsoftonline.com");
        assert_eq!(c.route_table_limit, DEFAULT_ROUTE_TABLE_LIMIT);
        assert_eq!(
            c.route_table_id(),
            "/subscriptions/sub-1/resourceGroups/rg-1/providers/Microsoft.Network/routeTables/rt-1"
        );
        match &c.identity {
            Identity::ClientSecret { client_id, secret } => {
                assert_eq!(client_id, "app-1");
                assert_eq!(secret.expose(), "s3cret");
            }
            other => panic!("{other:?}"),
        }
        let shown = format!("{c:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
    }

    #[test]
    fn managed_identity_system_and_user_assigned() {
        let c = parse(
            &format!(r#"{{ {BASE}, "useManagedIdentityExtension": true, "aadClientId": "msi" }}"#),
            &[],
        )
        .unwrap();
        assert_eq!(c.identity, Identity::ManagedIdentity { client_id: None });
        let c = parse(
            &format!(
                r#"{{ {BASE}, "useManagedIdentityExtension": true,
                "userAssignedIdentityID": "uami-1", "routeTableResourceGroup": "net-rg" }}"#
            ),
            &[],
        )
        .unwrap();
        assert_eq!(
            c.identity,
            Identity::ManagedIdentity {
                client_id: Some("uami-1".into())
            }
        );
        assert_eq!(c.route_table_resource_group, "net-rg");
    }

    #[test]
    fn workload_identity_from_the_webhooks_variables_comes_first() {
        let c = parse(
            &format!(
                r#"{{ {BASE}, "useManagedIdentityExtension": true, "aadClientSecret": "x",
                "aadClientId": "file-id" }}"#
            ),
            &[
                (
                    ENV_FEDERATED_TOKEN_FILE,
                    "/var/run/secrets/azure/tokens/azure-identity-token",
                ),
                (ENV_CLIENT_ID, "wi-client"),
                (ENV_TENANT_ID, "wi-tenant"),
                (ENV_AUTHORITY_HOST, "https://login.example/"),
            ],
        )
        .unwrap();
        assert_eq!(
            c.identity,
            Identity::WorkloadIdentity {
                client_id: "wi-client".into(),
                token_file: "/var/run/secrets/azure/tokens/azure-identity-token".into(),
            }
        );
        assert_eq!(c.tenant_id, "wi-tenant");
        assert_eq!(c.endpoints.authority, "https://login.example");
        // From the file alone: the flag and the path, the client ID from aadClientId.
        let c = parse(
            &format!(
                r#"{{ {BASE}, "useFederatedWorkloadIdentityExtension": true,
                "aadFederatedTokenFile": "/t", "aadClientId": "file-id" }}"#
            ),
            &[],
        )
        .unwrap();
        assert_eq!(
            c.identity,
            Identity::WorkloadIdentity {
                client_id: "file-id".into(),
                token_file: "/t".into()
            }
        );
    }

    #[test]
    fn named_clouds_and_an_azure_stack_environment_file() {
        let china = parse(
            &format!(
                r#"{{ {}, "cloud": "AzureChinaCloud", "aadClientId": "a", "aadClientSecret": "b" }}"#,
                BASE.replace(r#""cloud": "AzurePublicCloud", "#, "")
            ),
            &[],
        )
        .unwrap();
        assert_eq!(
            china.endpoints.resource_manager,
            "https://management.chinacloudapi.cn"
        );
        let dir = std::env::temp_dir().join(format!("azure-env-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("env.json");
        std::fs::write(
            &path,
            r#"{"name": "AzureStackCloud", "resourceManagerEndpoint": "http://127.0.0.1:9/",
                "activeDirectoryEndpoint": "http://127.0.0.1:8/", "tokenAudience": "https://stack/"}"#,
        )
        .unwrap();
        let text = format!(
            r#"{{ {}, "cloud": "AzureStackCloud", "aadClientId": "a", "aadClientSecret": "b" }}"#,
            BASE.replace(r#""cloud": "AzurePublicCloud", "#, "")
        );
        let stack = parse(&text, &[(ENV_ENVIRONMENT_FILEPATH, path.to_str().unwrap())]).unwrap();
        assert_eq!(stack.endpoints.resource_manager, "http://127.0.0.1:9");
        assert_eq!(stack.endpoints.authority, "http://127.0.0.1:8");
        assert_eq!(stack.endpoints.audience, "https://stack/");
        let err = parse(&text, &[]).unwrap_err();
        assert_eq!(err.key, ENV_ENVIRONMENT_FILEPATH);
        let _ = std::fs::remove_dir_all(dir);
    }

    /// cloud-provider-azure also takes its file as YAML.
    #[test]
    fn a_yaml_azure_json_is_read_too() {
        let c = parse(
            "cloud: AzurePublicCloud\ntenantId: t\nsubscriptionId: s\nresourceGroup: rg\n\
             routeTableName: rt\nuseManagedIdentityExtension: true\nuserAssignedIdentityID: u\n",
            &[],
        )
        .unwrap();
        assert_eq!(
            (c.subscription_id.as_str(), c.route_table_name.as_str()),
            ("s", "rt")
        );
        assert_eq!(
            c.identity,
            Identity::ManagedIdentity {
                client_id: Some("u".into())
            }
        );
    }

    #[test]
    fn missing_and_wrong_settings_name_their_key() {
        let key = |text: &str| parse(text, &[]).unwrap_err().key;
        assert_eq!(key("{}"), "subscriptionId");
        assert_eq!(
            key(&format!(
                r#"{{ {BASE}, "useFederatedWorkloadIdentityExtension": true, "aadClientId": "a" }}"#
            )),
            "aadFederatedTokenFile"
        );
        assert_eq!(key("not json"), "--cloud-config");
        assert_eq!(key(&format!("{{ {BASE} }}")), "aadClientSecret");
        assert_eq!(
            key(&format!(r#"{{ {BASE}, "aadClientSecret": "x" }}"#)),
            "aadClientId"
        );
        assert_eq!(
            key(&format!(
                r#"{{ {BASE}, "aadClientId": "a", "aadClientSecret": "b", "routeTableRouteLimit": 0 }}"#
            )),
            "routeTableRouteLimit"
        );
        let moon = BASE.replace("AzurePublicCloud", "AzureMoonCloud");
        assert_eq!(
            key(&format!(
                r#"{{ {moon}, "aadClientId": "a", "aadClientSecret": "b" }}"#
            )),
            "cloud"
        );
        let c = parse(
            &format!(
                r#"{{ {BASE}, "aadClientId": "a", "aadClientSecret": "b", "routeTableRouteLimit": 600 }}"#
            ),
            &[],
        )
        .unwrap();
        assert_eq!(c.route_table_limit, 600);
    }
}
