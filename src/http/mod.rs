//! What every HTTP client of the crate (Kubernetes', every cloud's, the credential
//! sources') sets up alike: buffer sizes, the TLS trust ([`Trust`]), the proxy
//! ([`Proxying`]), and how they all read a request that got no reply.
//!
//! Every agent is built by [`agent_config`], so that a private CA, a corporate proxy
//! or `NO_PROXY` work the same for every cloud. ureq's own reading of the proxy
//! variables is never used: it takes `ALL_PROXY` first, sends `http://` URLs to
//! `HTTPS_PROXY`, and knows no CIDR or port in `NO_PROXY`.

mod proxy;
mod trust;

pub use proxy::{ProxyEnv, ProxyError};
pub use trust::{SystemStore, Trust, TrustError};

use ureq::config::ConfigBuilder;
use ureq::middleware::MiddlewareNext;
use ureq::typestate::AgentScope;
use ureq::{RequestExt, SendBody};

/// ureq buffers 128 KiB each way per connection by default, and a pooled connection
/// keeps its buffers: a quarter of a MiB for each, in the arena of whichever thread
/// opened it. Our requests are a few KiB (a bearer token, signature headers), reply
/// heads less, and bodies stream through these buffers in pieces (the node watch
/// reads through a 64 KiB reader of its own), so a smaller buffer costs some read
/// calls and no correctness. A request or reply head must fit in its buffer; the
/// reply's limit is set to match, so that a larger one fails with an error that
/// names it instead of ureq's "no progress".
const BUFFER: usize = 32 << 10;

/// Whether and how a client's requests go through a proxy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Proxying {
    /// Never: metadata endpoints (AWS IMDS, Azure IMDS, the GCE metadata server) are
    /// link-local and refuse proxied requests, as every cloud's own client knows.
    Never,
    /// As `HTTPS_PROXY`, `HTTP_PROXY` and `NO_PROXY` say, decided for each request's
    /// URL ([`ProxyEnv::proxy_for`]).
    Environment(ProxyEnv),
    /// Always through this proxy (a kubeconfig's `proxy-url`, which client-go uses
    /// instead of the environment).
    Always(ureq::Proxy),
}

impl Proxying {
    /// As this process's environment says. A setting that cannot be used stops the
    /// start (`route-controller run` checks [`ProxyEnv::from_process`] first); here it
    /// counts as none.
    pub fn from_process() -> Proxying {
        static ENV: std::sync::OnceLock<ProxyEnv> = std::sync::OnceLock::new();
        Proxying::Environment(
            ENV.get_or_init(|| ProxyEnv::from_process().unwrap_or_default())
                .clone(),
        )
    }
}

/// An agent configuration with this crate's buffer sizes, `trust`'s TLS settings
/// and `proxying`'s proxy. A certificate that fails to verify for a missing CA is
/// reported with the option to set ([`Trust::ca_option`]).
pub(crate) fn agent_config(trust: &Trust, proxying: &Proxying) -> ConfigBuilder<AgentScope> {
    if let Some(option) = trust.insecure() {
        crate::sync::lock(&INSECURE).insert(option.to_string());
    }
    base_config(proxying, trust.ca_option()).tls_config(trust.tls_config())
}

/// An agent configuration for a link-local metadata endpoint (AWS IMDS): the
/// bundled roots and the machine's store, never a proxy.
pub(crate) fn metadata_config() -> ConfigBuilder<AgentScope> {
    agent_config(&Trust::new("SSL_CERT_FILE"), &Proxying::Never)
}

/// The options that turned TLS verification off for a client built so far, so that
/// `/readyz` keeps saying so after the start-up warning has scrolled away. Written
/// when an agent is built, read by each probe; never cleared (an agent lives as long
/// as its provider, which is the process).
static INSECURE: std::sync::Mutex<std::collections::BTreeSet<String>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// A sentence for `/readyz` naming each option that turned TLS verification off,
/// or `None` when every client verifies.
pub(crate) fn insecure_warning() -> Option<String> {
    let options = crate::sync::lock(&INSECURE);
    if options.is_empty() {
        return None;
    }
    let list: Vec<&str> = options.iter().map(String::as_str).collect();
    Some(format!(
        "WARNING: TLS verification is off ({}): anyone on the path can read the credentials",
        list.join(", ")
    ))
}

