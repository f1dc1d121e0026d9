//! The profile of the shared config and credentials files, as the AWS SDKs read it:
//! `AWS_PROFILE` (default `default`), its `[profile NAME]` section in the config file
//! (`AWS_CONFIG_FILE`, default `~/.aws/config`) and its `[NAME]` section in the
//! credentials file (`AWS_SHARED_CREDENTIALS_FILE`, default `~/.aws/credentials`),
//! whose settings win.
//!
//! What a profile may hold, in the order it is read (the Go SDK's): `role_arn` with
//! `source_profile` (another profile's credentials, chains allowed, loops refused),
//! `credential_source` (`Environment`, `Ec2InstanceMetadata`, `EcsContainer`) or
//! `web_identity_token_file`, and `role_session_name`, `external_id`,
//! `duration_seconds`; static keys (`aws_access_key_id`, `aws_secret_access_key`,
//! `aws_session_token`); `credential_process`. A profile with none of these leaves
//! the chain to go on (container, instance role).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::credentials::{AwsEnv, CredentialSource, Credentials, Resolver, parse_ini};
use super::process::Process;
use super::sts::AssumeRoleSettings;
use crate::provider::CloudError;

type Sections = BTreeMap<String, BTreeMap<String, String>>;

/// The two files, each when it exists.
struct Files {
    config: Option<(PathBuf, Sections)>,
    credentials: Option<(PathBuf, Sections)>,
}

/// One profile's settings, merged from both files.
struct Profile {
    name: String,
    settings: BTreeMap<String, String>,
    /// `profile "dev" in /home/u/.aws/credentials`, for messages.
    origin: String,
}

impl Profile {
    fn get(&self, key: &str) -> Option<&str> {
        self.settings
            .get(key)
            .map(|v| v.trim())
            .filter(|v| !v.is_empty())
    }
}

/// The chain's profile step: `None` when no profile applies or it names no
/// credentials.
pub(super) fn resolve(resolver: &mut Resolver) -> Result<Option<CredentialSource>, CloudError> {
    let env = resolver.env;
    let files = load(env)?;
    let name = env.profile();
    let Some(profile) = files.profile(name) else {
        if env.var("AWS_PROFILE").is_some() {
            return Err(CloudError::invalid(format!(
                "AWS_PROFILE is {name:?} but {} has no [{name}] section and {} no [profile \
                 {name}]",
                display(env.home_file("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials")),
                display(env.home_file("AWS_CONFIG_FILE", ".aws/config")),
            )));
        }
        return Ok(None);
    };
    let mut visited = vec![profile.name.clone()];
    from_profile(resolver, &files, &profile, &mut visited)
}

fn from_profile(
    resolver: &mut Resolver,
    files: &Files,
    profile: &Profile,
    visited: &mut Vec<String>,
) -> Result<Option<CredentialSource>, CloudError> {
    if let Some(role_arn) = profile.get("role_arn") {
        let role = role_settings(profile, role_arn)?;
        let source = match (
            profile.get("source_profile"),
            profile.get("credential_source"),
            profile.get("web_identity_token_file"),
        ) {
            (Some(_), Some(_), _) => {
                return Err(CloudError::invalid(format!(
                    "{} has both source_profile and credential_source: keep one",
                    profile.origin
                )));
            }
            (None, None, Some(token_file)) => {
                return resolver
                    .web_identity(
                        role_arn,
                        PathBuf::from(token_file),
                        profile.get("role_session_name"),
                    )
                    .map(Some);
            }
            (Some(source), None, _) => source_profile(resolver, files, profile, source, visited)?,
            (None, Some(source), _) => credential_source(resolver, profile, source)?,
            (None, None, None) => {
                return Err(CloudError::invalid(format!(
                    "{} has role_arn but no source_profile, credential_source or \
                     web_identity_token_file to assume it with",
                    profile.origin
                )));
            }
        };
        return resolver.assume_role(source, role).map(Some);
    }
    if let Some(source) = static_keys(profile)? {
        return Ok(Some(source));
    }
    if let Some(command) = profile.get("credential_process") {
        return Ok(Some(CredentialSource::Temporary(
            super::credentials::Refreshing::new(Process {
                command: command.to_string(),
                timeout: resolver.settings.process_timeout,
                profile: profile.origin.clone(),
            }),
        )));
    }
    Ok(None)
}

fn role_settings(profile: &Profile, role_arn: &str) -> Result<AssumeRoleSettings, CloudError> {
    let mut role = AssumeRoleSettings::new(role_arn, &profile.origin);
    role.session_name = profile.get("role_session_name").map(str::to_string);
    role.external_id = profile.get("external_id").map(str::to_string);
    if let Some(seconds) = profile.get("duration_seconds") {
        // STS takes 15 minutes to 12 hours (and at most the role's own maximum).
        let seconds = seconds
            .parse::<u32>()
            .ok()
            .filter(|s| (900..=43_200).contains(s))
            .ok_or_else(|| {
                CloudError::invalid(format!(
                    "{}: duration_seconds {seconds:?} is not a number of seconds from 900 to \
                     43200",
                    profile.origin
                ))
            })?;
        role.duration_seconds = Some(seconds);
    }
    Ok(role)
}

