//! The settings of the OpenStack provider: the `cloud.conf` that cloud-provider-openstack
//! reads (gcfg, as gce.conf: `[Global]` for Keystone, `[Route]` for the router), or,
//! with `use-clouds = true`, an entry of a `clouds.yaml`. Passwords and application
//! credential secrets are held as [`Secret`] from the moment they are read.

use std::fmt;
use std::time::Duration;

use serde::Deserialize;

use crate::cloud::gce::config::{Entry, parse_gcfg};
use crate::model::Cidr;
use crate::secret::Secret;

/// Neutron's default `max_routes` (routes per router), which operators raise.
pub const DEFAULT_MAX_ROUTES: usize = 30;

/// How the provider proves who it is to Keystone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Credentials {
    /// An application credential (id and secret): the one to prefer, since it is
    /// scoped to one project and can be revoked alone.
    ApplicationCredential {
        /// `application-credential-id`.
        id: String,
        /// `application-credential-secret`.
        secret: Secret,
    },
    /// An application credential by its name (`application-credential-name`), which
    /// is unique only among its user's: Keystone needs the user too.
    ApplicationCredentialByName {
        /// `application-credential-name`.
        name: String,
        /// `application-credential-secret`.
        secret: Secret,
        /// `user-id`, or `username` with its domain.
        user: UserRef,
    },
    /// A trustee's password, the token scoped to a trust (`OS-TRUST:trust`) instead
    /// of a project: the controller acts with the roles the trustor delegated, in the
    /// trust's project, as cloud-provider-openstack does with `trust-id`.
    Trust {
        /// `trust-id`.
        trust_id: String,
        /// `trustee-id`, else `user-id`, else `username` with its domain.
        trustee: UserRef,
        /// `trustee-password`, else `password`.
        password: Secret,
    },
    /// A user's password, scoped to a project.
    Password {
        /// `username` (with `user-domain-name`/`user-domain-id`) or `user-id`.
        user: UserRef,
        /// `password`.
        password: Secret,
        /// `tenant-id`/`project-id`, or `tenant-name`/`project-name` with its domain.
        project: ProjectRef,
    },
}

/// A user, by id or by name in a domain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UserRef {
    /// `user-id`.
    Id(String),
    /// `username` in the domain (`user-domain-id`, or `user-domain-name`, default `Default`).
    Name {
        /// The name.
        name: String,
        /// The domain: `("id", x)` or `("name", x)`.
        domain: (&'static str, String),
    },
}

/// A project, by id or by name in a domain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProjectRef {
    /// `tenant-id`/`project-id`.
    Id(String),
    /// `tenant-name`/`project-name` in its domain.
    Name {
        /// The name.
        name: String,
        /// The domain: `("id", x)` or `("name", x)`.
        domain: (&'static str, String),
    },
}

/// Everything the provider needs.
#[derive(Clone, Debug)]
pub struct Config {
    /// Keystone's v3 URL (`auth-url`), e.g. `https://keystone.example:5000/v3`.
    pub auth_url: String,
    /// The region whose network endpoint is taken from the catalog (`region`); none:
    /// the first network endpoint.
    pub region: Option<String>,
    /// The catalog interface of the network endpoint: `public` (default), `internal`
    /// or `admin` (`os-endpoint-type`, clouds.yaml `interface`).
    pub interface: String,
    /// The credentials.
    pub credentials: Credentials,
    /// The router whose routes are managed (`[Route] router-id`).
    pub router_id: String,
    /// Routes the router may hold (`[Route] max-routes`, default 30: Neutron's
    /// `max_routes`); feeds `RouteTableFull`.
    pub max_routes: usize,
    /// The cluster's CIDRs: only routes inside them whose next hop is a node are ours.
    pub cluster_cidrs: Vec<Cidr>,
    /// The network endpoint, instead of the catalog's (`[Route] network-endpoint`,
    /// ours; for a catalog that names an internal URL).
    pub network_endpoint: Option<String>,
    /// Per request (default 30s).
    pub request_timeout: Duration,
    /// Requests per second for the controller to spend (`[Route] requests-per-second`,
    /// default 5).
    pub requests_per_second: f64,
    /// Burst (default 10).
    pub burst: u32,
    /// Metrics of every request.
    pub metrics: Option<std::sync::Arc<crate::metrics::Metrics>>,
    /// The CAs trusted and the certificate presented (default: the bundled roots and
    /// the machine's store; `ca-file`, `cert-file`/`key-file` and `tls-insecure` in `[Global]`).
    pub trust: crate::Trust,
    /// Whether requests go through a proxy (default: as `HTTPS_PROXY`, `HTTP_PROXY`
    /// and `NO_PROXY` say, as every Kubernetes component reads them).
    pub proxying: crate::Proxying,
}

