//! OAuth access tokens for the Compute API, from where operators have them: the
//! metadata server's service-account token (the default on GCE), a service-account
//! key file (`GOOGLE_APPLICATION_CREDENTIALS`, a JWT signed RS256 and exchanged at its
//! `token_uri`), or cloud-provider-gcp's alternate source (`token-url`/`token-body`).
//!
//! A token is reused until shortly before it expires ([`REFRESH_BEFORE`]) and
//! dropped when the API refuses it, so a pass of many requests fetches at most one.
//! Tokens, keys and `token-body` are held as [`Secret`]s and never logged or put into
//! an error message; messages name the source (file, URL) instead.

use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use serde::Deserialize;

use super::config::Credentials;
use crate::provider::{CloudError, CloudErrorKind};
use crate::secret::Secret;

/// A token is replaced when less than this is left of its life: a request sent with
/// it must still arrive and be checked before it expires.
pub const REFRESH_BEFORE: Duration = Duration::from_secs(60);

/// The scope asked of a key file's token: routes, instances, operations and the
/// project's quotas are all under it.
pub const COMPUTE_SCOPE: &str = "https://www.googleapis.com/auth/compute";

/// The path of the default service account's token on the metadata server.
pub const METADATA_TOKEN_PATH: &str = "/computeMetadata/v1/instance/service-accounts/default/token";

/// The largest token reply accepted.
const MAX_REPLY_BYTES: u64 = 1 << 20;

/// A service-account key file, the fields that matter.
#[derive(Deserialize)]
struct KeyFile {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    client_email: String,
    #[serde(default)]
    private_key: String,
    #[serde(default)]
    private_key_id: String,
    #[serde(default)]
    token_uri: String,
}

/// The loaded key: who signs, with what, and where the JWT is exchanged.
struct SigningKey {
    email: String,
    key_id: String,
    token_uri: String,
    key: ring::signature::RsaKeyPair,
}

/// The token in use and when to replace it.
struct Cached {
    token: Secret,
    refresh_at: Instant,
}

/// Where tokens come from, with the current one.
pub(super) struct TokenSource {
    credentials: Credentials,
    metadata_url: String,
    key: Option<SigningKey>,
    cached: Mutex<Option<Cached>>,
    /// For the token endpoints of a key file or `token-url`: through the proxy the
    /// environment names.
    agent: ureq::Agent,
    /// For the metadata server: never through a proxy. It is link-local, refuses
    /// proxied requests, and Google's own metadata client never proxies.
    metadata: ureq::Agent,
}

impl std::fmt::Debug for TokenSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenSource")
            .field("credentials", &self.credentials)
            .finish_non_exhaustive()
    }
}

/// A token reply of the metadata server or an OAuth token endpoint.
#[derive(Deserialize)]
struct OAuthToken {
    access_token: String,
    #[serde(default)]
    expires_in: Option<u64>,
}

/// A token reply of cloud-provider-gcp's alternate token source.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AltToken {
    access_token: String,
    #[serde(default)]
    expire_time: Option<String>,
}

impl TokenSource {
    /// Builds the source; a key file is read and its key parsed now, so that a bad
    /// file stops the start with a message naming it.
    pub(super) fn new(
        credentials: Credentials,
        metadata_url: &str,
        timeout: Duration,
        (trust, proxying): (&crate::Trust, &crate::Proxying),
    ) -> Result<TokenSource, CloudError> {
        let key = match &credentials {
            Credentials::KeyFile(path) => Some(load_key(path)?),
            _ => None,
        };
        let agent = |proxying: &crate::Proxying| -> ureq::Agent {
            crate::http::agent_config(trust, proxying)
                .http_status_as_error(false)
                .timeout_global(Some(timeout))
                .build()
                .into()
        };
        Ok(TokenSource {
            credentials,
            metadata_url: metadata_url.trim_end_matches('/').to_string(),
            key,
            cached: Mutex::new(None),
            agent: agent(proxying),
            metadata: agent(&crate::Proxying::Never),
        })
    }

    /// The token to send, fetched if there is none or it is about to expire; `None`
    /// with `token-url = nil`.
    pub(super) fn token(&self) -> Result<Option<Secret>, CloudError> {
        if self.credentials == Credentials::None {
            return Ok(None);
        }
        let now = Instant::now();
        let mut cached = crate::sync::lock(&self.cached);
        if let Some(c) = cached.as_ref().filter(|c| now < c.refresh_at) {
            return Ok(Some(c.token.clone()));
        }
        let (token, lifetime) = self.fetch()?;
        let refresh_at = now + lifetime.saturating_sub(REFRESH_BEFORE);
        *cached = Some(Cached {
            token: token.clone(),
            refresh_at,
        });
        Ok(Some(token))
    }

