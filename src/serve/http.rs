//! HTTP/1.x for the metrics server: the request head (parsed with `httparse`), the
//! statuses we answer with, and the bytes of a response. No IO and no state.

use std::fmt::Write as _;

use crate::secret::Secret;

/// Most header lines a request may carry; more gets 431.
const MAX_HEADERS: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Status {
    Ok,
    BadRequest,
    Unauthorized,
    Forbidden,
    NotFound,
    MethodNotAllowed,
    ContentTooLarge,
    HeaderFieldsTooLarge,
    ServiceUnavailable,
    VersionNotSupported,
}

impl Status {
    pub(super) fn code(self) -> u16 {
        match self {
            Status::Ok => 200,
            Status::BadRequest => 400,
            Status::Unauthorized => 401,
            Status::Forbidden => 403,
            Status::NotFound => 404,
            Status::MethodNotAllowed => 405,
            Status::ContentTooLarge => 413,
            Status::HeaderFieldsTooLarge => 431,
            Status::ServiceUnavailable => 503,
            Status::VersionNotSupported => 505,
        }
    }

    fn reason(self) -> &'static str {
        match self {
            Status::Ok => "OK",
            Status::BadRequest => "Bad Request",
            Status::Unauthorized => "Unauthorized",
            Status::Forbidden => "Forbidden",
            Status::NotFound => "Not Found",
            Status::MethodNotAllowed => "Method Not Allowed",
            Status::ContentTooLarge => "Content Too Large",
            Status::HeaderFieldsTooLarge => "Request Header Fields Too Large",
            Status::ServiceUnavailable => "Service Unavailable",
            Status::VersionNotSupported => "HTTP Version Not Supported",
        }
    }
}

/// The outcome of reading a request head so far.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Parsed {
    /// More bytes are needed.
    Partial,
    /// A `GET` or `HEAD` for `path` (query removed), with its bearer token if any.
    Request {
        head_only: bool,
        path: String,
        bearer: Option<Secret>,
    },
    /// A request we answer with an error status and a short reason.
    Reject(Status, &'static str),
}

impl Parsed {
    /// For the debug log: never the token.
    pub(super) fn describe(&self) -> String {
        match self {
            Parsed::Partial => "partial request".into(),
            Parsed::Request {
                head_only,
                path,
                bearer,
            } => format!(
                "{} {path}{}",
                if *head_only { "HEAD" } else { "GET" },
                if bearer.is_some() {
                    " (with a bearer token)"
                } else {
                    ""
                }
            ),
            Parsed::Reject(status, why) => format!("rejected with {}: {why}", status.code()),
        }
    }
}

