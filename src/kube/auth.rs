//! Credentials that change while the controller runs: token files that the kubelet
//! rotates, and exec credential plugins whose tokens expire.
//!
//! [`TokenFile`] and [`ExecCache`] hold the caching rules and are told the time, so
//! tests check them with a virtual clock; `Authenticator` wraps them for the client
//! threads. Nothing here ever logs a token or a key.

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use base64::Engine as _;
use serde::Deserialize;

use super::config::{Auth, ExecConfig, Identity, KubeConfig, Secret};
use super::error::{KubeError, prefix};

/// A bearer token read from a file, re-read every `period` (client-go: one minute),
/// and at once after the server refused it. A failed re-read keeps the last good
/// token (kubernetes/kubernetes#68164): a rotation in progress must not cut the
/// controller off.
#[derive(Debug)]
pub struct TokenFile {
    path: PathBuf,
    period: Duration,
    token: Option<Secret>,
    read_at: Option<Instant>,
    force: bool,
}

impl TokenFile {
    pub fn new(path: PathBuf, period: Duration) -> TokenFile {
        TokenFile {
            path,
            period,
            token: None,
            read_at: None,
            force: false,
        }
    }

    /// The token to send at `now`, re-reading the file with `read` when due.
    pub fn token(
        &mut self,
        now: Instant,
        read: impl FnOnce(&Path) -> io::Result<String>,
    ) -> Result<Secret, KubeError> {
        let due = self.force
            || self.token.is_none()
            || self
                .read_at
                .is_none_or(|at| now.saturating_duration_since(at) >= self.period);
        if due {
            self.force = false;
            self.read_at = Some(now);
            match read(&self.path).map(|t| t.trim().to_string()) {
                Ok(t) if !t.is_empty() => self.token = Some(Secret::new(t)),
                Ok(_) => self.keep_last("the file is empty")?,
                Err(e) => self.keep_last(&e.to_string())?,
            }
        }
        self.token
            .clone()
            .ok_or_else(|| KubeError::Credentials(format!("no token in {}", self.path.display())))
    }

    fn keep_last(&mut self, problem: &str) -> Result<(), KubeError> {
        match &self.token {
            Some(_) => {
                log::warn!(
                    "cannot re-read the token file {}: {problem}; keeping the last token read",
                    self.path.display()
                );
                Ok(())
            }
            None => Err(KubeError::Credentials(format!(
                "cannot read the token file {}: {problem}",
                self.path.display()
            ))),
        }
    }

    /// The server refused the token: read the file again before the next request.
    pub fn invalidate(&mut self) {
        self.force = true;
    }
}

/// What an exec plugin returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecCredential {
    pub token: Option<Secret>,
    pub identity: Option<Identity>,
    /// `status.expirationTimestamp`; `None` means valid until the server refuses it.
    pub expires: Option<SystemTime>,
}

/// A credential is renewed this long before it expires, so that a request does not
/// set out with a token that expires on the way.
pub const EXEC_EXPIRY_MARGIN: Duration = Duration::from_secs(10);

/// Runs an exec credential plugin when needed and caches its answer until shortly
/// before it expires, or until the server refuses it.
#[derive(Debug)]
pub struct ExecCache {
    config: ExecConfig,
    /// `KUBERNETES_EXEC_INFO`, built once.
    exec_info: String,
    cached: Option<ExecCredential>,
}

impl ExecCache {
    /// `cluster` is `(server, CA PEM)`, passed to the plugin when it asks for it.
    pub fn new(config: ExecConfig, cluster: Option<(&str, Option<&[u8]>)>) -> ExecCache {
        let mut spec = serde_json::json!({ "interactive": false });
        if let (true, Some((server, ca))) = (config.provide_cluster_info, cluster) {
            let mut c = serde_json::json!({ "server": server });
            if let Some(ca) = ca {
                c["certificate-authority-data"] =
                    base64::engine::general_purpose::STANDARD.encode(ca).into();
            }
            spec["cluster"] = c;
        }
        let exec_info = serde_json::json!({
            "apiVersion": config.api_version,
            "kind": "ExecCredential",
            "spec": spec,
        })
        .to_string();
        ExecCache {
            config,
            exec_info,
            cached: None,
        }
    }