    /// A text value of the metadata server (`/computeMetadata/v1/project/project-id`).
    pub(super) fn metadata_text(&self, path: &str) -> Result<String, CloudError> {
        let url = format!("{}{path}", self.metadata_url);
        let what = format!("metadata {url}");
        let mut response = self
            .metadata
            .get(&url)
            .header("Metadata-Flavor", "Google")
            .call()
            .map_err(|e| {
                CloudError::new(
                    CloudErrorKind::Retry { after: None },
                    format!("gce: no reply from {what} ({e}); not on GCE? set it in gce.conf"),
                )
            })?;
        let status = response.status().as_u16();
        let text = response
            .body_mut()
            .with_config()
            .limit(MAX_REPLY_BYTES)
            .read_to_string()
            .map_err(|e| {
                CloudError::new(
                    CloudErrorKind::Retry { after: None },
                    format!("gce: {what}: {e}"),
                )
            })?;
        match status {
            200..=299 => Ok(text.trim().to_string()),
            500..=599 => Err(CloudError::new(
                CloudErrorKind::Retry { after: None },
                format!("gce: {what}: HTTP {status}"),
            )),
            _ => Err(CloudError::invalid(format!("gce: {what}: HTTP {status}"))),
        }
    }

    /// Forgets the current token: the API refused it (revoked, or expired early).
    pub(super) fn invalidate(&self) {
        *crate::sync::lock(&self.cached) = None;
    }

    /// A new token and how long it lives.
    fn fetch(&self) -> Result<(Secret, Duration), CloudError> {
        match &self.credentials {
            Credentials::Metadata | Credentials::None => self.metadata_token(),
            Credentials::KeyFile(path) => {
                let key = self.key.as_ref().ok_or_else(|| {
                    CloudError::invalid(format!("gce: key file {} not loaded", path.display()))
                })?;
                self.key_file_token(key, &path.display().to_string())
            }
            Credentials::TokenUrl { url, body } => self.alt_token(url, body),
        }
    }

    fn metadata_token(&self) -> Result<(Secret, Duration), CloudError> {
        let url = format!("{}{METADATA_TOKEN_PATH}", self.metadata_url);
        let what = format!("the metadata server's token ({url})");
        let reply = self
            .metadata
            .get(&url)
            .header("Metadata-Flavor", "Google")
            .call();
        let token: OAuthToken = decode(
            reply,
            &what,
            "run on GCE with a service account, or set GOOGLE_APPLICATION_CREDENTIALS to a key file",
        )?;
        Ok(oauth(token))
    }

    fn key_file_token(
        &self,
        key: &SigningKey,
        file: &str,
    ) -> Result<(Secret, Duration), CloudError> {
        let assertion = sign_jwt(key, unix_now())?;
        let form = format!(
            "grant_type={}&assertion={}",
            percent_encoding::utf8_percent_encode(
                "urn:ietf:params:oauth:grant-type:jwt-bearer",
                percent_encoding::NON_ALPHANUMERIC
            ),
            assertion.expose()
        );
        let what = format!(
            "a token for {} (key file {file}) from {}",
            key.email, key.token_uri
        );
        let reply = self
            .agent
            .post(&key.token_uri)
            .content_type("application/x-www-form-urlencoded")
            .send(form.as_bytes());
        let token: OAuthToken = decode(
            reply,
            &what,
            "check that the key is not deleted or disabled (gcloud iam service-accounts keys list)",
        )?;
        Ok(oauth(token))
    }

    fn alt_token(&self, url: &str, body: &Secret) -> Result<(Secret, Duration), CloudError> {
        // As cloud-provider-gcp does: the token URL is called with the instance's own
        // token from the metadata server.
        let (instance_token, _) = self.metadata_token()?;
        let what = format!("a token from token-url {url}");
        let reply = self
            .agent
            .post(url)
            .header(
                "Authorization",
                &format!("Bearer {}", instance_token.expose()),
            )
            .content_type("application/json")
            .send(body.expose().as_bytes());
        let token: AltToken = decode(reply, &what, "check token-url and token-body in gce.conf")?;
        let lifetime = token
            .expire_time
            .as_deref()
            .and_then(parse_rfc3339)
            .map(|at| Duration::from_secs(at.saturating_sub(unix_now())))
            // No expiry given: reuse it for five minutes.
            .unwrap_or(Duration::from_secs(300));
        Ok((Secret::new(token.access_token), lifetime))
    }
}

