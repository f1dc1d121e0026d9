//! Where the controller finds its cluster and credentials, resolved as client-go
//! does: an explicit kubeconfig, else `$KUBECONFIG` (several files merged, the first
//! to set a value wins), else `~/.kube/config`, else the pod's service account
//! (in-cluster). A `--master` URL replaces the server of whatever was found.
//!
//! This module only reads files and turns them into a [`KubeConfig`]; it opens no
//! connection. It must never log or print a token, a password or a private key:
//! [`Secret`] and [`Identity`] redact themselves in Debug output.

use std::fmt;
use std::net::Ipv6Addr;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde::{Deserialize, Deserializer};

use super::env::Env;

/// Settings for finding the cluster, as the command-line flags give them.
#[derive(Clone, Debug, Default)]
pub struct LoadOptions {
    /// `--kubeconfig`: this file only; it must exist. Default: `$KUBECONFIG`, then
    /// `~/.kube/config`, then in-cluster.
    pub kubeconfig: Option<PathBuf>,
    /// `--master`: the API server URL, replacing the one found. Default: none.
    pub master: Option<String>,
    /// The kubeconfig context to use. Default: the `current-context`.
    pub context: Option<String>,
}

/// A resolved connection: where the API server is and how to authenticate.
#[derive(Clone, Debug)]
pub struct KubeConfig {
    /// The API server's base URL, without a trailing slash.
    pub server: String,
    /// Where this came from, for logs: `kubeconfig /path (context c)` or `in-cluster`.
    pub source: String,
    pub tls: TlsSettings,
    pub auth: Auth,
    /// Kubeconfig `proxy-url`. Without it the API server is reached as
    /// `HTTPS_PROXY`, `HTTP_PROXY` and `NO_PROXY` say, as client-go does.
    pub proxy_url: Option<String>,
    /// The context's namespace (in-cluster: the pod's), default `default`.
    pub namespace: String,
}

/// How to verify the server and present ourselves.
#[derive(Clone, Debug, Default)]
pub struct TlsSettings {
    /// PEM bundle of the CAs to trust. `None` trusts the public web PKI roots.
    pub ca_pem: Option<Vec<u8>>,
    /// Where the CA came from, for error messages.
    pub ca_origin: String,
    /// Kubeconfig `insecure-skip-tls-verify`: no server verification at all.
    pub insecure_skip_verify: bool,
    /// A client certificate and key.
    pub identity: Option<Identity>,
}

/// How requests authenticate (besides a client certificate).
#[derive(Clone, Debug)]
pub enum Auth {
    None,
    /// A bearer token written in the kubeconfig.
    Token(Secret),
    /// A bearer token read from a file and re-read periodically (rotated
    /// service-account tokens).
    TokenFile(PathBuf),
    Basic {
        username: String,
        password: Secret,
    },
    /// A client-go credential plugin.
    Exec(ExecConfig),
}

/// A kubeconfig `exec` credential plugin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecConfig {
    /// `client.authentication.k8s.io/v1` or `client.authentication.k8s.io/v1beta1`.
    pub api_version: String,
    /// The program; a relative path with a separator is resolved against the
    /// kubeconfig's directory.
    pub command: String,
    pub args: Vec<String>,
    /// Extra environment for the plugin. Values are redacted in Debug output.
    pub env: Vec<ExecEnvVar>,
    /// Pass the cluster's server and CA in `KUBERNETES_EXEC_INFO`.
    pub provide_cluster_info: bool,
    pub install_hint: Option<String>,
}

#[derive(Clone, PartialEq, Eq, Deserialize)]
pub struct ExecEnvVar {
    pub name: String,
    #[serde(default)]
    pub value: String,
}

impl fmt::Debug for ExecEnvVar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}=<redacted>", self.name)
    }
}

pub use crate::secret::Secret;