/// Keystone's and Neutron's TLS settings, named as cloud-provider-openstack names
/// them: `ca-file` (trusted besides the bundled roots and the machine's store),
/// `cert-file` with `key-file` (a client certificate), `tls-insecure = true` (no
/// verification at all; a warning at start and on `/readyz`).
fn trust(raw: &Raw, warnings: &mut Vec<String>) -> Result<crate::Trust, ConfigError> {
    let mut trust = crate::Trust::new("ca-file in cloud.conf [Global]");
    let err = |e: crate::TrustError| ConfigError::new(format!("cloud.conf: [Global] {e}"));
    if let Some(ca) = raw.get(&["ca-file"]) {
        trust
            .add_ca_file(std::path::Path::new(&ca), "ca-file")
            .map_err(err)?;
    }
    match (raw.get(&["cert-file"]), raw.get(&["key-file"])) {
        (Some(cert), Some(key)) => trust
            .set_client_identity(cert.as_ref(), key.as_ref(), "cert-file/key-file")
            .map_err(err)?,
        (None, None) => {}
        _ => {
            return Err(ConfigError::new(
                "cloud.conf: [Global] cert-file and key-file go together: set both for a \
                 client certificate, or neither",
            ));
        }
    }
    match raw
        .get(&["tls-insecure"])
        .map(|v| v.to_ascii_lowercase())
        .as_deref()
    {
        None | Some("false") => {}
        Some("true") => {
            trust.set_insecure("cloud.conf [Global] tls-insecure");
            warnings.push(
                "cloud.conf: tls-insecure = true: Keystone's and Neutron's certificates are \
                 NOT verified, so anyone on the path can read the credentials; set ca-file to \
                 their CA instead"
                    .to_string(),
            );
        }
        Some(other) => {
            return Err(ConfigError::new(format!(
                "cloud.conf: [Global] tls-insecure = {other:?} is neither true nor false"
            )));
        }
    }
    Ok(trust)
}

/// A setting that cannot be used: what is wrong and the fix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The message.
    pub message: String,
    /// Keystone or Neutron did not answer at start: trying again may work.
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

/// The `[Global]`/`[Route]` names read, as collected before they are checked.
#[derive(Default)]
struct Raw {
    values: std::collections::HashMap<String, String>,
}

impl Raw {
    fn get(&self, names: &[&str]) -> Option<String> {
        names
            .iter()
            .find_map(|n| self.values.get(*n))
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    }
}

const GLOBAL_KEYS: &[&str] = &[
    "auth-url",
    "region",
    "application-credential-id",
    "application-credential-name",
    "application-credential-secret",
    "trust-id",
    "trustee-id",
    "trustee-password",
    "username",
    "user-id",
    "password",
    "tenant-id",
    "project-id",
    "tenant-name",
    "project-name",
    "domain-id",
    "domain-name",
    "user-domain-id",
    "user-domain-name",
    "project-domain-id",
    "project-domain-name",
    // cloud-provider-openstack maps these to the project's domain (ProjectDomainID,
    // ProjectDomainName), not to a domain of their own.
    "tenant-domain-id",
    "tenant-domain-name",
    "os-endpoint-type",
    "use-clouds",
    "clouds-file",
    "cloud",
    "ca-file",
    "cert-file",
    "key-file",
    "tls-insecure",
];
const ROUTE_KEYS: &[&str] = &[
    "router-id",
    "max-routes",
    "network-endpoint",
    "requests-per-second",
    "burst",
];

