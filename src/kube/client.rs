//! The blocking HTTP client for the API server, on ureq.
//!
//! One [`Client`] per connection purpose: ordinary calls share one agent (a pool of
//! keep-alive connections); a long-lived stream (the watch) gets its own agent from
//! [`Client::streaming`], with an idle timeout per read instead of a total timeout, so
//! that stopping or timing out the watch never disturbs the other calls.
//!
//! Every non-2xx answer is decoded into an [`ApiError`] (ureq is told not to turn
//! statuses into errors, which would drop the `Status` body). Writes pass a
//! client-side rate limiter (`--kube-api-qps`/`--kube-api-burst`). A 401 makes the
//! client fetch its credentials again (token file, exec plugin) and retry once.
//! TLS material is validated when the client is built, never at the first request.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use ureq::Agent;
use ureq::http::{self, Response};
use ureq::tls::{Certificate, ClientCert, PemItem, PrivateKey, RootCerts, TlsConfig};

use super::auth::{Authenticator, Credentials};
use super::config::{ConfigError, Identity, KubeConfig, TlsSettings};
use super::error::{ApiError, KubeError};
use super::stop::StopHandle;
use crate::ratelimit::RateLimiter;

/// Settings of the HTTP client. See [`ClientOptions::default`] for the defaults.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// Writes per second (`--kube-api-qps`, default 20, as the CCM).
    pub qps: f64,
    /// Writes allowed at once before the rate applies (`--kube-api-burst`, default 30).
    pub burst: u32,
    /// The `User-Agent` header (default `route-controller/<version>`).
    pub user_agent: String,
    /// Total time for an ordinary request, body included (default 30 s).
    pub timeout: Duration,
    /// TCP connect plus TLS handshake (default 10 s).
    pub connect_timeout: Duration,
    /// Largest body of a list page (default 64 MiB: 500 nodes of up to ~130 KiB of
    /// JSON each, images and managed fields included). ureq's own default, 10 MB, is
    /// too small for 500 large nodes.
    pub list_body_limit: u64,
    /// How often a token file is re-read (default 60 s, as client-go).
    pub token_refresh: Duration,
    /// The proxy when the kubeconfig names none (`proxy-url`, which wins): default
    /// as `HTTPS_PROXY`, `HTTP_PROXY` and `NO_PROXY` say, as client-go reads them.
    pub proxying: crate::Proxying,
}

impl Default for ClientOptions {
    fn default() -> ClientOptions {
        ClientOptions {
            qps: 20.0,
            burst: 30,
            user_agent: format!("route-controller/{}", env!("CARGO_PKG_VERSION")),
            timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            list_body_limit: 64 << 20,
            token_refresh: Duration::from_secs(60),
            proxying: crate::Proxying::from_process(),
        }
    }
}

/// What an operator sets to trust the API server's CA, named when its certificate
/// does not verify.
const KUBE_CA_OPTION: &str = "certificate-authority in the kubeconfig";

/// Bodies of error answers and small objects are read up to this size.
const SMALL_BODY_LIMIT: u64 = 10 << 20;

/// A Kubernetes API client. Cheap to clone; clones share the connection pool, the
/// credentials and the write rate limiter.
#[derive(Clone)]
pub struct Client {
    shared: Arc<Shared>,
    agent: Arc<Mutex<AgentSlot>>,
    /// `Some(idle timeout)` for a streaming client.
    stream_idle: Option<Duration>,
    stop: Option<StopHandle>,
}

struct Shared {
    server: String,
    tls: TlsSettings,
    proxy: crate::Proxying,
    auth: Authenticator,
    /// The API server's QPS for our writes (`--kube-api-qps`), as client-go keeps it.
    /// Not the cloud's budget, which the controller spends (`controller/budget.rs`):
    /// the status writer may wait here, since a condition write has nothing to re-plan.
    writes: RateLimiter,
    options: ClientOptions,
}

#[derive(Default)]
struct AgentSlot {
    agent: Option<Agent>,
    /// The client certificate the agent presents; an exec plugin may change it.
    identity: Option<Identity>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("server", &self.shared.server)
            .field("streaming", &self.stream_idle.is_some())
            .finish()
    }
}

/// An HTTP method the client uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Get,
    Post,
    Put,
    Patch,
}

impl Method {
    fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Patch => "PATCH",
        }
    }
}

