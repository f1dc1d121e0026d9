//! AWS Signature Version 4, as documented by AWS ("Signing AWS API requests"), for the
//! Query APIs the provider and its tests use (EC2, and IAM in the tests).
//!
//! Pure functions only: the caller passes the time, so signing is tested against the
//! published test-suite vectors. This module never logs and never keeps a secret; the
//! canonical request and string to sign it returns contain no secret either.

use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

// Shared with Alibaba Cloud's signer, in a leaf of their own.
pub use crate::signing::{amz_date, hex, parse_rfc3339_utc, sha256_hex};

pub const ALGORITHM: &str = "AWS4-HMAC-SHA256";

/// The identity that signs: key pair plus the scope it signs for.
#[derive(Clone, Copy)]
pub struct SigningKey<'a> {
    pub access_key_id: &'a str,
    pub secret_access_key: &'a str,
    /// e.g. `us-east-1`.
    pub region: &'a str,
    /// The signing name of the service: `ec2`, `iam`.
    pub service: &'a str,
}

/// The parts of an HTTP request that SigV4 covers.
#[derive(Clone, Copy, Debug)]
pub struct RequestParts<'a> {
    pub method: &'a str,
    /// The path as sent (already absolute, e.g. `/`), unencoded.
    pub path: &'a str,
    /// Query parameters, unencoded.
    pub query: &'a [(&'a str, &'a str)],
    /// Every header to sign, including `host` and `x-amz-date` (and
    /// `x-amz-security-token` with temporary credentials). Names in any case.
    pub headers: &'a [(&'a str, &'a str)],
    pub payload: &'a [u8],
}

/// The result of signing, with the intermediate strings for tests and debugging.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signature {
    /// The value of the `Authorization` header.
    pub authorization: String,
    pub signed_headers: String,
    pub canonical_request: String,
    pub string_to_sign: String,
}

/// Signs `request` at `amz_date` (`YYYYMMDDTHHMMSSZ`, the value sent as `X-Amz-Date`).
pub fn sign(key: SigningKey<'_>, request: RequestParts<'_>, amz_date: &str) -> Signature {
    let date = &amz_date[..amz_date.len().min(8)];
    let scope = format!("{date}/{}/{}/aws4_request", key.region, key.service);
    let (canonical_headers, signed_headers) = canonical_headers(request.headers);
    let canonical_request = [
        request.method.to_string(),
        canonical_uri(request.path),
        canonical_query(request.query),
        canonical_headers,
        signed_headers.clone(),
        hex(&Sha256::digest(request.payload)),
    ]
    .join("\n");
    let string_to_sign = [
        ALGORITHM.to_string(),
        amz_date.to_string(),
        scope.clone(),
        hex(&Sha256::digest(canonical_request.as_bytes())),
    ]
    .join("\n");
    let signing_key = derive_key(key.secret_access_key, date, key.region, key.service);
    let signature = hex(&hmac(&signing_key, string_to_sign.as_bytes()));
    Signature {
        authorization: format!(
            "{ALGORITHM} Credential={}/{scope}, SignedHeaders={signed_headers}, Signature={signature}",
            key.access_key_id
        ),
        signed_headers,
        canonical_request,
        string_to_sign,
    }
}

/// The signing key: `"AWS4" + secret` HMAC-chained over date, region, service and
/// `aws4_request`.
pub fn derive_key(secret: &str, date: &str, region: &str, service: &str) -> [u8; 32] {
    let k_date = hmac(format!("AWS4{secret}").as_bytes(), date.as_bytes());
    let k_region = hmac(&k_date, region.as_bytes());
    let k_service = hmac(&k_region, service.as_bytes());
    hmac(&k_service, b"aws4_request")
}

fn hmac(key: &[u8], data: &[u8]) -> [u8; 32] {
    // HMAC is defined for keys of any length, so this cannot fail.
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key)
        .expect("HMAC-SHA256 accepts keys of any length");
    mac.update(data);
    mac.finalize().into_bytes().into()
}

/// Header names lower-cased and sorted, values trimmed with inner runs of spaces
/// collapsed; repeated names joined with commas in the order given.
fn canonical_headers(headers: &[(&str, &str)]) -> (String, String) {
    let mut merged: Vec<(String, String)> = Vec::new();
    for (name, value) in headers {
        let name = name.trim().to_ascii_lowercase();
        let value = value.split_whitespace().collect::<Vec<_>>().join(" ");
        match merged.iter_mut().find(|(n, _)| *n == name) {
            Some((_, v)) => {
                v.push(',');
                v.push_str(&value);
            }
            None => merged.push((name, value)),
        }
    }
    merged.sort_by(|a, b| a.0.cmp(&b.0));
    let canonical = merged
        .iter()
        .map(|(n, v)| format!("{n}:{v}\n"))
        .collect::<String>();
    let signed = merged
        .iter()
        .map(|(n, _)| n.as_str())
        .collect::<Vec<_>>()
        .join(";");
    (canonical, signed)
}