impl Config {
    /// The settings of `cloud.conf` (`text`), with `read` to load a `clouds.yaml`
    /// when `use-clouds = true`; warnings for the log. An unknown name is a warning
    /// naming the closest known one, so that a typo is not ignored in silence.
    pub fn from_cloud_conf(
        text: &str,
        cluster_cidrs: &[Cidr],
        read: impl Fn(&str) -> Result<String, String>,
    ) -> Result<(Config, Vec<String>), ConfigError> {
        let entries = parse_gcfg(text)
            .map_err(|e| ConfigError::new(e.message.replace("gce.conf", "cloud.conf")))?;
        let mut raw = Raw::default();
        let mut warnings = Vec::new();
        let mut ignored_sections = std::collections::BTreeSet::new();
        for Entry {
            section,
            name,
            value,
            line,
            ..
        } in entries
        {
            let known = match section.as_str() {
                "global" => GLOBAL_KEYS.contains(&name.as_str()),
                "route" => ROUTE_KEYS.contains(&name.as_str()),
                _ => {
                    // One line for the section, not one for each of its names.
                    if ignored_sections.insert(section.clone()) {
                        warnings.push(format!(
                            "cloud.conf line {line}: section [{section}] does not concern \
                             routes; ignored"
                        ));
                    }
                    continue;
                }
            };
            if !known {
                // cloud-provider-openstack lets an unknown name pass (gcfg.FatalOnly);
                // a warning keeps a typo from passing in silence.
                let names = if section == "global" {
                    GLOBAL_KEYS
                } else {
                    ROUTE_KEYS
                };
                warnings.push(
                    match crate::spelling::closest(&name, names.iter().copied()) {
                        Some(c) => format!(
                            "cloud.conf line {line}: unknown name [{section}] {name}; ignored (did \
                         you mean {c}?)"
                        ),
                        None => format!(
                            "cloud.conf line {line}: unknown name [{section}] {name}; ignored (the \
                         route controller reads {})",
                            names.join(", ")
                        ),
                    },
                );
                continue;
            }
            raw.values
                .insert(name, value.unwrap_or_else(|| "true".into()));
        }
        if raw.get(&["use-clouds"]).as_deref() == Some("true") {
            let file = raw
                .get(&["clouds-file"])
                .unwrap_or_else(|| "/etc/openstack/clouds.yaml".into());
            let cloud = raw.get(&["cloud"]).unwrap_or_else(|| "openstack".into());
            let text = read(&file).map_err(|e| {
                ConfigError::new(format!(
                    "cloud.conf: use-clouds: cannot read clouds-file {file}: {e}"
                ))
            })?;
            from_clouds_yaml(&text, &file, &cloud, &mut raw)?;
        }
        let auth_url = raw.get(&["auth-url"]).ok_or_else(|| {
            ConfigError::new("cloud.conf: [Global] auth-url is not set; set Keystone's URL, e.g. https://keystone.example:5000/v3")
        })?;
        let credentials = credentials(&raw)?;
        let router_id = raw.get(&["router-id"]).ok_or_else(|| {
            ConfigError::new(
                "cloud.conf: [Route] router-id is not set; set the ID of the Neutron router the \
                 nodes' networks are attached to (openstack router show <name> -c id)",
            )
        })?;
        let number = |name: &str, default: f64| -> Result<f64, ConfigError> {
            match raw.get(&[name]) {
                None => Ok(default),
                Some(v) => v
                    .parse::<f64>()
                    .ok()
                    .filter(|n| *n > 0.0 && n.is_finite())
                    .ok_or_else(|| {
                        ConfigError::new(format!(
                            "cloud.conf: [Route] {name} = {v:?} is not a positive number"
                        ))
                    }),
            }
        };
        let max_routes = number("max-routes", DEFAULT_MAX_ROUTES as f64)?;
        if max_routes.fract() != 0.0 {
            return Err(ConfigError::new(format!(
                "cloud.conf: [Route] max-routes = {max_routes} is not a whole number of routes \
                 (Neutron's max_routes)"
            )));
        }
        let trust = trust(&raw, &mut warnings)?;
        let interface = match raw.get(&["os-endpoint-type"]) {
            None => "public".to_string(),
            // Keystone v2's spelling (publicURL, internalURL), still seen in old files.
            Some(v) => match v.to_ascii_lowercase().trim_end_matches("url") {
                i @ ("public" | "internal" | "admin") => i.to_string(),
                _ => {
                    return Err(ConfigError::new(format!(
                        "cloud.conf: [Global] os-endpoint-type = {v:?} is not a catalog \
                         interface; use public, internal or admin"
                    )));
                }
            },
        };
        let config = Config {
            auth_url: auth_url.trim_end_matches('/').to_string(),
            region: raw.get(&["region"]),
            interface,
            credentials,
            router_id,
            max_routes: max_routes as usize,
            cluster_cidrs: cluster_cidrs.to_vec(),
            network_endpoint: raw
                .get(&["network-endpoint"])
                .map(|u| u.trim_end_matches('/').to_string()),
            request_timeout: Duration::from_secs(30),
            requests_per_second: number("requests-per-second", 5.0)?,
            burst: number("burst", 10.0)?.max(1.0) as u32,
            metrics: None,
            trust,
            proxying: crate::Proxying::from_process(),
        };
        Ok((config, warnings))
    }
}

