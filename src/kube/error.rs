//! The one error type of the Kubernetes client, and the decoding of the API server's
//! `Status` bodies.
//!
//! Every non-2xx answer of the API server carries a `Status` object whose `reason`
//! says what happened (`Expired`, `Conflict`, `AlreadyExists`, `NotFound`, ...).
//! [`ApiError`] keeps it so that callers branch on [`ApiErrorKind`] rather than on
//! status codes. Messages name the URL involved and never contain credentials.

use std::fmt;
use std::time::Duration;

use serde::Deserialize;

/// What went wrong talking to the API server.
#[derive(Debug)]
pub enum KubeError {
    /// The API server answered with a non-2xx status.
    Api(ApiError),
    /// The request did not complete: connection refused, TLS failure, timeout, a
    /// stream cut short.
    Transport {
        url: String,
        /// Whether a timeout ended it (connect, response, or the idle timeout of a
        /// watch).
        timeout: bool,
        message: String,
    },
    /// A 2xx answer whose body could not be decoded or was too large.
    Decode { url: String, message: String },
    /// Credentials could not be obtained (token file unreadable, exec plugin failed).
    Credentials(String),
    /// The client was shut down (its stop handle was used).
    Stopped,
}

impl KubeError {
    /// The API error, if the server answered.
    pub fn api(&self) -> Option<&ApiError> {
        match self {
            KubeError::Api(e) => Some(e),
            _ => None,
        }
    }

    /// The kind of API error, or `None` when the server did not answer.
    pub fn kind(&self) -> Option<ApiErrorKind> {
        self.api().map(ApiError::kind)
    }

    pub fn is(&self, kind: ApiErrorKind) -> bool {
        self.kind() == Some(kind)
    }

    pub(crate) fn transport(url: &str, err: ureq::Error) -> KubeError {
        let timeout = matches!(err, ureq::Error::Timeout(_));
        KubeError::Transport {
            url: url.to_string(),
            timeout,
            message: err.to_string(),
        }
    }
}

impl fmt::Display for KubeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KubeError::Api(e) => e.fmt(f),
            KubeError::Transport {
                url,
                timeout,
                message,
            } => {
                let what = if *timeout { "timed out" } else { "failed" };
                write!(
                    f,
                    "request to {url} {what}: {message} (is the API server reachable?)"
                )
            }
            KubeError::Decode { url, message } => {
                write!(f, "could not decode the answer of {url}: {message}")
            }
            KubeError::Credentials(m) => write!(f, "could not get credentials: {m}"),
            KubeError::Stopped => f.write_str("the Kubernetes client was stopped"),
        }
    }
}

impl std::error::Error for KubeError {}

/// A non-2xx answer, with its decoded `Status`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    /// The HTTP status code.
    pub code: u16,
    /// `Status.reason` (`Conflict`, `Expired`, ...), or empty if the body was not a
    /// Status.
    pub reason: String,
    /// `Status.message`, or the start of the body if it was not a Status.
    pub message: String,
    /// The method and URL of the request.
    pub request: String,
    /// When to come back: the `Retry-After` header or `details.retryAfterSeconds`.
    pub retry_after: Option<Duration>,
}

/// The classes of API errors that call for different reactions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApiErrorKind {
    /// 410: the resourceVersion or continue token is too old; relist.
    Gone,
    /// 409 with reason `Conflict`: the object changed since it was read.
    Conflict,
    /// 409 with reason `AlreadyExists`: a create lost to another writer.
    AlreadyExists,
    /// 404.
    NotFound,
    /// 401: the credentials were refused.
    Unauthorized,
    /// 403: RBAC denies the request.
    Forbidden,
    /// 429: API Priority and Fairness asks to slow down; see `retry_after`.
    TooManyRequests,
    /// 400 or 422: the request is malformed or invalid.
    Invalid,
    /// 5xx.
    ServerError,
    /// Anything else.
    Other,
}

/// The longest `Retry-After` honoured. APF asks for seconds; a longer wait is a
/// server's or proxy's mistake, and the node watch must come back within minutes.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);

impl ApiError {
    /// Builds the error from a response's status, `Retry-After` header and body
    /// (a wait of at most [`MAX_RETRY_AFTER`]).
    pub fn from_response(
        request: String,
        code: u16,
        retry_after_header: Option<&str>,
        body: &[u8],
    ) -> ApiError {
        let status: Option<Status> = serde_json::from_slice(body)
            .ok()
            .filter(|s: &Status| s.kind == "Status");
        let header_retry = retry_after_header
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(|s| Duration::from_secs(s).min(MAX_RETRY_AFTER));
        match status {
            Some(s) => ApiError {
                code,
                reason: s.reason,
                message: s.message,
                request,
                retry_after: header_retry.or_else(|| {
                    s.details
                        .and_then(|d| d.retry_after_seconds)
                        .filter(|s| *s > 0)
                        .map(|s| Duration::from_secs(s as u64).min(MAX_RETRY_AFTER))
                }),
            },
            None => ApiError {
                code,
                reason: String::new(),
                message: prefix(body, 200),
                request,
                retry_after: header_retry,
            },
        }
    }