/// A client certificate chain and its private key, both PEM. The key never shows in
/// Debug output.
#[derive(Clone, PartialEq, Eq)]
pub struct Identity {
    pub cert_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
    /// Where it came from, for error messages (`client-certificate-data of user u`).
    pub origin: String,
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Identity")
            .field("origin", &self.origin)
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

/// The configuration could not be resolved; the message says what to fix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

fn err(message: impl Into<String>) -> ConfigError {
    ConfigError(message.into())
}

impl KubeConfig {
    /// Resolves the configuration in client-go's order (see the module docs).
    pub fn load(options: &LoadOptions, env: &Env) -> Result<KubeConfig, ConfigError> {
        let (paths, explicit) = kubeconfig_paths(options, env);
        let mut merged = Kubeconfig::default();
        let mut read = Vec::new();
        for path in &paths {
            match std::fs::read(path) {
                Ok(bytes) => {
                    let file = Kubeconfig::parse(&bytes, path)?;
                    merged.merge(file);
                    read.push(path.clone());
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && !explicit => {}
                Err(e) => {
                    return Err(err(format!(
                        "cannot read kubeconfig {}: {e}",
                        path.display()
                    )));
                }
            }
        }
        if merged.is_empty() && explicit {
            return Err(err(format!(
                "kubeconfig {} defines no cluster, user or context",
                paths
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        if merged.is_empty() {
            if in_cluster_possible(env) {
                let mut config = KubeConfig::in_cluster(env)?;
                if let Some(master) = &options.master {
                    config.server = normalize_server(master)?;
                }
                return Ok(config);
            }
            if let Some(master) = &options.master {
                return Ok(KubeConfig {
                    server: normalize_server(master)?,
                    source: "--master (no kubeconfig, no credentials)".to_string(),
                    tls: TlsSettings::default(),
                    auth: Auth::None,
                    proxy_url: None,
                    namespace: "default".to_string(),
                });
            }
            let tried: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
            return Err(err(format!(
                "no cluster configuration found: no kubeconfig (looked at: {}) and not running \
                 in a pod (KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set); \
                 pass --kubeconfig or --master",
                if tried.is_empty() {
                    "nothing; KUBECONFIG is unset and there is no home directory".to_string()
                } else {
                    tried.join(", ")
                }
            )));
        }
        let sources: Vec<String> = read.iter().map(|p| p.display().to_string()).collect();
        merged.resolve(options, &sources.join(":"))
    }

    /// The pod's service account: `https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT`,
    /// its token file (re-read as it rotates) and its CA.
    pub fn in_cluster(env: &Env) -> Result<KubeConfig, ConfigError> {
        let host = env.var("KUBERNETES_SERVICE_HOST");
        let port = env.var("KUBERNETES_SERVICE_PORT");
        let (Some(host), Some(port)) = (host, port) else {
            return Err(err(
                "not running in a pod: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT \
                 must both be set for the in-cluster configuration",
            ));
        };
        let host = if host.parse::<Ipv6Addr>().is_ok() {
            format!("[{host}]")
        } else {
            host.to_string()
        };
        let dir = env.service_account_dir();
        let token = dir.join("token");
        // The token is re-read on every refresh; reading it once here turns a missing
        // mount into a clear startup error instead of a failure at the first request.
        std::fs::read(&token).map_err(|e| {
            err(format!(
                "cannot read the service-account token {}: {e} (is automountServiceAccountToken off?)",
                token.display()
            ))
        })?;
        let ca_path = dir.join("ca.crt");
        let ca = std::fs::read(&ca_path).map_err(|e| {
            err(format!(
                "cannot read the service-account CA {}: {e}",
                ca_path.display()
            ))
        })?;
        let namespace = std::fs::read_to_string(dir.join("namespace"))
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "default".to_string());
        Ok(KubeConfig {
            server: format!("https://{host}:{port}"),
            source: "in-cluster service account".to_string(),
            tls: TlsSettings {
                ca_pem: Some(ca),
                ca_origin: ca_path.display().to_string(),
                insecure_skip_verify: false,
                identity: None,
            },
            auth: Auth::TokenFile(token),
            proxy_url: None,
            namespace,
        })
    }
}

fn in_cluster_possible(env: &Env) -> bool {
    env.var("KUBERNETES_SERVICE_HOST").is_some() && env.var("KUBERNETES_SERVICE_PORT").is_some()
}

/// The kubeconfig files to read, and whether they were named explicitly (then a
/// missing file is an error).
fn kubeconfig_paths(options: &LoadOptions, env: &Env) -> (Vec<PathBuf>, bool) {
    if let Some(path) = &options.kubeconfig {
        return (vec![path.clone()], true);
    }
    if let Some(list) = env.var("KUBECONFIG") {
        let paths: Vec<PathBuf> = std::env::split_paths(list)
            .filter(|p| !p.as_os_str().is_empty())
            .collect();
        // Duplicates are read once, as in client-go.
        let mut unique: Vec<PathBuf> = Vec::new();
        for p in paths {
            if !unique.contains(&p) {
                unique.push(p);
            }
        }
        return (unique, false);
    }
    match env.home() {
        Some(home) => (vec![home.join(".kube").join("config")], false),
        None => (Vec::new(), false),
    }
}

fn normalize_server(url: &str) -> Result<String, ConfigError> {
    let trimmed = url.trim().trim_end_matches('/');
    if !(trimmed.starts_with("https://") || trimmed.starts_with("http://")) {
        return Err(err(format!(
            "server URL {url:?} must start with https:// (or http:// for an insecure local server)"
        )));
    }
    Ok(trimmed.to_string())
}

// ---------------------------------------------------------------------------------
// The kubeconfig file format, only the fields we use. Unknown fields are ignored.

#[derive(Debug, Default)]
struct Kubeconfig {
    current_context: Option<String>,
    clusters: Vec<(String, Cluster)>,
    users: Vec<(String, User)>,
    contexts: Vec<(String, Context)>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "kebab-case", default)]
struct FileDoc {
    current_context: Option<String>,
    #[serde(deserialize_with = "null_default")]
    clusters: Vec<NamedCluster>,
    #[serde(deserialize_with = "null_default")]
    users: Vec<NamedUser>,
    #[serde(deserialize_with = "null_default")]
    contexts: Vec<NamedContext>,
}

#[derive(Deserialize)]
struct NamedCluster {
    name: String,
    #[serde(default, deserialize_with = "null_default")]
    cluster: Cluster,
}

#[derive(Deserialize)]
struct NamedUser {
    name: String,
    #[serde(default, deserialize_with = "null_default")]
    user: User,
}

#[derive(Deserialize)]
struct NamedContext {
    name: String,
    #[serde(default, deserialize_with = "null_default")]
    context: Context,
}

#[derive(Deserialize, Default, Debug, Clone)]
#[serde(rename_all = "kebab-case", default)]
struct Cluster {
    server: Option<String>,
    certificate_authority: Option<PathBuf>,
    certificate_authority_data: Option<String>,
    insecure_skip_tls_verify: Option<bool>,
    tls_server_name: Option<String>,
    proxy_url: Option<String>,
}

#[derive(Deserialize, Default, Clone)]
#[serde(rename_all = "kebab-case", default)]
struct User {
    client_certificate: Option<PathBuf>,
    client_certificate_data: Option<String>,
    client_key: Option<PathBuf>,
    client_key_data: Option<String>,
    token: Option<String>,
    #[serde(rename = "tokenFile")]
    token_file: Option<PathBuf>,
    username: Option<String>,
    password: Option<String>,
    exec: Option<WireExec>,
    auth_provider: Option<AuthProvider>,
}

impl fmt::Debug for User {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("User(<redacted>)")
    }
}

#[derive(Deserialize, Default, Clone)]
#[serde(default)]
struct AuthProvider {
    name: String,
}

#[derive(Deserialize, Default, Clone)]
#[serde(rename_all = "camelCase", default)]
struct WireExec {
    api_version: String,
    command: String,
    #[serde(deserialize_with = "null_default")]
    args: Vec<String>,
    #[serde(deserialize_with = "null_default")]
    env: Vec<ExecEnvVar>,
    provide_cluster_info: bool,
    install_hint: Option<String>,
}

#[derive(Deserialize, Default, Debug, Clone)]
#[serde(default)]
struct Context {
    cluster: String,
    user: String,
    namespace: Option<String>,
}

fn null_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

impl Kubeconfig {
    /// Parses one file (YAML or JSON, possibly several documents) and resolves its
    /// relative paths against its directory.
    fn parse(bytes: &[u8], path: &Path) -> Result<Kubeconfig, ConfigError> {
        let text =
            decode_text(bytes).map_err(|e| err(format!("kubeconfig {}: {e}", path.display())))?;
        let docs: Vec<FileDoc> = serde_saphyr::from_multiple(&text).map_err(|e| {
            // The parser's message is a snippet of several lines; the first names the
            // line, column and problem, which is what an error line has room for.
            let message = e.to_string();
            let first = message.lines().next().unwrap_or_default();
            err(format!(
                "kubeconfig {} is not valid YAML/JSON: {}",
                path.display(),
                first.trim_start_matches("error: ")
            ))
        })?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let mut out = Kubeconfig::default();
        for doc in docs {
            let mut file = Kubeconfig {
                current_context: doc.current_context.filter(|c| !c.is_empty()),
                clusters: doc
                    .clusters
                    .into_iter()
                    .map(|c| (c.name, c.cluster))
                    .collect(),
                users: doc.users.into_iter().map(|u| (u.name, u.user)).collect(),
                contexts: doc
                    .contexts
                    .into_iter()
                    .map(|c| (c.name, c.context))
                    .collect(),
            };
            file.resolve_paths(dir);
            out.merge(file);
        }
        Ok(out)
    }

    fn resolve_paths(&mut self, dir: &Path) {
        let resolve = |p: &mut Option<PathBuf>| {
            if let Some(path) = p
                && path.is_relative()
                && !path.as_os_str().is_empty()
            {
                *path = dir.join(&*path);
            }
        };
        for (_, c) in &mut self.clusters {
            resolve(&mut c.certificate_authority);
        }
        for (_, u) in &mut self.users {
            resolve(&mut u.client_certificate);
            resolve(&mut u.client_key);
            resolve(&mut u.token_file);
            if let Some(exec) = &mut u.exec {
                let cmd = Path::new(&exec.command);
                if cmd.is_relative() && exec.command.contains(std::path::MAIN_SEPARATOR) {
                    exec.command = dir.join(cmd).to_string_lossy().into_owned();
                }
            }
        }
    }

    /// client-go's merge rule: the first file to set a value or a map key wins.
    fn merge(&mut self, other: Kubeconfig) {
        if self.current_context.is_none() {
            self.current_context = other.current_context;
        }
        fn add<T>(into: &mut Vec<(String, T)>, from: Vec<(String, T)>) {
            for (name, value) in from {
                if !into.iter().any(|(n, _)| *n == name) {
                    into.push((name, value));
                }
            }
        }
        add(&mut self.clusters, other.clusters);
        add(&mut self.users, other.users);
        add(&mut self.contexts, other.contexts);
    }

    fn is_empty(&self) -> bool {
        self.current_context.is_none()
            && self.clusters.is_empty()
            && self.users.is_empty()
            && self.contexts.is_empty()
    }

    fn resolve(&self, options: &LoadOptions, files: &str) -> Result<KubeConfig, ConfigError> {
        let context_name = options
            .context
            .as_deref()
            .or(self.current_context.as_deref())
            .ok_or_else(|| {
                err(format!(
                    "kubeconfig {files} has no current-context; set one with \
                     `kubectl config use-context NAME`"
                ))
            })?;
        let context = find(&self.contexts, context_name).ok_or_else(|| {
            err(format!(
                "kubeconfig {files}: context {context_name:?} is not defined"
            ))
        })?;
        let cluster = find(&self.clusters, &context.cluster).ok_or_else(|| {
            err(format!(
                "kubeconfig {files}: cluster {:?} (of context {context_name:?}) is not defined",
                context.cluster
            ))
        })?;
        let user = if context.user.is_empty() {
            User::default()
        } else {
            find(&self.users, &context.user).cloned().ok_or_else(|| {
                err(format!(
                    "kubeconfig {files}: user {:?} (of context {context_name:?}) is not defined",
                    context.user
                ))
            })?
        };
        let server = match (&options.master, &cluster.server) {
            (Some(master), _) => normalize_server(master)?,
            (None, Some(server)) if !server.is_empty() => normalize_server(server)?,
            _ => {
                return Err(err(format!(
                    "kubeconfig {files}: cluster {:?} has no server; set it or pass --master",
                    context.cluster
                )));
            }
        };
        if let Some(name) = &cluster.tls_server_name {
            log::warn!(
                "kubeconfig {files}: tls-server-name {name:?} is not supported and is ignored; \
                 the server certificate must be valid for the host in {server}"
            );
        }
        let tls = cluster_tls(cluster, &user, &context.cluster, &context.user)?;
        let auth = user_auth(&user, &context.user)?;
        Ok(KubeConfig {
            server,
            source: format!("kubeconfig {files} (context {context_name})"),
            tls,
            auth,
            proxy_url: cluster.proxy_url.clone().filter(|p| !p.is_empty()),
            namespace: context
                .namespace
                .clone()
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| "default".to_string()),
        })
    }
}

fn find<'a, T>(entries: &'a [(String, T)], name: &str) -> Option<&'a T> {
    entries.iter().find(|(n, _)| n == name).map(|(_, v)| v)
}

