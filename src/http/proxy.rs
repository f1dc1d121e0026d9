//! Which proxy a request goes through, read from `HTTPS_PROXY`, `HTTP_PROXY` and
//! `NO_PROXY` (or their lower-case forms) exactly as Go's
//! `golang.org/x/net/http/httpproxy` reads them, since that is how every Kubernetes
//! component (client-go, the cloud-controller-manager, the cloud SDKs) honours them:
//! an operator who wrote these variables for those finds the same requests proxied
//! here.
//!
//! - `https://` URLs go through `HTTPS_PROXY`, `http://` ones through `HTTP_PROXY`;
//!   neither falls back to the other.
//! - `localhost` and loopback addresses never go through a proxy.
//! - `NO_PROXY` is a comma-separated list of `*` (nothing is proxied), IP addresses
//!   and CIDRs (`10.0.0.0/8`, `2001:db8::/32`), IP addresses with a port
//!   (`192.168.1.3:80`, `[2001:db8::1]:443`), and domains: `example.com` matches it and
//!   its subdomains, `.example.com` and `*.example.com` its subdomains only; a domain
//!   may carry a port too.
//!
//! Two differences, both louder than Go: a proxy URL whose scheme is neither `http`
//! nor `https` (Go would take `socks5`, and fail at the first request on anything
//! else) stops the start with the variable named; and host names are compared as
//! written, without IDNA conversion (every cloud endpoint is ASCII).
//!
//! This module must never read the process environment except in
//! [`ProxyEnv::from_process`]: tests give their variables through
//! [`ProxyEnv::from_vars`].

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use ureq::http::Uri;

/// The proxy settings of the environment, parsed once. [`ProxyEnv::default`] proxies
/// nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProxyEnv {
    /// For `http://` URLs (`HTTP_PROXY`).
    http: Option<ProxyUrl>,
    /// For `https://` URLs (`HTTPS_PROXY`).
    https: Option<ProxyUrl>,
    /// `NO_PROXY`; a `*` makes the list [`NoProxy::All`].
    no_proxy: NoProxy,
}

/// A proxy's URL, and ureq's proxy for it (built once, not per request).
#[derive(Clone, PartialEq, Eq)]
struct ProxyUrl {
    url: String,
    proxy: ureq::Proxy,
    /// The variable it came from, for messages.
    variable: &'static str,
}

/// Without the URL's password, which a proxy URL may hold.
impl fmt::Debug for ProxyUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProxyUrl")
            .field("url", &redact(&self.url))
            .field("variable", &self.variable)
            .finish_non_exhaustive()
    }
}

/// A proxy setting that cannot be used, with the variable to fix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProxyError(pub String);

impl fmt::Display for ProxyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ProxyError {}

impl ProxyEnv {
    /// Reads the variables from `get` (a variable's value, `None` when unset). As Go,
    /// the upper-case name wins when both are set and not empty.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<ProxyEnv, ProxyError> {
        let any = |names: [&'static str; 2]| {
            names
                .into_iter()
                .find_map(|n| get(n).filter(|v| !v.is_empty()).map(|v| (n, v)))
        };
        let http = any(["HTTP_PROXY", "http_proxy"])
            .map(|(n, v)| ProxyUrl::parse(n, &v))
            .transpose()?;
        let https = any(["HTTPS_PROXY", "https_proxy"])
            .map(|(n, v)| ProxyUrl::parse(n, &v))
            .transpose()?;
        let no_proxy = any(["NO_PROXY", "no_proxy"])
            .map(|(_, v)| NoProxy::parse(&v))
            .unwrap_or_default();
        Ok(ProxyEnv {
            http,
            https,
            no_proxy,
        })
    }

    /// Reads the variables of this process.
    pub fn from_process() -> Result<ProxyEnv, ProxyError> {
        ProxyEnv::from_vars(|name| std::env::var(name).ok())
    }

    /// Whether any proxy is set, for the start-up log.
    pub fn is_set(&self) -> bool {
        self.http.is_some() || self.https.is_some()
    }

    /// The proxy URL a request to `url` goes through, or `None` for a direct
    /// connection.
    pub fn proxy_for(&self, url: &Uri) -> Option<&str> {
        self.proxy_url_for(url).map(|p| p.url.as_str())
    }

    /// ureq's proxy for a request to `url`, as [`ProxyEnv::proxy_for`] decides.
    pub(crate) fn ureq_proxy_for(&self, url: &Uri) -> Option<ureq::Proxy> {
        self.proxy_url_for(url).map(|p| p.proxy.clone())
    }

    fn proxy_url_for(&self, url: &Uri) -> Option<&ProxyUrl> {
        let proxy = match url.scheme_str() {
            Some("https") => self.https.as_ref(),
            Some("http") => self.http.as_ref(),
            _ => None,
        }?;
        let host = url.host()?;
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        let port = match url.port() {
            Some(p) => p.as_str().to_string(),
            None if url.scheme_str() == Some("https") => "443".to_string(),
            None => "80".to_string(),
        };
        self.use_proxy(host, &port).then_some(proxy)
    }

    /// Go's `useProxy`: whether a request to `host:port` goes through the proxy.
    fn use_proxy(&self, host: &str, port: &str) -> bool {
        if host == "localhost" {
            return false;
        }
        let ip = IpAddr::from_str(host).ok().map(|ip| ip.to_canonical());
        if ip.is_some_and(|ip| ip.is_loopback()) {
            return false;
        }
        let host = host.trim().to_ascii_lowercase();
        match &self.no_proxy {
            NoProxy::All => false,
            NoProxy::List(entries) => !entries.iter().any(|e| e.matches(&host, port, ip)),
        }
    }
}