/// Parses a request head (RFC 9112) once its blank line has arrived. Only what the
/// server needs is interpreted: the request line, `Host`, `Authorization`, and the
/// body framing, so that a body is refused rather than misread.
pub(super) fn parse_head(buf: &[u8], max_head: usize) -> Parsed {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    let len = match request.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if buf.len() > max_head => {
            return Parsed::Reject(Status::HeaderFieldsTooLarge, "request head too large");
        }
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(httparse::Error::TooManyHeaders) => {
            return Parsed::Reject(Status::HeaderFieldsTooLarge, "too many header lines");
        }
        Err(httparse::Error::Version) if names_another_http_version(buf) => {
            return Parsed::Reject(
                Status::VersionNotSupported,
                "only HTTP/1.0 and HTTP/1.1 are served",
            );
        }
        Err(httparse::Error::Version) => {
            return Parsed::Reject(Status::BadRequest, "malformed request line");
        }
        Err(httparse::Error::HeaderName | httparse::Error::HeaderValue) => {
            return Parsed::Reject(Status::BadRequest, "malformed header line");
        }
        Err(_) => return Parsed::Reject(Status::BadRequest, "malformed request line"),
    };
    if len > max_head {
        return Parsed::Reject(Status::HeaderFieldsTooLarge, "request head too large");
    }
    let (Some(method), Some(target), Some(version)) =
        (request.method, request.path, request.version)
    else {
        return Parsed::Reject(Status::BadRequest, "malformed request line");
    };
    let mut has_host = false;
    let mut content_length: Option<u64> = None;
    let mut chunked = false;
    let mut bearer = None;
    for h in request.headers.iter() {
        if h.name.eq_ignore_ascii_case("host") {
            has_host = true;
        } else if h.name.eq_ignore_ascii_case("content-length") {
            let Some(n) = std::str::from_utf8(h.value)
                .ok()
                .map(str::trim)
                .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|s| s.parse::<u64>().ok())
            else {
                return Parsed::Reject(Status::BadRequest, "invalid Content-Length");
            };
            if content_length.is_some_and(|m| m != n) {
                return Parsed::Reject(Status::BadRequest, "conflicting Content-Length");
            }
            content_length = Some(n);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = true;
        } else if h.name.eq_ignore_ascii_case("authorization") {
            bearer = bearer_token(h.value);
        }
    }
    if version == 1 && !has_host {
        return Parsed::Reject(Status::BadRequest, "HTTP/1.1 request without Host");
    }
    let head_only = match method {
        "GET" => false,
        "HEAD" => true,
        _ => return Parsed::Reject(Status::MethodNotAllowed, "only GET and HEAD are served"),
    };
    // The body of a GET means nothing here; a small one is drained after the
    // response, a large or unbounded one is refused.
    if chunked || content_length.is_some_and(|n| n > max_head as u64) {
        return Parsed::Reject(
            Status::ContentTooLarge,
            "a GET or HEAD may carry a small body at most",
        );
    }
    Parsed::Request {
        head_only,
        path: path_of(target),
        bearer,
    }
}

/// Whether the request line ends in `HTTP/d.d` (a version we do not serve, such as
/// HTTP/2's preface) rather than in garbage.
fn names_another_http_version(buf: &[u8]) -> bool {
    let start = buf
        .iter()
        .position(|b| *b != b'\r' && *b != b'\n')
        .unwrap_or(buf.len());
    let line = buf[start..]
        .split(|b| *b == b'\n')
        .next()
        .unwrap_or_default();
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    matches!(
        line.rsplit(|b| *b == b' ').next(),
        Some([b'H', b'T', b'T', b'P', b'/', major, b'.', minor])
            if major.is_ascii_digit() && minor.is_ascii_digit()
    )
}

/// The token of `Authorization: Bearer TOKEN` (the scheme is case-insensitive).
fn bearer_token(value: &[u8]) -> Option<Secret> {
    let value = std::str::from_utf8(value).ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then(|| Secret::new(token))
}

/// The path of an origin-form (`/metrics?x`) or absolute-form
/// (`http://host:8080/metrics`) target, without query or fragment.
fn path_of(target: &str) -> String {
    let rest = match target.split_once("://") {
        Some((_, after_scheme)) => match after_scheme.find('/') {
            Some(i) => &after_scheme[i..],
            None => "/",
        },
        None => target,
    };
    let end = rest.find(['?', '#']).unwrap_or(rest.len());
    rest[..end].to_string()
}

/// The Prometheus text format, version 0.0.4.
pub(super) const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
pub(super) const TEXT_CONTENT_TYPE: &str = "text/plain; charset=utf-8";

/// A complete response: the head and, unless `head_only`, the body.
pub(super) fn response(status: Status, content_type: &str, body: &str, head_only: bool) -> Vec<u8> {
    let mut head = String::with_capacity(200);
    let _ = write!(
        head,
        "HTTP/1.1 {} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n",
        status.code(),
        status.reason(),
        body.len()
    );
    match status {
        Status::MethodNotAllowed => head.push_str("Allow: GET, HEAD\r\n"),
        Status::Unauthorized => head.push_str("WWW-Authenticate: Bearer\r\n"),
        Status::ServiceUnavailable => head.push_str("Retry-After: 1\r\n"),
        _ => {}
    }
    head.push_str("\r\n");
    let mut out = head.into_bytes();
    if !head_only {
        out.extend_from_slice(body.as_bytes());
    }
    out
}