/// The identity, in cloud-provider-openstack's order: a trust (`trust-id`), an
/// application credential by ID, then by name, then a user's password.
fn credentials(raw: &Raw) -> Result<Credentials, ConfigError> {
    let domain = |id: &[&str], name: &[&str]| -> (&'static str, String) {
        match (raw.get(id), raw.get(name)) {
            (Some(i), _) => ("id", i),
            (None, Some(n)) => ("name", n),
            (None, None) => match (raw.get(&["domain-id"]), raw.get(&["domain-name"])) {
                (Some(i), _) => ("id", i),
                (None, Some(n)) => ("name", n),
                (None, None) => ("name", "Default".to_string()),
            },
        }
    };
    let user = |ids: &[&str], what: &str| match (raw.get(ids), raw.get(&["username"])) {
        (Some(id), _) => Ok(UserRef::Id(id)),
        (None, Some(name)) => Ok(UserRef::Name {
            name,
            domain: domain(&["user-domain-id"], &["user-domain-name"]),
        }),
        (None, None) => Err(ConfigError::new(format!(
            "cloud.conf: {what} is set without username or user-id; set one"
        ))),
    };
    if let Some(trust_id) = raw.get(&["trust-id"]) {
        let password = raw.get(&["trustee-password", "password"]).ok_or_else(|| {
            ConfigError::new(
                "cloud.conf: trust-id is set without trustee-password (or password); the \
                 trustee signs in with its password, scoped to the trust",
            )
        })?;
        return Ok(Credentials::Trust {
            trust_id,
            trustee: user(&["trustee-id", "user-id"], "trust-id")?,
            password: Secret::new(password),
        });
    }
    let app_secret = || {
        raw.get(&["application-credential-secret"]).ok_or_else(|| {
            ConfigError::new(
                "cloud.conf: an application credential (application-credential-id or -name) \
                 is set without application-credential-secret; set both (openstack \
                 application credential create)",
            )
        })
    };
    if let Some(id) = raw.get(&["application-credential-id"]) {
        return Ok(Credentials::ApplicationCredential {
            id,
            secret: Secret::new(app_secret()?),
        });
    }
    if let Some(name) = raw.get(&["application-credential-name"]) {
        return Ok(Credentials::ApplicationCredentialByName {
            name,
            secret: Secret::new(app_secret()?),
            user: user(&["user-id"], "application-credential-name")?,
        });
    }
    let password = raw.get(&["password"]).ok_or_else(|| {
        ConfigError::new(
            "cloud.conf: no credentials: set application-credential-id (or -name with the \
             user) and application-credential-secret, trust-id with the trustee's \
             password, or username, password and a project",
        )
    })?;
    let user = user(&["user-id"], "password")?;
    let project = match (
        raw.get(&["project-id", "tenant-id"]),
        raw.get(&["project-name", "tenant-name"]),
    ) {
        (Some(id), _) => ProjectRef::Id(id),
        (None, Some(name)) => ProjectRef::Name {
            name,
            domain: domain(
                &["project-domain-id", "tenant-domain-id"],
                &["project-domain-name", "tenant-domain-name"],
            ),
        },
        (None, None) => {
            return Err(ConfigError::new(
                "cloud.conf: a password needs a project to scope its token to; set tenant-id \
                 (or project-id) or tenant-name with its domain",
            ));
        }
    };
    Ok(Credentials::Password {
        user,
        password: Secret::new(password),
        project,
    })
}