fn cluster_tls(
    cluster: &Cluster,
    user: &User,
    cluster_name: &str,
    user_name: &str,
) -> Result<TlsSettings, ConfigError> {
    let (ca_pem, ca_origin) = match (
        &cluster.certificate_authority_data,
        &cluster.certificate_authority,
    ) {
        (Some(data), _) if !data.is_empty() => (
            Some(decode_base64(
                data,
                &format!("certificate-authority-data of cluster {cluster_name:?}"),
            )?),
            format!("certificate-authority-data of cluster {cluster_name:?}"),
        ),
        (_, Some(path)) if !path.as_os_str().is_empty() => (
            Some(read_file(path, "certificate-authority")?),
            path.display().to_string(),
        ),
        _ => (None, String::new()),
    };
    let cert = match (&user.client_certificate_data, &user.client_certificate) {
        (Some(data), _) if !data.is_empty() => Some(decode_base64(
            data,
            &format!("client-certificate-data of user {user_name:?}"),
        )?),
        (_, Some(path)) if !path.as_os_str().is_empty() => {
            Some(read_file(path, "client-certificate")?)
        }
        _ => None,
    };
    let key = match (&user.client_key_data, &user.client_key) {
        (Some(data), _) if !data.is_empty() => Some(decode_base64(
            data,
            &format!("client-key-data of user {user_name:?}"),
        )?),
        (_, Some(path)) if !path.as_os_str().is_empty() => Some(read_file(path, "client-key")?),
        _ => None,
    };
    let identity = match (cert, key) {
        (Some(cert_pem), Some(key_pem)) => Some(Identity {
            cert_pem,
            key_pem,
            origin: format!("client certificate of user {user_name:?}"),
        }),
        (None, None) => None,
        (Some(_), None) => {
            return Err(err(format!(
                "user {user_name:?} has a client certificate but no client-key(-data)"
            )));
        }
        (None, Some(_)) => {
            return Err(err(format!(
                "user {user_name:?} has a client key but no client-certificate(-data)"
            )));
        }
    };
    let insecure = cluster.insecure_skip_tls_verify.unwrap_or(false);
    if insecure && ca_pem.is_some() {
        return Err(err(format!(
            "cluster {cluster_name:?} sets both insecure-skip-tls-verify and a certificate \
             authority; remove one (client-go refuses this too)"
        )));
    }
    Ok(TlsSettings {
        ca_pem,
        ca_origin,
        insecure_skip_verify: insecure,
        identity,
    })
}