    /// The credential to use at wall-clock time `now`, running the plugin with `run`
    /// (given the config and `KUBERNETES_EXEC_INFO`) when the cache is empty or
    /// expiring.
    pub fn credential(
        &mut self,
        now: SystemTime,
        run: impl FnOnce(&ExecConfig, &str) -> Result<Vec<u8>, String>,
    ) -> Result<ExecCredential, KubeError> {
        let fresh = self
            .cached
            .as_ref()
            .is_some_and(|c| c.expires.is_none_or(|exp| now + EXEC_EXPIRY_MARGIN < exp));
        if !fresh {
            let output = run(&self.config, &self.exec_info).map_err(KubeError::Credentials)?;
            self.cached = Some(parse_exec_output(&output, &self.config)?);
        }
        self.cached
            .clone()
            .ok_or_else(|| KubeError::Credentials("exec plugin gave no credential".into()))
    }

    /// The server refused the credential: run the plugin again next time.
    pub fn invalidate(&mut self) {
        self.cached = None;
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireExecCredential {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    status: Option<WireExecStatus>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct WireExecStatus {
    token: Option<String>,
    client_certificate_data: Option<String>,
    client_key_data: Option<String>,
    expiration_timestamp: Option<String>,
}

/// Parses a plugin's stdout: an `ExecCredential` in JSON, or in YAML as some plugins
/// print it.
pub fn parse_exec_output(output: &[u8], config: &ExecConfig) -> Result<ExecCredential, KubeError> {
    let fail = |m: String| KubeError::Credentials(format!("exec plugin {:?}: {m}", config.command));
    let wire: WireExecCredential = match serde_json::from_slice(output) {
        Ok(w) => w,
        Err(json_err) => {
            let text = String::from_utf8_lossy(output);
            serde_saphyr::from_str(&text).map_err(|_| {
                fail(format!(
                    "its output is not an ExecCredential ({json_err}); {} bytes",
                    output.len()
                ))
            })?
        }
    };
    if wire.kind != "ExecCredential" {
        return Err(fail(format!(
            "its output has kind {:?}, expected ExecCredential",
            wire.kind
        )));
    }
    if wire.api_version != config.api_version {
        return Err(fail(format!(
            "it returned apiVersion {:?} but the kubeconfig asks for {:?}",
            wire.api_version, config.api_version
        )));
    }
    let status = wire
        .status
        .ok_or_else(|| fail("its output has no status".into()))?;
    let expires = match &status.expiration_timestamp {
        Some(ts) if !ts.is_empty() => Some(
            parse_rfc3339(ts)
                .map_err(|e| fail(format!("expirationTimestamp {ts:?} is not RFC 3339: {e}")))?,
        ),
        _ => None,
    };
    let identity = match (status.client_certificate_data, status.client_key_data) {
        (Some(cert), Some(key)) if !cert.is_empty() && !key.is_empty() => Some(Identity {
            cert_pem: cert.into_bytes(),
            key_pem: key.into_bytes(),
            origin: format!("client certificate from exec plugin {:?}", config.command),
        }),
        (None, None) => None,
        _ => {
            return Err(fail(
                "it returned only one of clientCertificateData and clientKeyData".into(),
            ));
        }
    };
    let token = status.token.filter(|t| !t.is_empty()).map(Secret::new);
    if token.is_none() && identity.is_none() {
        return Err(fail(
            "its status has neither a token nor a client certificate".into(),
        ));
    }
    Ok(ExecCredential {
        token,
        identity,
        expires,
    })
}

pub(crate) fn parse_rfc3339(ts: &str) -> Result<SystemTime, String> {
    let t: k8s_openapi::jiff::Timestamp = ts.parse().map_err(|e| format!("{e}"))?;
    let nanos = u64::try_from(t.as_nanosecond()).map_err(|_| "before 1970".to_string())?;
    Ok(SystemTime::UNIX_EPOCH + Duration::from_nanos(nanos))
}

/// How long an exec plugin may run. A hanging plugin would otherwise hold every request
/// of the client; client-go has no limit, kubectl users see the hang, a daemon must not.
pub const EXEC_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs the plugin as client-go does: no stdin (a daemon is never interactive), the
/// configured extra environment, and `KUBERNETES_EXEC_INFO`; killed after `timeout`.
pub fn run_exec_plugin(config: &ExecConfig, exec_info: &str) -> Result<Vec<u8>, String> {
    run_exec_plugin_with_timeout(config, exec_info, EXEC_TIMEOUT)
}

pub fn run_exec_plugin_with_timeout(
    config: &ExecConfig,
    exec_info: &str,
    timeout: Duration,
) -> Result<Vec<u8>, String> {
    let mut cmd = Command::new(&config.command);
    cmd.args(&config.args)
        .env("KUBERNETES_EXEC_INFO", exec_info)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for var in &config.env {
        cmd.env(&var.name, &var.value);
    }
    let mut child = cmd.spawn().map_err(|e| {
        let hint = config
            .install_hint
            .as_deref()
            .map(|h| format!("; {}", h.trim()))
            .unwrap_or_default();
        format!("cannot run exec plugin {:?}: {e}{hint}", config.command)
    })?;
    // Read both pipes while waiting, so that a chatty plugin cannot block on a full pipe.
    let read = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            buf
        })
    };
    let stdout = read(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
    );
    let stderr = read(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
    );
    let deadline = std::time::Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if std::time::Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "exec plugin {:?} did not finish within {}; killed it",
                    config.command,
                    crate::duration::format(timeout)
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(format!("exec plugin {:?}: {e}", config.command)),
        }
    };
    let stdout = stdout.join().unwrap_or_default();
    let stderr = stderr.join().unwrap_or_default();
    if !status.success() {
        return Err(format!(
            "exec plugin {:?} failed ({}): {}",
            config.command,
            status,
            prefix(&stderr, 300).trim()
        ));
    }
    Ok(stdout)
}