/// As [`agent_config`], with the TLS settings left to the caller (the Kubernetes
/// client's come from the kubeconfig); `ca_option` is what to set for a private CA.
pub(crate) fn base_config(proxying: &Proxying, ca_option: &str) -> ConfigBuilder<AgentScope> {
    let fixed = match proxying {
        Proxying::Always(proxy) => Some(proxy.clone()),
        Proxying::Never | Proxying::Environment(_) => None,
    };
    let by_url = match proxying {
        Proxying::Environment(env) if env.is_set() => Some(env.clone()),
        _ => None,
    };
    let ca_option = ca_option.to_string();
    ureq::Agent::config_builder()
        .input_buffer_size(BUFFER)
        .output_buffer_size(BUFFER)
        // One byte less: a full buffer without a complete head then counts as too
        // large, where at the buffer's size ureq would find it "no progress".
        .max_response_header_size(BUFFER - 1)
        // Never ureq's own reading of the environment (see the module's doc).
        .proxy(fixed)
        .middleware(
            move |request: ureq::http::Request<SendBody>, next: MiddlewareNext| {
                let request = match &by_url {
                    Some(env) => route(request, env),
                    None => request,
                };
                next.handle(request)
                    .map_err(|e| name_the_ca_option(e, &ca_option))
            },
        )
}

/// Sets the request's proxy as the environment says for its URL.
fn route<'a>(
    request: ureq::http::Request<SendBody<'a>>,
    env: &ProxyEnv,
) -> ureq::http::Request<SendBody<'a>> {
    let proxy = env.ureq_proxy_for(request.uri());
    if proxy.is_none() {
        return request;
    }
    // Inside a middleware this is always Some; the request goes direct otherwise.
    let Some(config) = request.middleware_config() else {
        unreachable_outside_middleware()
    };
    config.proxy(proxy).build()
}

#[cold]
fn unreachable_outside_middleware() -> ! {
    unreachable!("ureq gives a request its configuration inside a middleware")
}

/// A certificate no trusted CA signed: the same error (ureq's `Io` of rustls'
/// `InvalidCertificate(UnknownIssuer)`), with what to set added.
fn name_the_ca_option(e: ureq::Error, ca_option: &str) -> ureq::Error {
    match e {
        ureq::Error::Io(io) if unknown_issuer(&io) => {
            let kind = io.kind();
            let message = format!(
                "{io}: no CA this client trusts signed the server's certificate; set \
                 {ca_option} to a PEM file with the CA that did"
            );
            ureq::Error::Io(std::io::Error::new(kind, UnverifiedPeer(message)))
        }
        other => other,
    }
}

fn unknown_issuer(io: &std::io::Error) -> bool {
    io.get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .is_some_and(|e| {
            matches!(
                e,
                rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer)
            )
        })
}

/// A server certificate that failed to verify, in words that name the fix.
#[derive(Debug)]
struct UnverifiedPeer(String);

impl std::fmt::Display for UnverifiedPeer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UnverifiedPeer {}

/// Whether `io` is a server certificate that failed verification: the handshake
/// stopped before any request byte was sent.
fn failed_verification(io: &std::io::Error) -> bool {
    io.get_ref().is_some_and(|inner| {
        inner.is::<UnverifiedPeer>()
            || inner
                .downcast_ref::<rustls::Error>()
                .is_some_and(|e| matches!(e, rustls::Error::InvalidCertificate(_)))
    })
}

/// Whether a failed request certainly never reached the server: it failed before a
/// connection existed, or before a byte of the request could leave (a request ureq
/// could not build, a TLS handshake that failed). After that, a mutation may have been
/// applied though no reply came, and the provider reports it ambiguous for the
/// controller to list before it trusts its view again. One rule for every provider.
pub(crate) fn certainly_unsent(e: &ureq::Error) -> bool {
    use ureq::Timeout;
    match e {
        ureq::Error::HostNotFound
        | ureq::Error::ConnectionFailed
        | ureq::Error::BadUri(_)
        | ureq::Error::Http(_)
        | ureq::Error::InvalidProxyUrl
        | ureq::Error::Tls(_)
        | ureq::Error::Timeout(Timeout::Connect | Timeout::Resolve) => true,
        ureq::Error::Io(io) => {
            matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::AddrNotAvailable
            ) || failed_verification(io)
        }
        _ => false,
    }
}