fn source_profile(
    resolver: &mut Resolver,
    files: &Files,
    profile: &Profile,
    source: &str,
    visited: &mut Vec<String>,
) -> Result<CredentialSource, CloudError> {
    if source == profile.name {
        // A profile may be its own source: its keys assume its role.
        return static_keys(profile)?.ok_or_else(|| {
            CloudError::invalid(format!(
                "{} is its own source_profile but has no aws_access_key_id and \
                 aws_secret_access_key",
                profile.origin
            ))
        });
    }
    if visited.iter().any(|v| v == source) {
        visited.push(source.to_string());
        return Err(CloudError::invalid(format!(
            "the source_profile settings loop: {}",
            visited.join(" -> ")
        )));
    }
    visited.push(source.to_string());
    let Some(next) = files.profile(source) else {
        return Err(CloudError::invalid(format!(
            "{} names source_profile {source:?}, which neither file has",
            profile.origin
        )));
    };
    from_profile(resolver, files, &next, visited)?.ok_or_else(|| {
        CloudError::invalid(format!(
            "{}'s source_profile {source:?} holds no credentials (keys, role_arn or \
             credential_process)",
            profile.origin
        ))
    })
}

fn credential_source(
    resolver: &mut Resolver,
    profile: &Profile,
    source: &str,
) -> Result<CredentialSource, CloudError> {
    let missing = |what: &str| {
        CloudError::invalid(format!(
            "{} has credential_source {source} but {what}",
            profile.origin
        ))
    };
    match source {
        "Environment" => resolver
            .environment_keys()?
            .ok_or_else(|| missing("AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not set")),
        "Ec2InstanceMetadata" => resolver
            .instance_role()
            .ok_or_else(|| missing("the instance metadata service is disabled")),
        "EcsContainer" => resolver.container()?.ok_or_else(|| {
            missing(
                "neither AWS_CONTAINER_CREDENTIALS_RELATIVE_URI nor \
                 AWS_CONTAINER_CREDENTIALS_FULL_URI is set",
            )
        }),
        other => Err(CloudError::invalid(format!(
            "{}: credential_source {other:?} is not Environment, Ec2InstanceMetadata or \
             EcsContainer",
            profile.origin
        ))),
    }
}

fn static_keys(profile: &Profile) -> Result<Option<CredentialSource>, CloudError> {
    let (id, secret) = (
        profile.get("aws_access_key_id"),
        profile.get("aws_secret_access_key"),
    );
    let credentials = match (id, secret) {
        (None, None) => return Ok(None),
        (Some(id), Some(secret)) => Credentials::new(id, secret),
        _ => {
            return Err(CloudError::invalid(format!(
                "{} needs both aws_access_key_id and aws_secret_access_key",
                profile.origin
            )));
        }
    };
    let credentials = match profile.get("aws_session_token") {
        Some(token) => credentials.with_session_token(token),
        None => credentials,
    };
    Ok(Some(CredentialSource::Static {
        credentials,
        origin: profile.origin.clone(),
    }))
}

fn load(env: &AwsEnv) -> Result<Files, CloudError> {
    Ok(Files {
        config: read(env, "AWS_CONFIG_FILE", ".aws/config", "config")?,
        credentials: read(
            env,
            "AWS_SHARED_CREDENTIALS_FILE",
            ".aws/credentials",
            "credentials",
        )?,
    })
}

/// A file named by `var` must exist; the default one may be missing.
fn read(
    env: &AwsEnv,
    var: &str,
    default: &str,
    what: &str,
) -> Result<Option<(PathBuf, Sections)>, CloudError> {
    let Some(path) = env.home_file(var, default) else {
        return Ok(None);
    };
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(Some((path, parse_ini(&text)))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if env.var(var).is_some() {
                return Err(CloudError::invalid(format!(
                    "{var} names {}, which does not exist",
                    path.display()
                )));
            }
            Ok(None)
        }
        Err(e) => Err(CloudError::invalid(format!(
            "cannot read the AWS {what} file {}: {e}",
            path.display()
        ))),
    }
}

impl Files {
    fn profile(&self, name: &str) -> Option<Profile> {
        let config_section = if name == "default" {
            "default".to_string()
        } else {
            format!("profile {name}")
        };
        let mut settings = BTreeMap::new();
        let mut found_in: Vec<&Path> = Vec::new();
        if let Some((path, sections)) = &self.config
            && let Some(section) = sections.get(&config_section)
        {
            settings.extend(section.clone());
            found_in.push(path);
        }
        if let Some((path, sections)) = &self.credentials
            && let Some(section) = sections.get(name)
        {
            settings.extend(section.clone());
            found_in.push(path);
        }
        if found_in.is_empty() {
            return None;
        }
        let files: Vec<String> = found_in.iter().map(|p| p.display().to_string()).collect();
        Some(Profile {
            name: name.to_string(),
            settings,
            origin: format!("profile {name:?} in {}", files.join(" and ")),
        })
    }
}

fn display(path: Option<PathBuf>) -> String {
    path.map(|p| p.display().to_string())
        .unwrap_or_else(|| "(HOME is not set)".into())
}