fn user_auth(user: &User, user_name: &str) -> Result<Auth, ConfigError> {
    if let Some(provider) = &user.auth_provider {
        return Err(err(format!(
            "user {user_name:?} uses the auth-provider {:?}, which is not supported (client-go \
             removed the built-in providers); use an exec credential plugin instead",
            provider.name
        )));
    }
    if let Some(token) = user.token.as_ref().filter(|t| !t.is_empty()) {
        return Ok(Auth::Token(Secret::new(token.trim())));
    }
    if let Some(path) = user
        .token_file
        .as_ref()
        .filter(|p| !p.as_os_str().is_empty())
    {
        read_file(path, "tokenFile")?;
        return Ok(Auth::TokenFile(path.clone()));
    }
    if let Some(exec) = &user.exec {
        if exec.command.is_empty() {
            return Err(err(format!("user {user_name:?}: exec has no command")));
        }
        match exec.api_version.as_str() {
            "client.authentication.k8s.io/v1" | "client.authentication.k8s.io/v1beta1" => {}
            other => {
                return Err(err(format!(
                    "user {user_name:?}: exec apiVersion {other:?} is not supported; use \
                     client.authentication.k8s.io/v1 or v1beta1"
                )));
            }
        }
        return Ok(Auth::Exec(ExecConfig {
            api_version: exec.api_version.clone(),
            command: exec.command.clone(),
            args: exec.args.clone(),
            env: exec.env.clone(),
            provide_cluster_info: exec.provide_cluster_info,
            install_hint: exec.install_hint.clone(),
        }));
    }
    if let Some(username) = user.username.as_ref().filter(|u| !u.is_empty()) {
        return Ok(Auth::Basic {
            username: username.clone(),
            password: Secret::new(user.password.clone().unwrap_or_default()),
        });
    }
    Ok(Auth::None)
}