/// For the start-up log: the proxies and `NO_PROXY` in force (a proxy URL's password
/// is not shown).
impl fmt::Display for ProxyEnv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown = |p: &Option<ProxyUrl>| match p {
            Some(p) => format!("{} ({})", redact(&p.url), p.variable),
            None => "direct".to_string(),
        };
        let no_proxy = match &self.no_proxy {
            NoProxy::All => "everything".to_string(),
            NoProxy::List(l) => format!("{} entries", l.len()),
        };
        write!(
            f,
            "https:// through {}, http:// through {}; NO_PROXY exempts {no_proxy}, and \
             localhost and loopback addresses always",
            shown(&self.https),
            shown(&self.http)
        )
    }
}

/// `http://user:secret@host:port` shown as `http://user:***@host:port`.
fn redact(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (format!("{scheme}://"), rest),
        None => (String::new(), url),
    };
    match rest.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{scheme}{user}:***@{host}")
        }
        None => url.to_string(),
    }
}

impl ProxyUrl {
    /// Go's `parseProxy`: a full URL, or `host[:port]` taken as `http://host[:port]`.
    fn parse(variable: &'static str, value: &str) -> Result<ProxyUrl, ProxyError> {
        let value = value.trim();
        let url = match value.split_once("://") {
            Some((scheme, _)) if scheme.eq_ignore_ascii_case("http") => value.to_string(),
            Some((scheme, _)) if scheme.eq_ignore_ascii_case("https") => value.to_string(),
            Some((scheme, _)) => {
                return Err(ProxyError(format!(
                    "{variable}={:?}: a {scheme} proxy is not supported; use an http:// \
                     or https:// proxy (one that takes CONNECT), or unset {variable}",
                    redact(value)
                )));
            }
            None => format!("http://{value}"),
        };
        let proxy = ureq::Proxy::new(&url).map_err(|e| {
            ProxyError(format!(
                "{variable}={:?} is not a usable proxy URL ({e}); write it as \
                 http://host:port or https://host:port (a password with '@', ':' or '#' \
                 percent-encoded)",
                redact(value)
            ))
        })?;
        Ok(ProxyUrl {
            url,
            proxy,
            variable,
        })
    }
}

/// `NO_PROXY`, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
enum NoProxy {
    /// `*`: nothing goes through a proxy.
    All,
    List(Vec<NoProxyEntry>),
}