impl Client {
    /// Builds a client and checks its TLS material (CA, client certificate and key
    /// match) and its credentials now, so that a bad file fails at startup with a
    /// message naming it.
    pub fn new(config: &KubeConfig, options: ClientOptions) -> Result<Client, ConfigError> {
        // As client-go: the kubeconfig's proxy-url, else the proxy variables.
        let proxy = match &config.proxy_url {
            Some(url) => crate::Proxying::Always(ureq::Proxy::new(url).map_err(|e| {
                ConfigError(format!("kubeconfig proxy-url {url:?} is not usable: {e}"))
            })?),
            None => options.proxying.clone(),
        };
        if config.tls.insecure_skip_verify {
            log::warn!(
                "TLS VERIFICATION IS DISABLED for {} (insecure-skip-tls-verify in {}): anyone \
                 on the network path can impersonate the API server and steal the credentials. \
                 Use certificate-authority(-data) instead.",
                config.server,
                config.source
            );
        }
        if config.server.starts_with("http://") {
            log::warn!(
                "the API server {} is reached over plain HTTP; credentials travel unencrypted",
                config.server
            );
        }
        let shared = Shared {
            server: config.server.clone(),
            tls: config.tls.clone(),
            proxy,
            auth: Authenticator::new(config, options.token_refresh),
            writes: RateLimiter::new(options.qps, options.burst),
            options,
        };
        let client = Client {
            shared: Arc::new(shared),
            agent: Arc::new(Mutex::new(AgentSlot::default())),
            stream_idle: None,
            stop: None,
        };
        // Builds the agent now: validates the CA and the certificate/key pair.
        let creds = client
            .shared
            .auth
            .current()
            .map_err(|e| ConfigError(format!("{e} (from {})", config.source)))?;
        client.agent_for(&creds).map_err(|e| match e {
            KubeError::Credentials(m) => ConfigError(m),
            other => ConfigError(other.to_string()),
        })?;
        Ok(client)
    }

    /// A client for one long-lived stream: its own agent, an idle timeout of
    /// `idle_timeout` per read instead of a total timeout, and interrupted by `stop`.
    pub fn streaming(&self, idle_timeout: Duration, stop: &StopHandle) -> Client {
        Client {
            shared: self.shared.clone(),
            agent: Arc::new(Mutex::new(AgentSlot::default())),
            stream_idle: Some(idle_timeout),
            stop: Some(stop.clone()),
        }
    }

    /// The API server's base URL.
    pub fn server(&self) -> &str {
        &self.shared.server
    }

    pub fn options(&self) -> &ClientOptions {
        &self.shared.options
    }

    /// `GET path` and decode the JSON answer (at most 10 MiB).
    pub fn get_json<T: DeserializeOwned>(&self, path: &str) -> Result<T, KubeError> {
        let resp = self.send(Method::Get, path, None, None, None)?;
        decode(resp, &self.url(path), SMALL_BODY_LIMIT)
    }

    /// `GET path` with a total timeout of `timeout` instead of the client's.
    pub fn get_json_timeout<T: DeserializeOwned>(
        &self,
        path: &str,
        timeout: Duration,
    ) -> Result<T, KubeError> {
        let resp = self.send(Method::Get, path, None, None, Some(timeout))?;
        decode(resp, &self.url(path), SMALL_BODY_LIMIT)
    }

    /// `GET path` and decode the JSON answer, allowing a body of up to `limit` bytes;
    /// the body is decoded while it is read, without buffering it whole.
    pub fn get_json_large<T: DeserializeOwned>(
        &self,
        path: &str,
        limit: u64,
    ) -> Result<T, KubeError> {
        let resp = self.send(Method::Get, path, None, None, None)?;
        decode(resp, &self.url(path), limit)
    }