fn oauth(token: OAuthToken) -> (Secret, Duration) {
    let lifetime = Duration::from_secs(token.expires_in.unwrap_or(300));
    (Secret::new(token.access_token), lifetime)
}

/// Reads a token reply; failures name `what` and, for a refusal, the fix. The reply
/// body of a refusal is shown (token endpoints explain there, and never echo a
/// credential); a success body is not, as it holds the token.
fn decode<T: serde::de::DeserializeOwned>(
    reply: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    what: &str,
    fix: &str,
) -> Result<T, CloudError> {
    let mut response = reply.map_err(|e| {
        CloudError::new(
            CloudErrorKind::Retry { after: None },
            format!("gce: cannot get {what}: {e}"),
        )
    })?;
    let status = response.status().as_u16();
    let body = response
        .body_mut()
        .with_config()
        .limit(MAX_REPLY_BYTES)
        .read_to_vec()
        .map_err(|e| {
            CloudError::new(
                CloudErrorKind::Retry { after: None },
                format!("gce: cannot read {what}: {e}"),
            )
        })?;
    if !(200..300).contains(&status) {
        let text: String = String::from_utf8_lossy(&body).chars().take(300).collect();
        let kind = if status >= 500 || status == 429 {
            CloudErrorKind::Retry { after: None }
        } else {
            CloudErrorKind::Invalid
        };
        return Err(CloudError::new(
            kind,
            format!(
                "gce: {what} was refused (HTTP {status}: {}); {fix}",
                text.trim()
            ),
        ));
    }
    serde_json::from_slice(&body).map_err(|e| {
        CloudError::new(
            CloudErrorKind::Retry { after: None },
            format!("gce: {what}: the reply is not a token ({e})"),
        )
    })
}

fn load_key(path: &std::path::Path) -> Result<SigningKey, CloudError> {
    let shown = path.display();
    let text = std::fs::read_to_string(path).map_err(|e| {
        CloudError::invalid(format!(
            "gce: GOOGLE_APPLICATION_CREDENTIALS {shown}: cannot read: {e}"
        ))
    })?;
    let file: KeyFile = serde_json::from_str(&text).map_err(|e| {
        CloudError::invalid(format!(
            "gce: GOOGLE_APPLICATION_CREDENTIALS {shown}: not a key file ({e})"
        ))
    })?;
    if file.kind != "service_account" {
        return Err(CloudError::invalid(format!(
            "gce: GOOGLE_APPLICATION_CREDENTIALS {shown}: credentials of type {:?} are not \
             supported; {}",
            file.kind,
            instead_of(&file.kind)
        )));
    }
    let der = pem_body(&file.private_key).ok_or_else(|| {
        CloudError::invalid(format!(
            "gce: GOOGLE_APPLICATION_CREDENTIALS {shown}: private_key is not a PEM private key"
        ))
    })?;
    let key = ring::signature::RsaKeyPair::from_pkcs8(&der).map_err(|e| {
        CloudError::invalid(format!(
            "gce: GOOGLE_APPLICATION_CREDENTIALS {shown}: private_key is not an RSA PKCS#8 key ({e})"
        ))
    })?;
    if file.client_email.is_empty() {
        return Err(CloudError::invalid(format!(
            "gce: GOOGLE_APPLICATION_CREDENTIALS {shown}: client_email is missing"
        )));
    }
    let token_uri = match file.token_uri.as_str() {
        "" => "https://oauth2.googleapis.com/token".to_string(),
        uri => uri.to_string(),
    };
    Ok(SigningKey {
        email: file.client_email,
        key_id: file.private_key_id,
        token_uri,
        key,
    })
}

/// What to use instead of a credentials file this provider does not read. Workload
/// identity federation and impersonation each need an STS or IAM Credentials
/// exchange that cannot be tested here against Google, so they are refused by name
/// rather than half supported.
fn instead_of(kind: &str) -> &'static str {
    match kind {
        "external_account" => {
            "for workload identity federation, run on GKE with Workload Identity (the metadata \
             server then serves the federated token) or use a service-account key (type \
             service_account)"
        }
        "impersonated_service_account" => {
            "grant the route permissions to the service account itself and use its key (type \
             service_account), or run on GCE or GKE as that account through the metadata server"
        }
        _ => "use a service-account key (type service_account) or the metadata server",
    }
}