/// Each path segment URI-encoded once (the non-S3 rule), `/` kept.
fn canonical_uri(path: &str) -> String {
    if path.is_empty() {
        return "/".to_string();
    }
    uri_encode(path, false)
}

fn canonical_query(query: &[(&str, &str)]) -> String {
    let mut pairs: Vec<(String, String)> = query
        .iter()
        .map(|(k, v)| (uri_encode(k, true), uri_encode(v, true)))
        .collect();
    pairs.sort();
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&")
}

/// RFC 3986 percent-encoding of everything but the unreserved characters
/// (`A-Z a-z 0-9 - _ . ~`), with upper-case hex. `/` is kept unless `encode_slash`.
/// The same encoding serves for Query API form bodies.
pub fn uri_encode(input: &str, encode_slash: bool) -> String {
    if encode_slash {
        crate::percent::encode(input)
    } else {
        crate::percent::encode_path(input)
    }
}

#[cfg(test)]
mod tests {
    //! Vectors from AWS's published SigV4 test suite (`aws-sig-v4-test-suite`:
    //! key `AKIDEXAMPLE`, region us-east-1, service `service`, 2015-08-30 12:36:00 UTC)
    //! and the IAM `ListUsers` example of the SigV4 documentation.
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    const SECRET: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
    const DATE: &str = "20150830T123600Z";
    const HOST: &str = "example.amazonaws.com";