    pub fn kind(&self) -> ApiErrorKind {
        match (self.code, self.reason.as_str()) {
            (410, _) | (_, "Expired") | (_, "Gone") => ApiErrorKind::Gone,
            (409, "AlreadyExists") => ApiErrorKind::AlreadyExists,
            (409, _) => ApiErrorKind::Conflict,
            (404, _) => ApiErrorKind::NotFound,
            (401, _) => ApiErrorKind::Unauthorized,
            (403, _) => ApiErrorKind::Forbidden,
            (429, _) => ApiErrorKind::TooManyRequests,
            (400 | 422, _) => ApiErrorKind::Invalid,
            (500..=599, _) => ApiErrorKind::ServerError,
            _ => ApiErrorKind::Other,
        }
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} answered {}", self.request, self.code)?;
        if !self.reason.is_empty() {
            write!(f, " {}", self.reason)?;
        }
        if !self.message.is_empty() {
            write!(f, ": {}", self.message)?;
        }
        match self.kind() {
            ApiErrorKind::Forbidden => {
                f.write_str(" (check the RBAC rules of the controller's service account or user)")
            }
            ApiErrorKind::Unauthorized => {
                f.write_str(" (the credentials were refused; check the token or certificate)")
            }
            _ => Ok(()),
        }
    }
}

impl std::error::Error for ApiError {}

/// The `Status` object of meta/v1, as far as errors need it. Also the object of an
/// `ERROR` watch event.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Status {
    pub kind: String,
    pub status: String,
    pub message: String,
    pub reason: String,
    pub code: u16,
    pub details: Option<StatusDetails>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct StatusDetails {
    pub retry_after_seconds: Option<i64>,
}

/// The first `max` bytes of `body` as text, for logs and error messages.
pub(crate) fn prefix(body: &[u8], max: usize) -> String {
    let cut = &body[..body.len().min(max)];
    let mut s = String::from_utf8_lossy(cut).into_owned();
    if body.len() > max {
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status_body(code: u16, reason: &str, extra: &str) -> Vec<u8> {
        format!(
            r#"{{"kind":"Status","apiVersion":"v1","metadata":{{}},"status":"Failure","message":"m","reason":"{reason}","code":{code}{extra}}}"#
        )
        .into_bytes()
    }

    #[test]
    fn status_bodies_tell_expired_conflict_and_already_exists_apart() {
        let e = |code, reason| {
            ApiError::from_response("GET /x".into(), code, None, &status_body(code, reason, ""))
                .kind()
        };
        assert_eq!(e(410, "Expired"), ApiErrorKind::Gone);
        assert_eq!(e(409, "Conflict"), ApiErrorKind::Conflict);
        assert_eq!(e(409, "AlreadyExists"), ApiErrorKind::AlreadyExists);
        assert_eq!(e(404, "NotFound"), ApiErrorKind::NotFound);
        assert_eq!(e(403, "Forbidden"), ApiErrorKind::Forbidden);
        assert_eq!(e(401, "Unauthorized"), ApiErrorKind::Unauthorized);
        assert_eq!(e(422, "Invalid"), ApiErrorKind::Invalid);
        assert_eq!(e(503, "ServiceUnavailable"), ApiErrorKind::ServerError);
    }

    #[test]
    fn retry_after_comes_from_the_header_or_the_status_details() {
        let body = status_body(
            429,
            "TooManyRequests",
            r#","details":{"retryAfterSeconds":7}"#,
        );
        let from_details = ApiError::from_response("GET /x".into(), 429, None, &body);
        assert_eq!(from_details.kind(), ApiErrorKind::TooManyRequests);
        assert_eq!(from_details.retry_after, Some(Duration::from_secs(7)));
        let from_header = ApiError::from_response("GET /x".into(), 429, Some("3"), &body);
        assert_eq!(from_header.retry_after, Some(Duration::from_secs(3)));
    }

    #[test]
    fn a_body_that_is_not_a_status_is_kept_as_the_message() {
        let e = ApiError::from_response("GET /x".into(), 502, None, b"<html>bad gateway</html>");
        assert_eq!(e.kind(), ApiErrorKind::ServerError);
        assert_eq!(e.message, "<html>bad gateway</html>");
        assert!(e.to_string().contains("GET /x answered 502"), "{e}");
    }

    /// Found by the parser tests: `Retry-After: 18446744073709551615` (or as many
    /// `retryAfterSeconds`) became a delay that overflowed the node watch's
    /// `Instant` arithmetic, a panic on its thread. Fails without the cap.
    #[test]
    fn a_retry_after_from_the_server_is_honoured_up_to_five_minutes() {
        let huge = ApiError::from_response("GET /x".into(), 429, Some("18446744073709551615"), b"");
        assert_eq!(huge.retry_after, Some(MAX_RETRY_AFTER));
        let body = status_body(
            429,
            "TooManyRequests",
            r#","details":{"retryAfterSeconds":9223372036854775807}"#,
        );
        let from_details = ApiError::from_response("GET /x".into(), 429, None, &body);
        assert_eq!(from_details.retry_after, Some(MAX_RETRY_AFTER));
        let mut watch =
            crate::kube::watch::Reflector::new(crate::kube::watch::WatchConfig::default());
        let t0 = std::time::Instant::now();
        let _ = watch.next_action(t0);
        let _ = watch.on_list_page(Err(&KubeError::Api(huge)), t0);
        let _ = watch.next_action(t0);
    }
}