/// A plain-text response with a one-line body.
pub(super) fn text(status: Status, line: &str, head_only: bool) -> Vec<u8> {
    response(status, TEXT_CONTENT_TYPE, &format!("{line}\n"), head_only)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: usize = 8 * 1024;

    fn request(path: &str) -> Parsed {
        Parsed::Request {
            head_only: false,
            path: path.into(),
            bearer: None,
        }
    }

    #[test]
    fn a_complete_get_is_parsed_with_its_query_removed() {
        let p = parse_head(b"GET /metrics?name[]=x HTTP/1.1\r\nHost: a\r\n\r\n", MAX);
        assert_eq!(p, request("/metrics"));
        let p = parse_head(b"HEAD /readyz HTTP/1.0\r\n\r\n", MAX);
        assert_eq!(
            p,
            Parsed::Request {
                head_only: true,
                path: "/readyz".into(),
                bearer: None,
            }
        );
    }

    #[test]
    fn the_bearer_token_is_taken_and_never_described() {
        let p = parse_head(
            b"GET /metrics HTTP/1.1\r\nHost: a\r\nAuthorization: bearer  s3cr3t \r\n\r\n",
            MAX,
        );
        let Parsed::Request { bearer, .. } = &p else {
            panic!("{p:?}")
        };
        assert_eq!(bearer.as_ref().map(Secret::expose), Some("s3cr3t"));
        assert!(!p.describe().contains("s3cr3t"), "{}", p.describe());
        assert!(!format!("{p:?}").contains("s3cr3t"));
        for other in ["Basic dXNlcjpwYXNz", "Bearer", "Bearer  "] {
            let raw = format!("GET /metrics HTTP/1.1\r\nHost: a\r\nAuthorization: {other}\r\n\r\n");
            assert_eq!(
                parse_head(raw.as_bytes(), MAX),
                request("/metrics"),
                "{other}"
            );
        }
    }

    #[test]
    fn lenient_forms_are_accepted() {
        for raw in [
            &b"\r\nGET /healthz HTTP/1.1\r\nHost: a\r\n\r\n"[..],
            b"GET /healthz HTTP/1.1\nHost: a\n\n",
            b"GET http://10.0.0.1:8080/healthz HTTP/1.1\r\nHost: a\r\n\r\n",
            b"GET /healthz HTTP/1.0\r\nX-Empty:\r\n\r\n",
        ] {
            assert_eq!(
                parse_head(raw, MAX),
                request("/healthz"),
                "{}",
                String::from_utf8_lossy(raw)
            );
        }
    }

    #[test]
    fn a_head_without_its_blank_line_is_partial_until_it_passes_the_cap() {
        assert_eq!(
            parse_head(b"GET /metrics HTTP/1.1\r\nHost: a\r\n", MAX),
            Parsed::Partial
        );
        assert_eq!(parse_head(b"GET /met", MAX), Parsed::Partial);
        assert_eq!(parse_head(b"", MAX), Parsed::Partial);
        let mut big = b"GET /metrics HTTP/1.1\r\nX-Filler: ".to_vec();
        big.resize(MAX + 1, b'a');
        assert!(matches!(
            parse_head(&big, MAX),
            Parsed::Reject(Status::HeaderFieldsTooLarge, _)
        ));
        big.extend_from_slice(b"\r\n\r\n");
        assert!(matches!(
            parse_head(&big, MAX),
            Parsed::Reject(Status::HeaderFieldsTooLarge, _)
        ));
        let many: String = (0..MAX_HEADERS + 1)
            .map(|i| format!("X-{i}: a\r\n"))
            .collect();
        let raw = format!("GET /metrics HTTP/1.1\r\nHost: a\r\n{many}\r\n");
        assert!(matches!(
            parse_head(raw.as_bytes(), MAX),
            Parsed::Reject(Status::HeaderFieldsTooLarge, _)
        ));
    }

    #[test]
    fn bad_requests_get_the_status_that_names_their_fault() {
        for (raw, status) in [
            (&b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n"[..], 400),
            (b"GET /metrics\r\n\r\n", 400),
            (b"GET  /metrics HTTP/1.1\r\nHost: a\r\n\r\n", 400),
            (b"GET /metrics HTTP/1.1\r\n\r\n", 400),
            (b"GET /metrics HTTP/1.1\r\nHost a\r\n\r\n", 400),
            (b"GET /metrics HTTP/1.1\r\nHost: a\x01\r\n\r\n", 400),
            (b"GET /me\x00trics HTTP/1.1\r\nHost: a\r\n\r\n", 400),
            (b"GET /metrics HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n", 400),
            (
                b"GET /metrics HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                400,
            ),
            (b"GET /metrics FTP/1.1\r\n\r\n", 400),
            (b"PRI * HTTP/2.0\r\n\r\n", 505),
            (b"POST /metrics HTTP/1.1\r\nHost: a\r\n\r\n", 405),
            (b"DELETE /metrics HTTP/1.0\r\n\r\n", 405),
            (b"GET /metrics HTTP/1.1\r\nHost: a\r\nContent-Length: 99999\r\n\r\n", 413),
            (b"GET /metrics HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n", 413),
        ] {
            match parse_head(raw, MAX) {
                Parsed::Reject(s, _) => {
                    assert_eq!(s.code(), status, "{}", String::from_utf8_lossy(raw))
                }
                other => panic!("{}: {other:?}", String::from_utf8_lossy(raw)),
            }
        }
    }

    #[test]
    fn random_bytes_never_panic_the_parser() {
        use rand::rngs::SmallRng;
        use rand::{RngExt, SeedableRng};
        let pieces: &[&[u8]] = &[
            b"GET",
            b"HEAD",
            b" ",
            b"/",
            b"?",
            b"://",
            b"HTTP/1.1",
            b"HTTP/9.",
            b"\r",
            b"\n",
            b"\r\n",
            b":",
            b"Host",
            b"Content-Length",
            b"Authorization: Bearer ",
            b"99999999999999999999999",
            b"0",
            b"\xff",
            b"\xe2\x82",
            b"\x00",
            b"\t",
            b"#",
        ];
        let mut rng = SmallRng::seed_from_u64(7);
        for _ in 0..20_000 {
            let mut input = Vec::new();
            for _ in 0..rng.random_range(0..40) {
                input.extend_from_slice(pieces[rng.random_range(0..pieces.len())]);
            }
            let _ = parse_head(&input, 64);
            let _ = parse_head(&input, MAX).describe();
        }
    }

    #[test]
    fn a_small_declared_body_is_tolerated() {
        let raw = b"GET /metrics HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello";
        assert_eq!(parse_head(raw, MAX), request("/metrics"));
    }

    #[test]
    fn error_statuses_carry_the_header_a_client_acts_on() {
        let text = String::from_utf8(text(Status::MethodNotAllowed, "no", false)).unwrap();
        assert!(
            text.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"),
            "{text}"
        );
        assert!(text.contains("\r\nAllow: GET, HEAD\r\n"), "{text}");
        let text = String::from_utf8(text_of(Status::Unauthorized)).unwrap();
        assert!(text.contains("\r\nWWW-Authenticate: Bearer\r\n"), "{text}");
        let text = String::from_utf8(text_of(Status::ServiceUnavailable)).unwrap();
        assert!(text.contains("\r\nRetry-After: 1\r\n"), "{text}");
    }

    fn text_of(status: Status) -> Vec<u8> {
        text(status, "x", false)
    }
}