fn read_file(path: &Path, what: &str) -> Result<Vec<u8>, ConfigError> {
    std::fs::read(path).map_err(|e| err(format!("cannot read {what} {}: {e}", path.display())))
}

fn decode_base64(data: &str, what: &str) -> Result<Vec<u8>, ConfigError> {
    let compact: String = data.split_whitespace().collect();
    base64::engine::general_purpose::STANDARD
        .decode(compact)
        .map_err(|e| err(format!("{what} is not valid base64: {e}")))
}

/// Kubeconfigs written by some Windows tools are UTF-16 with a byte-order mark.
fn decode_text(bytes: &[u8]) -> Result<String, String> {
    let utf16 = |le: bool| {
        let units: Vec<u16> = bytes[2..]
            .chunks_exact(2)
            .map(|c| {
                if le {
                    u16::from_le_bytes([c[0], c[1]])
                } else {
                    u16::from_be_bytes([c[0], c[1]])
                }
            })
            .collect();
        String::from_utf16(&units).map_err(|_| "invalid UTF-16".to_string())
    };
    match bytes {
        [0xEF, 0xBB, 0xBF, rest @ ..] => {
            String::from_utf8(rest.to_vec()).map_err(|_| "invalid UTF-8".to_string())
        }
        [0xFF, 0xFE, ..] => utf16(true),
        [0xFE, 0xFF, ..] => utf16(false),
        _ => String::from_utf8(bytes.to_vec()).map_err(|_| "invalid UTF-8".to_string()),
    }
}