    /// A write (`POST`, `PUT`, `PATCH`) with a JSON body of `content_type`, through the
    /// write rate limiter; decodes the answer. `timeout` overrides the client's.
    pub fn write_json<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        content_type: &str,
        body: &impl Serialize,
        timeout: Option<Duration>,
    ) -> Result<T, KubeError> {
        let bytes = serde_json::to_vec(body).map_err(|e| KubeError::Decode {
            url: self.url(path),
            message: format!("cannot encode the request body: {e}"),
        })?;
        self.shared.writes.acquire();
        let resp = self.send(method, path, Some(content_type), Some(bytes), timeout)?;
        decode(resp, &self.url(path), SMALL_BODY_LIMIT)
    }

    /// `POST path` with a JSON body, outside the write rate limiter: for reviews
    /// (TokenReview, SubjectAccessReview), which store nothing and whose caller bounds
    /// their rate (caches and a bounded queue), so that they never delay a node's
    /// condition write.
    pub fn post_review<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &impl Serialize,
    ) -> Result<T, KubeError> {
        let bytes = serde_json::to_vec(body).map_err(|e| KubeError::Decode {
            url: self.url(path),
            message: format!("cannot encode the request body: {e}"),
        })?;
        let resp = self.send(
            Method::Post,
            path,
            Some("application/json"),
            Some(bytes),
            None,
        )?;
        decode(resp, &self.url(path), SMALL_BODY_LIMIT)
    }

    /// Opens `GET path` and returns the response for streaming (a watch). Non-2xx
    /// answers are errors.
    pub fn get_stream(&self, path: &str) -> Result<Response<ureq::Body>, KubeError> {
        self.get_stream_accepting(path, "application/json")
    }

    /// [`Client::get_stream`] with the `Accept` header given (the node watch asks
    /// for protobuf first).
    pub fn get_stream_accepting(
        &self,
        path: &str,
        accept: &str,
    ) -> Result<Response<ureq::Body>, KubeError> {
        self.send_accepting(Method::Get, path, accept, None, None, None)
    }

    fn url(&self, path: &str) -> String {
        format!("{}{}", self.shared.server, path)
    }

    /// Sends one request accepting JSON; a 401 is retried once with fresh
    /// credentials.
    fn send(
        &self,
        method: Method,
        path: &str,
        content_type: Option<&str>,
        body: Option<Vec<u8>>,
        timeout: Option<Duration>,
    ) -> Result<Response<ureq::Body>, KubeError> {
        self.send_accepting(
            method,
            path,
            "application/json",
            content_type,
            body,
            timeout,
        )
    }

    fn send_accepting(
        &self,
        method: Method,
        path: &str,
        accept: &str,
        content_type: Option<&str>,
        body: Option<Vec<u8>>,
        timeout: Option<Duration>,
    ) -> Result<Response<ureq::Body>, KubeError> {
        let url = self.url(path);
        let mut retried = false;
        loop {
            if self.stop.as_ref().is_some_and(StopHandle::is_stopped) {
                return Err(KubeError::Stopped);
            }
            let creds = self.shared.auth.current()?;
            let agent = self.agent_for(&creds)?;
            let mut builder = http::Request::builder()
                .method(method.as_str())
                .uri(&url)
                .header("Accept", accept);
            if let Some(h) = &creds.authorization {
                builder = builder.header("Authorization", h.expose());
            }
            if let Some(ct) = content_type {
                builder = builder.header("Content-Type", ct);
            }
            let result = match &body {
                Some(b) => run(&agent, builder, b.clone(), timeout),
                None => run(&agent, builder, (), timeout),
            };
            let mut resp = match result {
                Ok(r) => r,
                Err(e) => {
                    if self.stop.as_ref().is_some_and(StopHandle::is_stopped) {
                        return Err(KubeError::Stopped);
                    }
                    return Err(KubeError::transport(&url, e));
                }
            };
            let status = resp.status().as_u16();
            if (200..300).contains(&status) {
                return Ok(resp);
            }
            let retry_after = resp
                .headers()
                .get("Retry-After")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let body = resp
                .body_mut()
                .with_config()
                .limit(1 << 20)
                .read_to_vec()
                .unwrap_or_default();
            let err = ApiError::from_response(
                format!("{} {url}", method.as_str()),
                status,
                retry_after.as_deref(),
                &body,
            );
            if status == 401 && !retried && self.shared.auth.unauthorized() {
                log::info!("{url} refused the credentials; fetching them again and retrying once");
                retried = true;
                continue;
            }
            return Err(KubeError::Api(err));
        }
    }

    /// The agent for these credentials, (re)built when the client certificate changed.
    fn agent_for(&self, creds: &Credentials) -> Result<Agent, KubeError> {
        let mut slot = crate::sync::lock(&self.agent);
        if let Some(agent) = &slot.agent
            && slot.identity == creds.identity
        {
            return Ok(agent.clone());
        }
        let tls = tls_config(&self.shared.tls, creds.identity.as_ref())
            .map_err(|e| KubeError::Credentials(e.0))?;
        let o = &self.shared.options;
        let mut config = crate::http::base_config(&self.shared.proxy, KUBE_CA_OPTION)
            .http_status_as_error(false)
            .user_agent(o.user_agent.as_str())
            .tls_config(tls)
            .timeout_connect(Some(o.connect_timeout))
            .max_redirects(0);
        config = match self.stream_idle {
            // Never a total timeout on a stream: it would cut healthy watches.
            Some(idle) => config
                .timeout_recv_response(Some(o.timeout))
                .timeout_per_read(Some(idle)),
            None => config.timeout_global(Some(o.timeout)),
        };
        let agent = Agent::new_with_config(config.build());
        if let Some(stop) = &self.stop {
            stop.register(agent.clone());
        }
        slot.agent = Some(agent.clone());
        slot.identity = creds.identity.clone();
        Ok(agent)
    }
}