// ---------------------------------------------------------------------------------

/// What a request presents: an `Authorization` header and possibly a client
/// certificate (from the kubeconfig or an exec plugin).
#[derive(Clone, Debug, Default)]
pub(crate) struct Credentials {
    pub authorization: Option<Secret>,
    pub identity: Option<Identity>,
}

/// The credential source of a client, shared by its threads.
#[derive(Debug)]
pub(crate) struct Authenticator {
    source: Mutex<Source>,
    static_identity: Option<Identity>,
}

#[derive(Debug)]
enum Source {
    None,
    Header(Secret),
    TokenFile(TokenFile),
    Exec(ExecCache),
}

impl Authenticator {
    pub fn new(config: &KubeConfig, token_refresh: Duration) -> Authenticator {
        let source = match &config.auth {
            Auth::None => Source::None,
            Auth::Token(t) => Source::Header(Secret::new(format!("Bearer {}", t.expose()))),
            Auth::Basic { username, password } => {
                let raw = format!("{username}:{}", password.expose());
                Source::Header(Secret::new(format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode(raw)
                )))
            }
            Auth::TokenFile(path) => Source::TokenFile(TokenFile::new(path.clone(), token_refresh)),
            Auth::Exec(exec) => Source::Exec(ExecCache::new(
                exec.clone(),
                Some((config.server.as_str(), config.tls.ca_pem.as_deref())),
            )),
        };
        Authenticator {
            source: Mutex::new(source),
            static_identity: config.tls.identity.clone(),
        }
    }

    pub fn current(&self) -> Result<Credentials, KubeError> {
        let mut source = crate::sync::lock(&self.source);
        let mut creds = Credentials {
            authorization: None,
            identity: self.static_identity.clone(),
        };
        match &mut *source {
            Source::None => {}
            Source::Header(h) => creds.authorization = Some(h.clone()),
            Source::TokenFile(f) => {
                let t = f.token(Instant::now(), |p| std::fs::read_to_string(p))?;
                creds.authorization = Some(Secret::new(format!("Bearer {}", t.expose())));
            }
            Source::Exec(e) => {
                let c = e.credential(SystemTime::now(), run_exec_plugin)?;
                if let Some(t) = c.token {
                    creds.authorization = Some(Secret::new(format!("Bearer {}", t.expose())));
                }
                if c.identity.is_some() {
                    creds.identity = c.identity;
                }
            }
        }
        Ok(creds)
    }

    /// The server answered 401: drop cached credentials. Returns whether fetching them
    /// again may help (a token file or a plugin may have new ones).
    pub fn unauthorized(&self) -> bool {
        let mut source = crate::sync::lock(&self.source);
        match &mut *source {
            Source::TokenFile(f) => {
                f.invalidate();
                true
            }
            Source::Exec(e) => {
                e.invalidate();
                true
            }
            Source::None | Source::Header(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_file_is_re_read_after_the_period_and_after_a_refusal() {
        let t0 = Instant::now();
        let mut f = TokenFile::new("/t".into(), Duration::from_secs(60));
        let mut reads = 0;
        let mut read = |v: &'static str| {
            reads += 1;
            move |_: &Path| Ok(v.to_string())
        };
        assert_eq!(f.token(t0, read("a")).unwrap().expose(), "a");
        // Within the period the cached token is used; the reader is not called.
        let t = f.token(t0 + Duration::from_secs(59), |_| panic!("read too early"));
        assert_eq!(t.unwrap().expose(), "a");
        assert_eq!(
            f.token(t0 + Duration::from_secs(60), read("b\n"))
                .unwrap()
                .expose(),
            "b"
        );
        f.invalidate();
        assert_eq!(
            f.token(t0 + Duration::from_secs(61), read("c"))
                .unwrap()
                .expose(),
            "c"
        );
        assert_eq!(reads, 3);
    }

    #[test]
    fn token_file_keeps_the_last_good_token_when_a_re_read_fails() {
        let t0 = Instant::now();
        let mut f = TokenFile::new("/t".into(), Duration::from_secs(60));
        assert!(f.token(t0, |_| Err(io::Error::other("gone"))).is_err());
        f.token(t0, |_| Ok("good".into())).unwrap();
        let later = t0 + Duration::from_secs(120);
        assert_eq!(
            f.token(later, |_| Err(io::Error::other("rotating")))
                .unwrap()
                .expose(),
            "good"
        );
        assert_eq!(
            f.token(later, |_| Ok("   ".into())).unwrap().expose(),
            "good",
            "an empty file (mid-write) keeps the last token"
        );
    }

    fn exec_config(api_version: &str) -> ExecConfig {
        ExecConfig {
            api_version: api_version.into(),
            command: "plugin".into(),
            args: vec![],
            env: vec![],
            provide_cluster_info: true,
            install_hint: None,
        }
    }

    #[test]
    fn exec_credential_is_cached_until_shortly_before_expiry() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let mut cache = ExecCache::new(
            exec_config("client.authentication.k8s.io/v1"),
            Some(("https://k", Some(b"CA"))),
        );
        let out = |token: &str| {
            format!(
                r#"{{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential",
                   "status":{{"token":"{token}","expirationTimestamp":"2027-01-15T08:10:00Z"}}}}"#
            )
            .into_bytes()
        };
        let mut infos = Vec::new();
        let c = cache
            .credential(t0, |_, info| {
                infos.push(info.to_string());
                Ok(out("one"))
            })
            .unwrap();
        assert_eq!(c.token.unwrap().expose(), "one");
        let expires = c.expires.unwrap();
        let info: serde_json::Value = serde_json::from_str(&infos[0]).unwrap();
        assert_eq!(info["spec"]["interactive"], false);
        assert_eq!(info["spec"]["cluster"]["server"], "https://k");
        // Well before expiry: cached.
        let c = cache
            .credential(expires - Duration::from_secs(60), |_, _| Err("no".into()))
            .unwrap();
        assert_eq!(c.token.unwrap().expose(), "one");
        // Within the margin: the plugin runs again.
        let c = cache
            .credential(expires - Duration::from_secs(5), |_, _| Ok(out("two")))
            .unwrap();
        assert_eq!(c.token.unwrap().expose(), "two");
        cache.invalidate();
        let c = cache.credential(t0, |_, _| Ok(out("three"))).unwrap();
        assert_eq!(c.token.unwrap().expose(), "three");
    }

    #[test]
    fn exec_output_in_yaml_and_v1beta1_is_accepted_and_version_mismatch_is_not() {
        let beta = exec_config("client.authentication.k8s.io/v1beta1");
        let yaml = b"apiVersion: client.authentication.k8s.io/v1beta1\nkind: ExecCredential\nstatus:\n  token: tok\n";
        let c = parse_exec_output(yaml, &beta).unwrap();
        assert_eq!(c.token.unwrap().expose(), "tok");
        assert_eq!(c.expires, None);
        let v1 = exec_config("client.authentication.k8s.io/v1");
        let e = parse_exec_output(yaml, &v1).unwrap_err().to_string();
        assert!(e.contains("v1beta1") && e.contains("asks for"), "{e}");
        let e = parse_exec_output(b"not a credential", &v1)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not an ExecCredential"), "{e}");
    }

    #[test]
    fn credentials_never_show_in_debug_output() {
        let c = ExecCredential {
            token: Some(Secret::new("s3cr3t")),
            identity: Some(Identity {
                cert_pem: b"CERT".to_vec(),
                key_pem: b"PRIVATEKEY".to_vec(),
                origin: "test".into(),
            }),
            expires: None,
        };
        let debug = format!("{c:?}");
        assert!(
            !debug.contains("s3cr3t") && !debug.contains("PRIVATEKEY"),
            "{debug}"
        );
    }

    #[test]
    fn a_plugin_that_hangs_is_killed_after_the_timeout() {
        let config = ExecConfig {
            command: "sleep".into(),
            args: vec!["30".into()],
            ..exec_config("client.authentication.k8s.io/v1")
        };
        let start = std::time::Instant::now();
        let err =
            run_exec_plugin_with_timeout(&config, "{}", Duration::from_millis(300)).unwrap_err();
        assert!(err.contains("did not finish within 300ms"), "{err}");
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "waited {:?}",
            start.elapsed()
        );
    }
}