    fn suite_key() -> SigningKey<'static> {
        SigningKey {
            access_key_id: "AKIDEXAMPLE",
            secret_access_key: SECRET,
            region: "us-east-1",
            service: "service",
        }
    }

    fn signature_of(
        method: &str,
        path: &str,
        query: &[(&str, &str)],
        extra: &[(&str, &str)],
        payload: &str,
    ) -> String {
        let mut headers = vec![("Host", HOST), ("X-Amz-Date", DATE)];
        headers.extend_from_slice(extra);
        let signed = sign(
            suite_key(),
            RequestParts {
                method,
                path,
                query,
                headers: &headers,
                payload: payload.as_bytes(),
            },
            DATE,
        );
        let sig = signed
            .authorization
            .rsplit("Signature=")
            .next()
            .unwrap_or_default();
        sig.to_string()
    }

    #[test]
    fn get_vanilla_matches_the_published_vector() {
        let signed = sign(
            suite_key(),
            RequestParts {
                method: "GET",
                path: "/",
                query: &[],
                headers: &[("Host", HOST), ("X-Amz-Date", DATE)],
                payload: b"",
            },
            DATE,
        );
        assert_eq!(
            signed.canonical_request,
            "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\n\
             host;x-amz-date\n\
             e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            signed.authorization,
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, \
             SignedHeaders=host;x-amz-date, \
             Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"
        );
    }

    #[test]
    fn post_and_query_vectors_match() {
        assert_eq!(
            signature_of("POST", "/", &[], &[], ""),
            "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b"
        );
        assert_eq!(
            signature_of("POST", "/", &[("Param1", "value1")], &[], ""),
            "28038455d6de14eafc1f9222cf5aa6f1a96197d7deb8263271d420d138af7f11"
        );
        // Sorted by key, whatever order they come in.
        assert_eq!(
            signature_of(
                "GET",
                "/",
                &[("Param2", "value2"), ("Param1", "value1")],
                &[],
                ""
            ),
            "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500"
        );
    }

    #[test]
    fn form_body_vectors_match() {
        assert_eq!(
            signature_of(
                "POST",
                "/",
                &[],
                &[("Content-Type", "application/x-www-form-urlencoded")],
                "Param1=value1"
            ),
            "ff11897932ad3f4e8b18135d722051e5ac45fc38421b1da7b9d196a0fe09473a"
        );
        assert_eq!(
            signature_of(
                "POST",
                "/",
                &[],
                &[(
                    "Content-Type",
                    "application/x-www-form-urlencoded; charset=utf8"
                )],
                "Param1=value1"
            ),
            "1a72ec8f64bd914b0e42e42607c7fbce7fb2c7465f63e3092b3b0d39fa77a6fe"
        );
    }

    #[test]
    fn header_values_are_trimmed_and_names_sorted() {
        assert_eq!(
            signature_of(
                "GET",
                "/",
                &[],
                &[("My-Header1", "value1"), ("My-Header2", "\"a   b   c\"")],
                ""
            ),
            "acc3ed3afb60bb290fc8d2dd0098b9911fcaa05412b367055dee359757a9c736"
        );
        assert_eq!(
            signature_of("POST", "/", &[], &[("My-Header1", "VALUE1")], ""),
            "cdbc9802e29d2942e5e10b5bccfdd67c5f22c7c4e8ae67b53629efa58b974b7d"
        );
    }

    #[test]
    fn paths_are_uri_encoded() {
        assert_eq!(
            signature_of(
                "GET",
                "/-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
                &[],
                &[],
                ""
            ),
            "07ef7494c76fa4850883e2b006601f940f8a34d404d0cfa977f52a65bbf5f24f"
        );
        assert_eq!(
            signature_of("GET", "/\u{1234}", &[], &[], ""),
            "8318018e0b0f223aa2bbf98705b62bb787dc9c0e678f255a891fd03141be5d85"
        );
    }

    #[test]
    fn session_token_is_a_signed_header() {
        let token = "AQoDYXdzEPT//////////wEXAMPLEtc764bNrC9SAPBSM22wDOk4x4HIZ8j4FZTwdQWLWsKWHGBuFqwAeMicRXmxfpSPfIeoIYRqTflfKD8YUuwthAx7mSEI/qkPpKPi/kMcGdQrmGdeehM4IC1NtBmUpp2wUE8phUZampKsburEDy0KPkyQDYwT7WZ0wq5VSXDvp75YU9HFvlRd8Tx6q6fE8YQcHNVXAkiY9q6d+xo0rKwT38xVqr7ZD0u0iPPkUL64lIZbqBAz+scqKmlzm8FDrypNC9Yjc8fPOLn9FX9KSYvKTr4rvx3iSIlTJabIQwj2ICCR/oLxBA==";
        assert_eq!(
            signature_of("POST", "/", &[], &[("X-Amz-Security-Token", token)], ""),
            "85d96828115b5dc0cfc3bd16ad9e210dd772bbebba041836c64533a82be05ead"
        );
    }

    #[test]
    fn iam_list_users_example_matches_the_documentation() {
        let key = SigningKey {
            service: "iam",
            ..suite_key()
        };
        assert_eq!(
            hex(&derive_key(SECRET, "20150830", "us-east-1", "iam")),
            "c4afb1cc5771d871763a393e44b703571b55cc28424d1a5e86da6ed3c154a4b9"
        );
        let signed = sign(
            key,
            RequestParts {
                method: "GET",
                path: "/",
                query: &[("Action", "ListUsers"), ("Version", "2010-05-08")],
                headers: &[
                    (
                        "Content-Type",
                        "application/x-www-form-urlencoded; charset=utf-8",
                    ),
                    ("Host", "iam.amazonaws.com"),
                    ("X-Amz-Date", DATE),
                ],
                payload: b"",
            },
            DATE,
        );
        assert_eq!(
            signed.authorization,
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/iam/aws4_request, \
             SignedHeaders=content-type;host;x-amz-date, \
             Signature=5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7"
        );
    }

    #[test]
    fn dates_format_and_parse_in_utc() {
        let t = UNIX_EPOCH + Duration::from_secs(1_440_938_160); // 2015-08-30T12:36:00Z
        assert_eq!(amz_date(t), DATE);
        assert_eq!(parse_rfc3339_utc("2015-08-30T12:36:00Z"), Some(t));
        assert_eq!(parse_rfc3339_utc("2015-08-30T12:36:00.123Z"), Some(t));
        assert_eq!(
            amz_date(UNIX_EPOCH + Duration::from_secs(951_782_400)),
            "20000229T000000Z"
        );
        assert_eq!(parse_rfc3339_utc("2015-08-30 12:36:00Z"), None);
        assert_eq!(parse_rfc3339_utc("2015-13-30T12:36:00Z"), None);
        assert_eq!(parse_rfc3339_utc("2015-08-30T12:36:00+02:00"), None);
        assert_eq!(parse_rfc3339_utc("garbage"), None);
    }

    #[test]
    fn form_encoding_escapes_everything_but_unreserved() {
        assert_eq!(uri_encode("10.244.5.0/24", true), "10.244.5.0%2F24");
        assert_eq!(
            uri_encode("kubernetes.io/cluster/a b", true),
            "kubernetes.io%2Fcluster%2Fa%20b"
        );
        assert_eq!(uri_encode("ä~", true), "%C3%A4~");
    }
}