/// The DER inside a `-----BEGIN PRIVATE KEY-----` block.
fn pem_body(pem: &str) -> Option<Vec<u8>> {
    let start = pem.find("-----BEGIN PRIVATE KEY-----")? + "-----BEGIN PRIVATE KEY-----".len();
    let end = pem[start..].find("-----END PRIVATE KEY-----")? + start;
    let b64: String = pem[start..end]
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    base64::engine::general_purpose::STANDARD.decode(b64).ok()
}

/// The JWT a key file's token is asked with: RS256, for one hour, for the compute
/// scope, addressed to the key's token URI (RFC 7523, as Google's libraries send it).
/// How far back a JWT's `iat` is dated (Google's libraries: 10 s).
const CLOCK_SKEW_SECS: u64 = 10;

fn sign_jwt(key: &SigningKey, now: u64) -> Result<Secret, CloudError> {
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    // As golang.org/x/oauth2/jws: issued 10 s in the past, so that a node whose clock
    // runs a little ahead of Google's still gets a token (not `invalid_grant`).
    let now = now.saturating_sub(CLOCK_SKEW_SECS);
    let header = serde_json::json!({"alg": "RS256", "typ": "JWT", "kid": key.key_id});
    let claims = serde_json::json!({
        "iss": key.email,
        "scope": COMPUTE_SCOPE,
        "aud": key.token_uri,
        "iat": now,
        "exp": now + 3600,
    });
    let signing_input = format!(
        "{}.{}",
        b64(header.to_string().as_bytes()),
        b64(claims.to_string().as_bytes())
    );
    let mut signature = vec![0; key.key.public().modulus_len()];
    key.key
        .sign(
            &ring::signature::RSA_PKCS1_SHA256,
            &ring::rand::SystemRandom::new(),
            signing_input.as_bytes(),
            &mut signature,
        )
        .map_err(|_| CloudError::invalid("gce: cannot sign the key file's JWT"))?;
    Ok(Secret::new(format!("{signing_input}.{}", b64(&signature))))
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Seconds since the UNIX epoch of an RFC 3339 time (`2026-12-03T08:00:00.5+01:00`);
/// `None` if it is not one.
pub(super) fn parse_rfc3339(s: &str) -> Option<u64> {
    let s = s.trim();
    let (date, time) = s.split_once(['T', 't'])?;
    let mut d = date.split('-');
    let (y, m, day): (i64, i64, i64) = (
        d.next()?.parse().ok()?,
        d.next()?.parse().ok()?,
        d.next()?.parse().ok()?,
    );
    let (clock, offset) = if let Some(c) = time.strip_suffix(['Z', 'z']) {
        (c, 0i64)
    } else {
        let at = time.rfind(['+', '-'])?;
        let (c, o) = time.split_at(at);
        let sign = if o.starts_with('-') { -1 } else { 1 };
        let (oh, om) = o[1..].split_once(':')?;
        (
            c,
            sign * (oh.parse::<i64>().ok()? * 3600 + om.parse::<i64>().ok()? * 60),
        )
    };
    let clock = clock.split('.').next()?;
    let mut t = clock.split(':');
    let (h, min, sec): (i64, i64, i64) = (
        t.next()?.parse().ok()?,
        t.next()?.parse().ok()?,
        t.next()?.parse().ok()?,
    );
    if !(1..=12).contains(&m) || !(1..=31).contains(&day) || h > 23 || min > 59 || sec > 60 {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    u64::try_from(days * 86_400 + h * 3600 + min * 60 + sec - offset).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn test_key() -> SigningKey {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("testdata/gce/service-account-key.json");
        load_key(&path).expect("the test key loads")
    }

    #[test]
    fn the_jwt_is_rs256_over_header_and_claims_and_verifies_with_the_public_key() {
        let key = test_key();
        let jwt = sign_jwt(&key, 1_000).unwrap();
        let parts: Vec<&str> = jwt.expose().split('.').collect();
        assert_eq!(parts.len(), 3);
        let decode = |s: &str| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(s)
                .unwrap()
        };
        let header: serde_json::Value = serde_json::from_slice(&decode(parts[0])).unwrap();
        assert_eq!(header["alg"], "RS256");
        assert_eq!(header["kid"], key.key_id);
        let claims: serde_json::Value = serde_json::from_slice(&decode(parts[1])).unwrap();
        assert_eq!(
            claims["iss"],
            "route-controller@e2e-project.iam.gserviceaccount.com"
        );
        assert_eq!(claims["aud"], "https://oauth2.googleapis.com/token");
        assert_eq!(claims["scope"], COMPUTE_SCOPE);
        assert_eq!(
            (claims["iat"].as_u64(), claims["exp"].as_u64()),
            (Some(990), Some(4_590)),
            "back-dated 10 s as Google's libraries do, valid for an hour"
        );
        let public = ring::signature::UnparsedPublicKey::new(
            &ring::signature::RSA_PKCS1_2048_8192_SHA256,
            key.key.public().as_ref(),
        );
        let signed = format!("{}.{}", parts[0], parts[1]);
        public
            .verify(signed.as_bytes(), &decode(parts[2]))
            .expect("the signature verifies");
        assert!(public.verify(b"other", &decode(parts[2])).is_err());
    }

    #[test]
    fn bad_key_files_are_named_with_the_fix() {
        let dir = std::env::temp_dir().join(format!("rc-gce-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, text: &str| {
            let p = dir.join(name);
            std::fs::write(&p, text).unwrap();
            p
        };
        let user = write("user.json", r#"{"type": "authorized_user"}"#);
        let err = load_key(&user).err().unwrap().message;
        assert!(
            err.contains("authorized_user") && err.contains("service_account"),
            "{err}"
        );
        let federated = write("federated.json", r#"{"type": "external_account"}"#);
        let err = load_key(&federated).err().unwrap().message;
        assert!(
            err.contains("external_account") && err.contains("Workload Identity"),
            "{err}"
        );
        let impersonated = write("imp.json", r#"{"type": "impersonated_service_account"}"#);
        let err = load_key(&impersonated).err().unwrap().message;
        assert!(
            err.contains("impersonated_service_account") && err.contains("its key"),
            "{err}"
        );
        let garbage = write(
            "bad.json",
            r#"{"type": "service_account", "private_key": "x"}"#,
        );
        assert!(
            load_key(&garbage)
                .err()
                .unwrap()
                .message
                .contains("not a PEM private key")
        );
        let missing = load_key(&dir.join("none.json")).err().unwrap().message;
        assert!(missing.contains("cannot read"), "{missing}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn rfc3339_times_parse_with_offsets_and_fractions() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_rfc3339("2026-12-03T08:00:00Z"), Some(1_796_284_800));
        assert_eq!(
            parse_rfc3339("2026-12-03T09:00:00.25+01:00"),
            Some(1_796_284_800)
        );
        assert_eq!(
            parse_rfc3339("2000-02-29T00:00:00-00:30"),
            Some(951_784_200)
        );
        for bad in ["", "2026-13-01T00:00:00Z", "yesterday", "2026-12-03"] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_token_is_reused_until_shortly_before_it_expires_and_refetched_after_a_refusal() {
        use std::io::{BufRead, BufReader, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let served = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = served.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut flavor = false;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    flavor |= line.eq_ignore_ascii_case("metadata-flavor: google\r\n");
                }
                let n = count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                // The second token lives less than REFRESH_BEFORE: never reused.
                let body = match (flavor, n) {
                    (false, _) => "{}".to_string(),
                    (true, 1) => format!(r#"{{"access_token":"t{n}","expires_in":30}}"#),
                    (true, _) => format!(r#"{{"access_token":"t{n}","expires_in":3599}}"#),
                };
                let status = if flavor { "200 OK" } else { "403 Forbidden" };
                let mut out = stream;
                let _ = write!(
                    out,
                    "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        let source = TokenSource::new(
            Credentials::Metadata,
            &format!("http://{addr}"),
            Duration::from_secs(5),
            (&crate::Trust::new("test"), &crate::Proxying::Never),
        )
        .unwrap();
        let token = || source.token().unwrap().unwrap().expose().to_string();
        assert_eq!(token(), "t0");
        assert_eq!(token(), "t0", "reused");
        source.invalidate();
        assert_eq!(token(), "t1");
        assert_eq!(token(), "t2", "a token about to expire is replaced");
        assert_eq!(served.load(std::sync::atomic::Ordering::SeqCst), 3);
        assert!(!format!("{source:?}").contains("t2"));
    }
}