#[derive(Deserialize)]
struct CloudsFile {
    #[serde(default)]
    clouds: std::collections::BTreeMap<String, CloudEntry>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct CloudEntry {
    auth: CloudAuth,
    region_name: Option<String>,
    /// TLS, as openstacksdk names it: `cacert`, `cert`/`key`, `verify: false`.
    cacert: Option<String>,
    cert: Option<String>,
    key: Option<String>,
    verify: Option<bool>,
    interface: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct CloudAuth {
    auth_url: Option<String>,
    username: Option<String>,
    user_id: Option<String>,
    password: Option<String>,
    project_id: Option<String>,
    project_name: Option<String>,
    user_domain_name: Option<String>,
    user_domain_id: Option<String>,
    project_domain_name: Option<String>,
    project_domain_id: Option<String>,
    domain_name: Option<String>,
    domain_id: Option<String>,
    application_credential_id: Option<String>,
    application_credential_name: Option<String>,
    application_credential_secret: Option<String>,
    trust_id: Option<String>,
}

/// Fills what `cloud.conf` left out from the `cloud` entry of a clouds.yaml (what
/// cloud.conf says wins, as in cloud-provider-openstack).
fn from_clouds_yaml(text: &str, file: &str, cloud: &str, raw: &mut Raw) -> Result<(), ConfigError> {
    let parsed: CloudsFile = serde_saphyr::from_str(text)
        .map_err(|e| ConfigError::new(format!("clouds-file {file}: not a clouds.yaml ({e})")))?;
    let names: Vec<&str> = parsed.clouds.keys().map(String::as_str).collect();
    let entry = parsed.clouds.get(cloud).ok_or_else(|| {
        ConfigError::new(format!(
            "clouds-file {file}: no cloud {cloud:?} under clouds (it has {}); set [Global] cloud",
            names.join(", ")
        ))
    })?;
    let a = &entry.auth;
    let fields = [
        ("auth-url", &a.auth_url),
        ("username", &a.username),
        ("user-id", &a.user_id),
        ("password", &a.password),
        ("project-id", &a.project_id),
        ("project-name", &a.project_name),
        ("user-domain-name", &a.user_domain_name),
        ("user-domain-id", &a.user_domain_id),
        ("project-domain-name", &a.project_domain_name),
        ("project-domain-id", &a.project_domain_id),
        ("domain-name", &a.domain_name),
        ("domain-id", &a.domain_id),
        ("application-credential-id", &a.application_credential_id),
        (
            "application-credential-name",
            &a.application_credential_name,
        ),
        ("trust-id", &a.trust_id),
        (
            "application-credential-secret",
            &a.application_credential_secret,
        ),
        ("region", &entry.region_name),
        ("ca-file", &entry.cacert),
        ("cert-file", &entry.cert),
        ("key-file", &entry.key),
        ("tls-insecure", &entry.verify.map(|v| (!v).to_string())),
        ("os-endpoint-type", &entry.interface),
    ];
    for (name, value) in fields {
        if let Some(v) = value
            && raw.get(&[name]).is_none()
        {
            raw.values.insert(name.to_string(), v.clone());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cidrs() -> Vec<Cidr> {
        vec![Cidr::parse("10.244.0.0/16").unwrap()]
    }

    #[test]
    fn os_endpoint_type_is_the_catalog_interface_in_either_spelling() {
        let conf = |extra: &str| {
            format!(
                "[Global]\nauth-url=https://ks\napplication-credential-id=a\n\
                 application-credential-secret=s\n{extra}[Route]\nrouter-id=r\n"
            )
        };
        let interface = |extra: &str| {
            Config::from_cloud_conf(&conf(extra), &cidrs(), |_| Err("no".into()))
                .map(|(c, _)| c.interface)
        };
        assert_eq!(interface("").as_deref(), Ok("public"));
        assert_eq!(
            interface("os-endpoint-type=internal\n").as_deref(),
            Ok("internal")
        );
        assert_eq!(
            interface("os-endpoint-type=internalURL\n").as_deref(),
            Ok("internal")
        );
        let e = interface("os-endpoint-type=private\n").expect_err("not an interface");
        assert!(e.message.contains("public, internal or admin"), "{e}");
        let yaml = "clouds:\n  openstack:\n    interface: admin\n";
        let text = "[Global]\nuse-clouds=true\nauth-url=https://ks\napplication-credential-id=a\n\
                    application-credential-secret=s\n[Route]\nrouter-id=r\n";
        let (c, _) =
            Config::from_cloud_conf(text, &cidrs(), |_| Ok(yaml.to_string())).expect("clouds.yaml");
        assert_eq!(c.interface, "admin");
    }
    fn no_file(_: &str) -> Result<String, String> {
        Err("none".into())
    }

    #[test]
    fn a_cloud_conf_with_an_application_credential_and_a_router() {
        let text = "[Global]\nauth-url = https://ks:5000/v3/\nregion = RegionTwo\n\
                    application-credential-id = ac1\napplication-credential-secret = s3cr3t\n\
                    [Route]\nrouter-id = r-1\nmax-routes = 300\n[LoadBalancer]\nsubnet-id = x\n";
        let (c, warnings) = Config::from_cloud_conf(text, &cidrs(), no_file).unwrap();
        assert_eq!(c.auth_url, "https://ks:5000/v3");
        assert_eq!(c.region.as_deref(), Some("RegionTwo"));
        assert_eq!(c.router_id, "r-1");
        assert_eq!(c.max_routes, 300);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        let Credentials::ApplicationCredential { id, secret } = &c.credentials else {
            panic!("{:?}", c.credentials)
        };
        assert_eq!((id.as_str(), secret.expose()), ("ac1", "s3cr3t"));
        assert!(!format!("{c:?}").contains("s3cr3t"));
    }

    #[test]
    fn a_password_is_scoped_to_a_project_in_its_domain() {
        let text = "[Global]\nauth-url=https://ks/v3\nusername=u\npassword=p\ntenant-name=t\n\
                    domain-name=D\n[Route]\nrouter-id=r\n";
        let (c, _) = Config::from_cloud_conf(text, &cidrs(), no_file).unwrap();
        assert_eq!(c.max_routes, DEFAULT_MAX_ROUTES);
        assert_eq!(
            c.credentials,
            Credentials::Password {
                user: UserRef::Name {
                    name: "u".into(),
                    domain: ("name", "D".into())
                },
                password: Secret::new("p"),
                project: ProjectRef::Name {
                    name: "t".into(),
                    domain: ("name", "D".into())
                },
            }
        );
    }

    #[test]
    fn clouds_yaml_fills_what_cloud_conf_leaves_out() {
        let yaml = "clouds:\n  prod:\n    region_name: R1\n    auth:\n      auth_url: https://ks/v3\n      \
                    application_credential_id: ac\n      application_credential_secret: sec\n";
        let text =
            "[Global]\nuse-clouds=true\nclouds-file=/c.yaml\ncloud=prod\n[Route]\nrouter-id=r\n";
        let read = |f: &str| {
            assert_eq!(f, "/c.yaml");
            Ok(yaml.to_string())
        };
        let (c, _) = Config::from_cloud_conf(text, &cidrs(), read).unwrap();
        assert_eq!(c.region.as_deref(), Some("R1"));
        assert_eq!(c.auth_url, "https://ks/v3");
        assert_eq!(c.trust.insecure(), None);
        // openstacksdk's `verify: false` is cloud.conf's tls-insecure; `cacert` its
        // ca-file (a missing file is named as that).
        let insecure = yaml.replace("    region_name", "    verify: false\n    region_name");
        let (c, warnings) =
            Config::from_cloud_conf(text, &cidrs(), |_| Ok(insecure.clone())).unwrap();
        assert_eq!(c.trust.insecure(), Some("cloud.conf [Global] tls-insecure"));
        assert!(
            warnings.iter().any(|w| w.contains("tls-insecure")),
            "{warnings:?}"
        );
        let cacert = yaml.replace(
            "    region_name",
            "    cacert: /nonexistent/ca.pem\n    region_name",
        );
        let err = Config::from_cloud_conf(text, &cidrs(), |_| Ok(cacert.clone())).unwrap_err();
        assert!(
            err.message
                .contains("ca-file: cannot read the CA file /nonexistent/ca.pem"),
            "{err}"
        );
        let missing =
            Config::from_cloud_conf(&text.replace("prod", "dev"), &cidrs(), read).unwrap_err();
        assert!(missing.message.contains("no cloud \"dev\""), "{missing}");
    }

    #[test]
    fn mistakes_name_the_setting_and_the_fix() {
        let e = |t: &str| {
            Config::from_cloud_conf(t, &cidrs(), no_file)
                .unwrap_err()
                .message
        };
        assert!(
            e("[Global]\nauth-url=x\napplication-credential-id=a\n")
                .contains("without application-credential-secret")
        );
        assert!(
            e("[Global]\nauth-url=x\nusername=u\npassword=p\n[Route]\nrouter-id=r\n")
                .contains("needs a project")
        );
        assert!(e("[Global]\nauth-url=x\napplication-credential-id=a\napplication-credential-secret=b\n").contains("router-id is not set"));
        assert!(e("[Global]\nauth-url=x\napplication-credential-id=a\napplication-credential-secret=b\n[Route]\nrouter-id=r\nmax-routes=-3\n").contains("max-routes"));
        assert!(
            e("[Global]\nauth-url=x\ntrust-id=t\ntrustee-id=u\n[Route]\nrouter-id=r\n")
                .contains("trust-id is set without trustee-password")
        );
        assert!(
            e("[Global]\nauth-url=x\ntrust-id=t\ntrustee-password=p\n[Route]\nrouter-id=r\n")
                .contains("trust-id is set without username or user-id")
        );
        assert!(
            e("[Global]\nauth-url=x\napplication-credential-name=n\n\
               application-credential-secret=s\n[Route]\nrouter-id=r\n")
            .contains("application-credential-name is set without username or user-id")
        );
    }

    /// cloud-provider-openstack's trust (`trust-id` with the trustee's ID and
    /// password) and application credential by name (with its user): each read as
    /// the identity it names, the secret held redacted.
    #[test]
    fn a_trust_and_an_application_credential_by_name_are_read() {
        let conf = |global: &str| {
            let text = format!("[Global]\nauth-url=https://ks/v3\n{global}[Route]\nrouter-id=r\n");
            Config::from_cloud_conf(&text, &cidrs(), no_file)
                .expect("a cloud.conf")
                .0
                .credentials
        };
        assert_eq!(
            conf("trust-id=t1\ntrustee-id=u1\ntrustee-password=tp\npassword=other\n"),
            Credentials::Trust {
                trust_id: "t1".into(),
                trustee: UserRef::Id("u1".into()),
                password: Secret::new("tp"),
            }
        );
        assert_eq!(
            conf("trust-id=t1\nusername=svc\nuser-domain-name=D\npassword=p\n"),
            Credentials::Trust {
                trust_id: "t1".into(),
                trustee: UserRef::Name {
                    name: "svc".into(),
                    domain: ("name", "D".into()),
                },
                password: Secret::new("p"),
            }
        );
        let by_name = conf(
            "application-credential-name=routes\napplication-credential-secret=s\n\
             username=svc\nuser-domain-id=d1\n",
        );
        assert_eq!(
            by_name,
            Credentials::ApplicationCredentialByName {
                name: "routes".into(),
                secret: Secret::new("s"),
                user: UserRef::Name {
                    name: "svc".into(),
                    domain: ("id", "d1".into()),
                },
            }
        );
        assert!(!format!("{by_name:?}").contains("\"s\""), "{by_name:?}");
        // The same from a clouds.yaml entry (openstacksdk's names).
        let yaml = "clouds:\n  openstack:\n    auth:\n      auth_url: https://ks/v3\n      \
                    trust_id: t2\n      user_id: u2\n      password: p2\n";
        let text = "[Global]\nuse-clouds=true\n[Route]\nrouter-id=r\n";
        let (c, _) = Config::from_cloud_conf(text, &cidrs(), |_| Ok(yaml.to_string())).unwrap();
        assert_eq!(
            c.credentials,
            Credentials::Trust {
                trust_id: "t2".into(),
                trustee: UserRef::Id("u2".into()),
                password: Secret::new("p2"),
            }
        );
        let yaml = yaml.replace("trust_id: t2", "application_credential_name: n2")
            + "      application_credential_secret: s2\n";
        let (c, _) = Config::from_cloud_conf(text, &cidrs(), |_| Ok(yaml.clone())).unwrap();
        assert_eq!(
            c.credentials,
            Credentials::ApplicationCredentialByName {
                name: "n2".into(),
                secret: Secret::new("s2"),
                user: UserRef::Id("u2".into()),
            }
        );
    }

    /// cloud-provider-openstack lets an unknown name pass (gcfg.FatalOnly); here it is
    /// a warning naming the closest known one, so that a typo is not lost.
    #[test]
    fn an_unknown_name_is_a_warning_naming_the_closest() {
        let text = "[Global]\nauth-url=x\napplication-credential-id=a\n\
                    application-credential-secret=b\n[Route]\nrouter-id=r\nrouter-idd=r\n";
        let (_, warnings) = Config::from_cloud_conf(text, &cidrs(), no_file).unwrap();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("did you mean router-id?"),
            "{warnings:?}"
        );
    }
}