/// A failed request's error in words for a log line; a timeout says which limit
/// ended it.
pub(crate) fn describe(e: &ureq::Error) -> String {
    match e {
        ureq::Error::Timeout(_) => "no reply in time (request timeout)".to_string(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::TcpListener;

    /// Guards the sizes: a request with a 12 KiB bearer token (an OIDC token with many
    /// groups), a reply with 16 KiB of headers and a body of 1 MiB all go through; a
    /// reply head larger than the buffer fails with an error naming the header limit.
    /// With `BUFFER` at 8 KiB the first part fails.
    #[test]
    fn large_heads_and_bodies_pass_and_a_head_beyond_the_buffer_is_named() {
        for (reply_head, expect_ok) in [(16 << 10, true), (40 << 10, false)] {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let port = listener.local_addr().unwrap().port();
            let server = std::thread::spawn(move || {
                let (stream, _) = listener.accept().unwrap();
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut request = 0;
                loop {
                    let mut line = String::new();
                    reader.read_line(&mut line).unwrap();
                    request += line.len();
                    if line == "\r\n" {
                        break;
                    }
                }
                let body = vec![b'x'; 1 << 20];
                let mut out = stream;
                let filler = "a".repeat(reply_head);
                let _ = write!(
                    out,
                    "HTTP/1.1 200 OK\r\nX-Filler: {filler}\r\nContent-Length: {}\r\n\r\n",
                    body.len()
                );
                let _ = out.write_all(&body);
                request
            });
            let agent: ureq::Agent =
                super::agent_config(&super::Trust::new("test"), &super::Proxying::Never)
                    .build()
                    .into();
            let token = "t".repeat(12 << 10);
            let reply = agent
                .get(&format!("http://127.0.0.1:{port}/"))
                .header("Authorization", &format!("Bearer {token}"))
                .call();
            match reply {
                Ok(mut r) => {
                    assert!(expect_ok, "a {reply_head}-byte head was accepted");
                    let mut body = Vec::new();
                    r.body_mut().as_reader().read_to_end(&mut body).unwrap();
                    assert_eq!(body.len(), 1 << 20);
                }
                Err(e) => {
                    assert!(!expect_ok, "a {reply_head}-byte head failed: {e}");
                    assert!(
                        matches!(e, ureq::Error::LargeResponseHeader(..)),
                        "the error names the header limit: {e}"
                    );
                }
            }
            assert!(
                server.join().unwrap() > 12 << 10,
                "the whole request arrived"
            );
        }
    }

    /// A refused connection certainly sent nothing; a server that read the request
    /// and closed without a reply, or never answered, may have applied it. Fails with
    /// `certainly_unsent` true for I/O errors after the connection (the second case),
    /// or for every timeout (the third).
    #[test]
    fn only_failures_before_the_request_left_are_certainly_unsent() {
        use std::time::Duration;
        let agent = |timeout: Option<Duration>| -> ureq::Agent {
            super::agent_config(&super::Trust::new("test"), &super::Proxying::Never)
                .timeout_global(timeout)
                .build()
                .into()
        };
        let closed = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = closed.local_addr().unwrap().port();
        drop(closed);
        let refused = agent(None)
            .get(&format!("http://127.0.0.1:{port}/"))
            .call()
            .unwrap_err();
        assert!(super::certainly_unsent(&refused), "{refused:?}");

        for (hang, name) in [(false, "closed after reading"), (true, "never answered")] {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let port = listener.local_addr().unwrap().port();
            let server = std::thread::spawn(move || {
                let (stream, _) = listener.accept().unwrap();
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                while reader.read_line(&mut line).unwrap() > 0 && line != "\r\n" {
                    line.clear();
                }
                if hang {
                    // Holds the connection open until the client gives up and closes.
                    let _ = reader.read_line(&mut line);
                }
            });
            let err = agent(Some(Duration::from_millis(300)))
                .post(&format!("http://127.0.0.1:{port}/"))
                .send(&b"{}"[..])
                .unwrap_err();
            assert!(!super::certainly_unsent(&err), "{name}: {err:?}");
            if hang {
                assert_eq!(super::describe(&err), "no reply in time (request timeout)");
            }
            server.join().unwrap();
        }
    }
}
