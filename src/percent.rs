//! RFC 3986 percent-encoding for the query strings and paths the clients build: every
//! byte but the unreserved characters (`A-Z a-z 0-9 - _ . ~`) as `%XX`, upper-case, as
//! SigV4 requires and the Kubernetes and Hetzner APIs accept. Values are opaque
//! (continue tokens, resource versions, tag values), so nothing else may pass raw.

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

const UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

const UNRESERVED_AND_SLASH: &AsciiSet = &UNRESERVED.remove(b'/');

/// Encodes a query key or value (a `/` too).
pub(crate) fn encode(value: &str) -> String {
    utf8_percent_encode(value, UNRESERVED).to_string()
}

/// Encodes a URL path, keeping its `/` separators.
pub(crate) fn encode_path(path: &str) -> String {
    utf8_percent_encode(path, UNRESERVED_AND_SLASH).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_unreserved_characters_pass_raw() {
        assert_eq!(encode("aZ09-_.~"), "aZ09-_.~");
        assert_eq!(encode("10.244.5.0/24"), "10.244.5.0%2F24");
        assert_eq!(encode("a b+c=d&e"), "a%20b%2Bc%3Dd%26e");
        assert_eq!(encode("ä"), "%C3%A4");
        assert_eq!(encode_path("/a b/c"), "/a%20b/c");
    }
}