fn run<S: ureq::AsSendBody>(
    agent: &Agent,
    builder: http::request::Builder,
    body: S,
    timeout: Option<Duration>,
) -> Result<Response<ureq::Body>, ureq::Error> {
    let request = builder.body(body).map_err(ureq::Error::Http)?;
    let mut configured = agent.configure_request(request);
    if let Some(t) = timeout {
        configured = configured.timeout_global(Some(t));
    }
    agent.run(configured.build())
}

fn decode<T: DeserializeOwned>(
    resp: Response<ureq::Body>,
    url: &str,
    limit: u64,
) -> Result<T, KubeError> {
    let reader = resp.into_body().into_with_config().limit(limit).reader();
    let mut reader = std::io::BufReader::with_capacity(64 << 10, reader);
    let result = serde_json::from_reader(&mut reader);
    result.map_err(|e| {
        // A read error inside serde_json may be the size limit or a timeout.
        let message = match e.io_error_kind() {
            Some(_) => format!("reading the body failed: {e} (limit {limit} bytes)"),
            None => format!("invalid JSON: {e}"),
        };
        KubeError::Decode {
            url: url.to_string(),
            message,
        }
    })
}

/// Builds ureq's TLS settings, checking everything that ureq would otherwise only
/// check (or silently skip) at the first connection: every CA certificate must parse,
/// and a client certificate must parse and match its key.
pub(crate) fn tls_config(
    settings: &TlsSettings,
    identity: Option<&Identity>,
) -> Result<TlsConfig, ConfigError> {
    let mut builder = TlsConfig::builder();
    if settings.insecure_skip_verify {
        builder = builder.disable_verification(true);
    }
    if let Some(pem) = &settings.ca_pem {
        let roots = parse_ca(pem, &settings.ca_origin)?;
        builder = builder.root_certs(RootCerts::new_with_certs(&roots));
    }
    if let Some(id) = identity {
        builder = builder.client_cert(Some(client_cert(id)?));
    }
    Ok(builder.build())
}

fn parse_ca(pem: &[u8], origin: &str) -> Result<Vec<Certificate<'static>>, ConfigError> {
    let mut certs = Vec::new();
    let mut store = rustls::RootCertStore::empty();
    for (i, item) in ureq::tls::parse_pem(pem).enumerate() {
        match item {
            Ok(PemItem::Certificate(c)) => {
                store
                    .add(rustls::pki_types::CertificateDer::from(c.der().to_vec()))
                    .map_err(|e| {
                        ConfigError(format!(
                            "CA certificate #{} in {origin} cannot be used: {e}",
                            i + 1
                        ))
                    })?;
                certs.push(c);
            }
            Ok(PemItem::PrivateKey(_)) => {}
            Err(e) => {
                return Err(ConfigError(format!(
                    "the CA bundle {origin} is not valid PEM: {e}"
                )));
            }
            Ok(_) => {}
        }
    }
    if certs.is_empty() {
        return Err(ConfigError(format!(
            "the CA bundle {origin} contains no certificate"
        )));
    }
    Ok(certs)
}

/// Parses a certificate chain and key and checks with rustls that they belong
/// together. ureq builds its rustls config lazily and panics on a mismatched pair at
/// the first connection; this turns that into an error at startup.
fn client_cert(id: &Identity) -> Result<ClientCert, ConfigError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let origin = &id.origin;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&id.cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| ConfigError(format!("{origin}: the certificate is not valid PEM: {e}")))?;
    if chain.is_empty() {
        return Err(ConfigError(format!(
            "{origin}: no certificate found in the PEM data"
        )));
    }
    let key = PrivateKeyDer::from_pem_slice(&id.key_pem).map_err(|e| {
        ConfigError(format!(
            "{origin}: the private key is not a PEM PKCS#1, PKCS#8 or SEC1 key: {e}"
        ))
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ConfigError(format!("TLS setup failed: {e}")))?
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_client_auth_cert(chain.clone(), key.clone_key())
        .map_err(|e| {
            ConfigError(format!(
                "{origin}: the client certificate and key cannot be used together: {e} \
                 (does the key belong to the certificate?)"
            ))
        })?;
    let certs: Vec<Certificate<'static>> = chain
        .iter()
        .map(|c| Certificate::from_der(c.as_ref()).to_owned())
        .collect();
    let key = PrivateKey::from_pem(&id.key_pem)
        .map_err(|e| ConfigError(format!("{origin}: the private key cannot be read: {e}")))?;
    Ok(ClientCert::new_with_certs(&certs, key))
}