/// Invariant 8 for kubeconfig files: whatever the bytes, parsing and resolving give a
/// config or an error that names the file, never a panic or a hang (YAML aliases
/// included).
#[cfg(test)]
mod fuzz {
    use proptest::prelude::*;

    use super::*;
    use crate::fuzz::{bytes, check, config};
    use crate::fuzz_seed;

    static FILES: &[&[u8]] = &[
        fuzz_seed!("kubeconfig.yaml"),
        fuzz_seed!("kubeconfig-anchors.yaml"),
    ];

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn kubeconfig_files(input in bytes(FILES)) {
            check("the kubeconfig parser", move || {
                // A directory that does not exist: relative file references resolve
                // into it and fail to read, as they should.
                let path = Path::new("/nonexistent/route-controller-fuzz/config");
                match Kubeconfig::parse(&input, path) {
                    Ok(k) => {
                        let _ = k.resolve(&LoadOptions::default(), "fuzz").map(|c| c.server);
                    }
                    Err(e) => {
                        let _ = e.to_string();
                    }
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_yaml_error_is_one_line_with_its_position() {
        let text = b"apiVersion: v1\nclusters:\n- cluster:\n    server: https://x\n  bad: [\n";
        let Err(e) = Kubeconfig::parse(text, Path::new("/k/config")) else {
            panic!("a broken kubeconfig parsed");
        };
        let message = e.to_string();
        assert!(!message.contains('\n'), "{message}");
        assert!(
            message.contains("/k/config is not valid YAML/JSON: line 5"),
            "{message}"
        );
    }
}