impl Default for NoProxy {
    fn default() -> NoProxy {
        NoProxy::List(Vec::new())
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum NoProxyEntry {
    /// `10.0.0.0/8`: any port.
    Cidr { network: IpAddr, prefix: u8 },
    /// `192.168.1.1` or `192.168.1.1:80`; an empty port matches any.
    Ip { ip: IpAddr, port: String },
    /// `example.com` (`suffix` `.example.com`, `whole` true: the name itself matches
    /// too) or `.example.com` / `*.example.com` (subdomains only).
    Domain {
        suffix: String,
        port: String,
        whole: bool,
    },
}

impl NoProxy {
    /// Go's `config.init` for the `NO_PROXY` part: unusable entries are skipped, as
    /// there.
    fn parse(value: &str) -> NoProxy {
        let mut entries = Vec::new();
        for p in value.split(',') {
            let p = p.trim().to_ascii_lowercase();
            if p.is_empty() {
                continue;
            }
            if p == "*" {
                return NoProxy::All;
            }
            if let Some(cidr) = parse_cidr(&p) {
                entries.push(cidr);
                continue;
            }
            let (host, port) = match split_host_port(&p) {
                Some(("", _)) => continue,
                Some((host, port)) => (host, port),
                None => (p.as_str(), ""),
            };
            if let Ok(ip) = IpAddr::from_str(host) {
                entries.push(NoProxyEntry::Ip {
                    ip: ip.to_canonical(),
                    port: port.to_string(),
                });
                continue;
            }
            let host = host
                .strip_prefix('*')
                .filter(|h| h.starts_with('.'))
                .unwrap_or(host);
            let (suffix, whole) = match host.starts_with('.') {
                true => (host.to_string(), false),
                false => (format!(".{host}"), true),
            };
            entries.push(NoProxyEntry::Domain {
                suffix,
                port: port.to_string(),
                whole,
            });
        }
        NoProxy::List(entries)
    }
}

impl NoProxyEntry {
    fn matches(&self, host: &str, port: &str, ip: Option<IpAddr>) -> bool {
        match self {
            NoProxyEntry::Cidr { network, prefix } => {
                ip.is_some_and(|ip| in_network(ip, *network, *prefix))
            }
            NoProxyEntry::Ip { ip: want, port: p } => {
                ip == Some(*want) && (p.is_empty() || p == port)
            }
            NoProxyEntry::Domain {
                suffix,
                port: p,
                whole,
            } => {
                (host.ends_with(suffix.as_str()) || (*whole && host == &suffix[1..]))
                    && (p.is_empty() || p == port)
            }
        }
    }
}

/// Go's `net.ParseCIDR`, to a network and prefix length; `None` when `s` is not one.
fn parse_cidr(s: &str) -> Option<NoProxyEntry> {
    let (addr, bits) = s.split_once('/')?;
    let network = IpAddr::from_str(addr).ok()?;
    let prefix: u8 = bits
        .parse()
        .ok()
        .filter(|b: &u8| bits.bytes().all(|c| c.is_ascii_digit()) && *b <= max_prefix(network))?;
    Some(NoProxyEntry::Cidr {
        network: network.to_canonical(),
        prefix: match (network, network.to_canonical()) {
            // An IPv4-mapped IPv6 network counts as the IPv4 one, as in Go.
            (IpAddr::V6(_), IpAddr::V4(_)) => prefix.checked_sub(96)?,
            _ => prefix,
        },
    })
}

fn max_prefix(ip: IpAddr) -> u8 {
    match ip {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 128,
    }
}

fn in_network(ip: IpAddr, network: IpAddr, prefix: u8) -> bool {
    match (ip, network) {
        (IpAddr::V4(ip), IpAddr::V4(net)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            u32::from(ip) & mask == u32::from(net) & mask
        }
        (IpAddr::V6(ip), IpAddr::V6(net)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            u128::from(ip) & mask == u128::from(net) & mask
        }
        _ => false,
    }
}

/// Go's `net.SplitHostPort`: `host:port` or `[host]:port`, brackets removed; `None`
/// without a port (or with more than one colon outside brackets).
fn split_host_port(s: &str) -> Option<(&str, &str)> {
    if let Some(rest) = s.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        let port = after.strip_prefix(':')?;
        return Some((host, port));
    }
    let (host, port) = s.rsplit_once(':')?;
    if host.contains(':') || host.contains('[') || host.contains(']') {
        return None;
    }
    Some((host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> ProxyEnv {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        ProxyEnv::from_vars(|name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
            .unwrap()
    }

    /// Guards that a proxy URL's password never reaches an error or a debug print,
    /// even when the URL cannot be used (a password with '#' or '@' is one such).
    #[test]
    fn a_proxy_password_is_never_shown() {
        for value in [
            "http://svc:p@ss#1@proxy:3128",
            "socks5://user:hunter2pw@proxy:1080",
            "user:hunter2pw@proxy:3128 x",
        ] {
            let vars = [("HTTPS_PROXY".to_string(), value.to_string())];
            let get = |n: &str| vars.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
            match ProxyEnv::from_vars(get) {
                Err(e) => {
                    assert!(
                        !e.0.contains("hunter2pw") && !e.0.contains("ss#1"),
                        "{}",
                        e.0
                    );
                }
                Ok(env) => {
                    let shown = format!("{env} {env:?}");
                    assert!(
                        !shown.contains("hunter2pw") && !shown.contains("ss#1"),
                        "{shown}"
                    );
                }
            }
        }
    }

    fn proxy_for(env: &ProxyEnv, url: &str) -> Option<String> {
        let uri: Uri = url.parse().unwrap();
        env.proxy_for(&uri).map(str::to_string)
    }

    /// Go's `proxyForURLTests` (golang.org/x/net/http/httpproxy/proxy_test.go), less the
    /// three cases this module answers differently on purpose: `foo://host` and
    /// `socks5://` are refused at start (below), CGI does not apply to a controller,
    /// and IDNA names are compared as written.
    #[test]
    fn go_proxy_for_url_cases() {
        type Case<'a> = (&'a [(&'a str, &'a str)], &'a str, Option<&'a str>);
        let cases: &[Case] = &[
            (
                &[("HTTP_PROXY", "127.0.0.1:8080")],
                "http://example.com",
                Some("http://127.0.0.1:8080"),
            ),
            (
                &[("HTTP_PROXY", "cache.corp.example.com:1234")],
                "http://example.com",
                Some("http://cache.corp.example.com:1234"),
            ),
            (
                &[("HTTP_PROXY", "cache.corp.example.com")],
                "http://example.com",
                Some("http://cache.corp.example.com"),
            ),
            (
                &[("HTTP_PROXY", "localhost")],
                "http://example.com",
                Some("http://localhost"),
            ),
            (
                &[("HTTP_PROXY", "https://cache.corp.example.com")],
                "http://example.com",
                Some("https://cache.corp.example.com"),
            ),
            (
                &[("HTTP_PROXY", "http://127.0.0.1:8080")],
                "http://example.com",
                Some("http://127.0.0.1:8080"),
            ),
            (
                &[("HTTP_PROXY", "https://127.0.0.1:8080")],
                "http://example.com",
                Some("https://127.0.0.1:8080"),
            ),
            // Don't use secure for http; use secure for https.
            (
                &[
                    ("HTTP_PROXY", "http.proxy.tld"),
                    ("HTTPS_PROXY", "secure.proxy.tld"),
                ],
                "http://insecure.tld/",
                Some("http://http.proxy.tld"),
            ),
            (
                &[
                    ("HTTP_PROXY", "http.proxy.tld"),
                    ("HTTPS_PROXY", "secure.proxy.tld"),
                ],
                "https://secure.tld/",
                Some("http://secure.proxy.tld"),
            ),
            (
                &[
                    ("HTTP_PROXY", "http.proxy.tld"),
                    ("HTTPS_PROXY", "https://secure.proxy.tld"),
                ],
                "https://secure.tld/",
                Some("https://secure.proxy.tld"),
            ),
            (
                &[("HTTP_PROXY", "http.proxy.tld")],
                "https://secure.tld/",
                None,
            ),
            (
                &[("HTTP_PROXY", "http.proxy.tld")],
                "ftp://insecure.tld/",
                None,
            ),
            (&[], "http://example.com", None),
            (
                &[("NO_PROXY", "example.com"), ("HTTP_PROXY", "proxy")],
                "http://example.com/",
                None,
            ),
            (
                &[("NO_PROXY", ".example.com"), ("HTTP_PROXY", "proxy")],
                "http://example.com/",
                Some("http://proxy"),
            ),
            (
                &[("NO_PROXY", "ample.com"), ("HTTP_PROXY", "proxy")],
                "http://example.com/",
                Some("http://proxy"),
            ),
            (
                &[("NO_PROXY", "example.com"), ("HTTP_PROXY", "proxy")],
                "http://foo.example.com/",
                None,
            ),
            (
                &[("NO_PROXY", ".foo.com"), ("HTTP_PROXY", "proxy")],
                "http://example.com/",
                Some("http://proxy"),
            ),
            (
                &[("NO_PROXY", "xn--fsq092h.com"), ("HTTP_PROXY", "proxy")],
                "http://www.xn--fsq092h.com",
                None,
            ),
            // Lower-case names; the upper-case one wins when both are set.
            (
                &[("https_proxy", "lower:3128")],
                "https://example.com",
                Some("http://lower:3128"),
            ),
            (
                &[("HTTPS_PROXY", "upper:3128"), ("https_proxy", "lower:3128")],
                "https://example.com",
                Some("http://upper:3128"),
            ),
            (
                &[("HTTPS_PROXY", ""), ("https_proxy", "lower:3128")],
                "https://example.com",
                Some("http://lower:3128"),
            ),
            (
                &[("HTTPS_PROXY", "p:3128"), ("no_proxy", "example.com")],
                "https://example.com",
                None,
            ),
            // Ports in NO_PROXY domains, and the scheme's default port.
            (
                &[("HTTPS_PROXY", "p:3128"), ("NO_PROXY", "example.com:443")],
                "https://example.com",
                None,
            ),
            (
                &[("HTTPS_PROXY", "p:3128"), ("NO_PROXY", "example.com:8443")],
                "https://example.com",
                Some("http://p:3128"),
            ),
            (
                &[("HTTPS_PROXY", "p:3128"), ("NO_PROXY", "example.com:8443")],
                "https://example.com:8443/v1",
                None,
            ),
        ];
        for (vars, url, want) in cases {
            let got = proxy_for(&env(vars), url);
            assert_eq!(got.as_deref(), *want, "{vars:?} {url}");
        }
    }

    /// Go's `UseProxyTests` against its `noProxy` list, and `TestAllNoProxy`.
    #[test]
    fn go_use_proxy_cases() {
        let no_proxy = "foobar.com, .barbaz.net, *.wildcard.io, 192.168.1.1, 192.168.1.2:81, \
                        192.168.1.3:80, 10.0.0.0/30, 2001:db8::52:0:1, [2001:db8::52:0:2]:443, \
                        [2001:db8::52:0:3]:80, 2002:db8:a::45/64";
        let cases = [
            ("localhost", false),
            ("127.0.0.1", false),
            ("127.0.0.2", false),
            ("::1", false),
            ("::2", true),
            ("192.168.1.1", false),
            ("192.168.1.2", true),
            ("192.168.1.3", false),
            ("192.168.1.4", true),
            ("10.0.0.2", false),
            ("10.0.0.4", true),
            ("2001:db8::52:0:1", false),
            ("2001:db8::52:0:2", true),
            ("2001:db8::52:0:3", false),
            ("2002:db8:a::123", false),
            ("fe80::424b:c8be:1643:a1b6", true),
            ("barbaz.net", true),
            ("www.barbaz.net", false),
            ("foobar.com", false),
            ("www.foobar.com", false),
            ("foofoobar.com", true),
            ("baz.com", true),
            ("localhost.net", true),
            ("local.localhost", true),
            ("barbarbaz.net", true),
            ("wildcard.io", true),
            ("nested.wildcard.io", false),
            ("awildcard.io", true),
        ];
        let list = env(&[("NO_PROXY", no_proxy)]);
        let all = env(&[("NO_PROXY", "*")]);
        for (host, proxied) in cases {
            assert_eq!(
                list.use_proxy(host, "80"),
                proxied,
                "{host}:80 against the list"
            );
            assert!(!all.use_proxy(host, "80"), "{host}:80 against *");
        }
        // Go's TestInvalidNoProxy: a malformed entry is skipped, not fatal.
        assert!(env(&[("NO_PROXY", ":1")]).use_proxy("example.com", "80"));
    }

    /// A proxy password never reaches the log.
    #[test]
    fn the_start_up_line_hides_a_proxy_password() {
        let shown = env(&[("HTTPS_PROXY", "http://me:s3cret@proxy:3128")]).to_string();
        assert!(
            shown.contains("http://me:***@proxy:3128 (HTTPS_PROXY)"),
            "{shown}"
        );
        assert!(!shown.contains("s3cret"), "{shown}");
    }

    /// What Go would take and fail with later, or take as SOCKS, is refused at start
    /// with the variable named.
    #[test]
    fn a_proxy_that_cannot_be_used_is_refused_naming_the_variable() {
        for (name, value) in [
            ("HTTPS_PROXY", "socks5://127.0.0.1"),
            ("http_proxy", "foo://host"),
        ] {
            let err = ProxyEnv::from_vars(|n| (n == name).then(|| value.to_string())).unwrap_err();
            assert!(err.0.starts_with(&format!("{name}=")), "{err}");
            assert!(err.0.contains("http://"), "{err}");
        }
    }
}
