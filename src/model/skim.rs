//! A watch event's node read by its structure: the few fields the controller keeps are
//! decoded, everything else (managed fields, images, node info: nine tenths of a
//! node's bytes) is stepped over by its brackets and strings.
//!
//! A heartbeat of a realistic node is about 10 KiB of JSON, and a cluster sends one per
//! node every few seconds to a minute. serde_json skips an unknown field by parsing it
//! (every number, every string's characters); here a skipped string is one word
//! looked at by hand, then a `memchr2` for its closing quote or a backslash. What is skipped is not validated: a number
//! such as `1.2.3` inside `images` passes here, where serde_json would refuse the line.
//! Nothing read from it is affected, and the kube-apiserver does not send such JSON.
//!
//! Everything read is read as strictly as the serde path ([`super::LabeledNode`]'s
//! `Deserialize`) reads it, and whatever this reader does not expect (an escape in a
//! read string, a `null` where serde would refuse one, a field read twice, the event's
//! `object` before its `type`, any other shape) makes it decline: [`event`] returns
//! `None` and the caller decodes the line with serde_json, which gives the same node
//! or its error. `tests/node_skim.rs` checks that both agree on random nodes.

use std::borrow::Cow;

use super::{
    ADDRESS_TYPES, CONDITION_WORDS, Condition, Label, LabeledNode, NETWORK_UNAVAILABLE, Node,
    NodeAddress,
};
use crate::selector::Labels;

/// The type of a watch event whose object is a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// `ADDED`.
    Added,
    /// `MODIFIED`.
    Modified,
    /// `DELETED`.
    Deleted,
}

/// A watch line `{"type":"ADDED"|"MODIFIED"|"DELETED","object":{...}}` read into its
/// type and node, with the node's labels when `with_labels` (left empty otherwise);
/// `None` when the line is anything else or is not in the shape this reader expects.
pub fn event(line: &[u8], with_labels: bool) -> Option<(EventType, LabeledNode)> {
    let mut r = Reader { bytes: line, at: 0 };
    r.expect(b'{')?;
    if r.key()? != b"type" {
        return None;
    }
    let kind = match r.raw()? {
        b"ADDED" => EventType::Added,
        b"MODIFIED" => EventType::Modified,
        b"DELETED" => EventType::Deleted,
        _ => return None,
    };
    r.expect(b',')?;
    if r.key()? != b"object" {
        return None;
    }
    let node = r.node(with_labels)?;
    r.expect(b'}')?;
    r.skip_whitespace();
    (r.at == r.bytes.len()).then_some((kind, node))
}

/// What one node object holds, before it becomes a [`Node`].
#[derive(Default)]
struct Parts<'a> {
    name: Option<&'a str>,
    uid: Option<&'a str>,
    resource_version: Option<&'a str>,
    labels: Option<Labels>,
    provider_id: Option<&'a str>,
    pod_cidrs: Option<Vec<String>>,
    addresses: Option<Vec<NodeAddress>>,
    network_unavailable: Option<Condition>,
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    // ---- a node: the fields kept ------------------------------------------------

    fn node(&mut self, with_labels: bool) -> Option<LabeledNode> {
        let mut parts = Parts::default();
        let mut seen = Seen::default();
        self.object(|r, key| match key {
            b"metadata" => {
                seen.first(0)?;
                r.metadata(&mut parts, with_labels)
            }
            b"spec" => {
                seen.first(1)?;
                r.spec(&mut parts)
            }
            b"status" => {
                seen.first(2)?;
                r.status(&mut parts)
            }
            _ => r.skip_value(),
        })?;
        let node = Node {
            name: parts.name.unwrap_or_default().to_string(),
            uid: parts.uid.unwrap_or_default().to_string(),
            resource_version: parts.resource_version.unwrap_or_default().to_string(),
            provider_id: parts
                .provider_id
                .filter(|p| !p.is_empty())
                .map(str::to_string),
            pod_cidrs: parts.pod_cidrs.unwrap_or_default(),
            addresses: parts.addresses.unwrap_or_default(),
            network_unavailable: parts.network_unavailable,
        };
        Some(LabeledNode {
            node,
            labels: parts.labels.unwrap_or_default(),
        })
    }

    fn metadata(&mut self, parts: &mut Parts<'a>, with_labels: bool) -> Option<()> {
        let mut seen = Seen::default();
        self.object(|r, key| match key {
            b"name" => {
                seen.first(0)?;
                parts.name = Some(r.string()?);
                Some(())
            }
            b"uid" => {
                seen.first(1)?;
                parts.uid = Some(r.string()?);
                Some(())
            }
            b"resourceVersion" => {
                seen.first(2)?;
                parts.resource_version = Some(r.string()?);
                Some(())
            }
            b"labels" if with_labels => {
                seen.first(3)?;
                parts.labels = r.nullable(Reader::labels)?;
                Some(())
            }
            _ => r.skip_value(),
        })
    }

    fn labels(&mut self) -> Option<Labels> {
        let mut labels = Labels::new();
        self.object(|r, key| {
            let key = text(key)?;
            let value = r.string()?;
            // serde's map keeps the last of a repeated key.
            labels.insert(key.to_string(), value.to_string());
            Some(())
        })?;
        Some(labels)
    }

    fn spec(&mut self, parts: &mut Parts<'a>) -> Option<()> {
        let mut seen = Seen::default();
        self.object(|r, key| match key {
            b"providerID" => {
                seen.first(0)?;
                parts.provider_id = r.nullable(Reader::string)?;
                Some(())
            }
            b"podCIDRs" => {
                seen.first(1)?;
                parts.pod_cidrs = r.nullable(|r| {
                    let mut cidrs = Vec::with_capacity(2);
                    r.array(|r| {
                        cidrs.push(r.string()?.to_string());
                        Some(())
                    })?;
                    cidrs.shrink_to_fit();
                    Some(cidrs)
                })?;
                Some(())
            }
            _ => r.skip_value(),
        })
    }

    fn status(&mut self, parts: &mut Parts<'a>) -> Option<()> {
        let mut seen = Seen::default();
        self.object(|r, key| match key {
            b"addresses" => {
                seen.first(0)?;
                parts.addresses = r.nullable(|r| {
                    let mut addresses = Vec::with_capacity(2);
                    r.array(|r| {
                        addresses.push(r.address()?);
                        Some(())
                    })?;
                    addresses.shrink_to_fit();
                    Some(addresses)
                })?;
                Some(())
            }
            b"conditions" => {
                seen.first(1)?;
                // As the serde path: the first NetworkUnavailable condition, every
                // condition read (a malformed one anywhere refuses the node there).
                let mut found = None;
                r.nullable(|r| {
                    r.array(|r| {
                        let (kind, status, reason) = r.condition()?;
                        if found.is_none() && kind == NETWORK_UNAVAILABLE.as_bytes() {
                            found = Some(Condition {
                                status: word(status, CONDITION_WORDS)?,
                                reason: word(reason, CONDITION_WORDS)?,
                                // Not kept: the skip rule reads status and reason only.
                                message: Cow::Borrowed(""),
                            });
                        }
                        Some(())
                    })
                })?;
                parts.network_unavailable = found;
                Some(())
            }
            _ => r.skip_value(),
        })
    }

    fn address(&mut self) -> Option<NodeAddress> {
        let (mut kind, mut address) = (None, None);
        self.object(|r, key| match key {
            b"type" if kind.is_none() => {
                kind = Some(r.raw()?);
                Some(())
            }
            b"address" if address.is_none() => {
                address = Some(r.string()?);
                Some(())
            }
            b"type" | b"address" => None,
            _ => r.skip_value(),
        })?;
        Some(NodeAddress {
            kind: word(kind.unwrap_or_default(), ADDRESS_TYPES)?,
            address: address.unwrap_or_default().to_string(),
        })
    }

    /// A condition's type, status and reason (empty where missing), as they are in
    /// the line: only the NetworkUnavailable one's are kept, and checked then.
    fn condition(&mut self) -> Option<(&'a [u8], &'a [u8], &'a [u8])> {
        let (mut kind, mut status, mut reason) = (None, None, None);
        self.object(|r, key| {
            let slot = match key {
                b"type" => &mut kind,
                b"status" => &mut status,
                b"reason" => &mut reason,
                _ => return r.skip_value(),
            };
            if slot.is_some() {
                return None;
            }
            *slot = Some(r.raw()?);
            Some(())
        })?;
        Some((
            kind.unwrap_or_default(),
            status.unwrap_or_default(),
            reason.unwrap_or_default(),
        ))
    }

    // ---- JSON's structure ---------------------------------------------------------

    /// `null`, or what `read` reads.
    fn nullable<T>(&mut self, read: impl FnOnce(&mut Self) -> Option<T>) -> Option<Option<T>> {
        self.skip_whitespace();
        if self.bytes[self.at..].starts_with(b"null") {
            self.at += 4;
            return Some(None);
        }
        read(self).map(Some)
    }

    /// An object, `field` called with each key once the reader stands before its value.
    fn object(&mut self, mut field: impl FnMut(&mut Self, &'a [u8]) -> Option<()>) -> Option<()> {
        self.expect(b'{')?;
        if self.peek()? == b'}' {
            self.at += 1;
            return Some(());
        }
        loop {
            let key = self.key()?;
            field(self, key)?;
            match self.next()? {
                b',' => continue,
                b'}' => return Some(()),
                _ => return None,
            }
        }
    }

    /// An array, `element` called before each element.
    fn array(&mut self, mut element: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.expect(b'[')?;
        if self.peek()? == b']' {
            self.at += 1;
            return Some(());
        }
        loop {
            element(self)?;
            match self.next()? {
                b',' => continue,
                b']' => return Some(()),
                _ => return None,
            }
        }
    }

    /// A key and its colon, as it is in the line (compared with the names read, so
    /// not checked: a key that is none of them is skipped with its value).
    fn key(&mut self) -> Option<&'a [u8]> {
        let key = self.raw()?;
        self.expect(b':')?;
        Some(key)
    }

    /// A string without escapes, as serde_json reads it: valid UTF-8, no control
    /// characters.
    fn string(&mut self) -> Option<&'a str> {
        text(self.raw()?)
    }

    /// A string's bytes between its quotes, unchecked; one with an escape declines
    /// (serde would read `\u0061` as `a`).
    fn raw(&mut self) -> Option<&'a [u8]> {
        self.expect(b'"')?;
        let rest = &self.bytes[self.at..];
        let end = quote_or_backslash(rest, 32)?;
        if rest[end] != b'"' {
            return None;
        }
        self.at += end + 1;
        Some(&rest[..end])
    }

    /// Steps over any value: a string to its closing quote, an object or array by its
    /// brackets and strings, a scalar up to the byte that ends it.
    fn skip_value(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => {
                self.at += 1;
                self.skip_string_body()
            }
            b'{' | b'[' => self.skip_nested(),
            _ => {
                let start = self.at;
                while let Some(&b) = self.bytes.get(self.at) {
                    if matches!(b, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r') {
                        break;
                    }
                    self.at += 1;
                }
                (self.at > start).then_some(())
            }
        }
    }

    /// From an object's or array's opening bracket to after its closing one.
    fn skip_nested(&mut self) -> Option<()> {
        let mut depth = 0usize;
        loop {
            match *self.bytes.get(self.at)? {
                b'"' => {
                    self.at += 1;
                    self.skip_string_body()?;
                    continue;
                }
                b'{' | b'[' => depth += 1,
                b'}' | b']' => {
                    depth -= 1;
                    if depth == 0 {
                        self.at += 1;
                        return Some(());
                    }
                }
                _ => {}
            }
            self.at += 1;
        }
    }

    /// From after a string's opening quote to after its closing one.
    fn skip_string_body(&mut self) -> Option<()> {
        loop {
            // Skipped strings are long as often as not (image names): one word by
            // hand, then memchr2.
            let end = quote_or_backslash(self.bytes.get(self.at..)?, 8)?;
            self.at += end + 1;
            if self.bytes[self.at - 1] == b'"' {
                return Some(());
            }
            // A backslash: the escaped byte is not the string's end.
            self.at += 1;
        }
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        (self.next()? == byte).then_some(())
    }

    /// The next byte after whitespace, consumed.
    fn next(&mut self) -> Option<u8> {
        let b = self.peek()?;
        self.at += 1;
        Some(b)
    }

    /// The next byte after whitespace.
    fn peek(&mut self) -> Option<u8> {
        self.skip_whitespace();
        self.bytes.get(self.at).copied()
    }

    fn skip_whitespace(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.bytes.get(self.at) {
            self.at += 1;
        }
    }
}

/// A string's bytes as serde_json accepts them: valid UTF-8 without control characters.
fn text(bytes: &[u8]) -> Option<&str> {
    if bytes.iter().any(|&b| b < 0x20) {
        return None;
    }
    std::str::from_utf8(bytes).ok()
}

/// A word of `known` without a copy, any other text as its own.
fn word(bytes: &[u8], known: &[&'static str]) -> Option<Label> {
    match known.iter().find(|k| k.as_bytes() == bytes) {
        Some(k) => Some(Cow::Borrowed(k)),
        None => Some(Cow::Owned(text(bytes)?.to_string())),
    }
}

/// Where the first `"` or `\\` of `rest` is. Most strings of a node are short (keys,
/// words, timestamps), for which `memchr2`'s set-up costs more than the search: eight
/// bytes at a time for the first `by_hand` (a multiple of 8), `memchr2` for the rest
/// (image names, digests).
#[inline]
fn quote_or_backslash(rest: &[u8], by_hand: usize) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let mut at = 0;
    while at < by_hand {
        let Some(chunk) = rest[at..].first_chunk::<8>() else {
            return rest[at..]
                .iter()
                .position(|&b| b == b'"' || b == b'\\')
                .map(|i| at + i);
        };
        let word = u64::from_le_bytes(*chunk);
        // A byte equal to the one sought is zero after the xor; `(x - 1) & !x` sets
        // the high bit of a zero byte (and maybe of bytes above it, but the lowest
        // flagged byte is always a true match).
        let quote = word ^ (ONES * u64::from(b'"'));
        let backslash = word ^ (ONES * u64::from(b'\\'));
        let found = ((quote.wrapping_sub(ONES) & !quote)
            | (backslash.wrapping_sub(ONES) & !backslash))
            & HIGH;
        if found != 0 {
            return Some(at + (found.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    memchr::memchr2(b'"', b'\\', &rest[at..]).map(|i| at + i)
}

/// Which of an object's read fields have been seen: serde refuses a repeated one.
#[derive(Default)]
struct Seen(u8);

impl Seen {
    fn first(&mut self, field: u8) -> Option<()> {
        let bit = 1 << field;
        let first = self.0 & bit == 0;
        self.0 |= bit;
        first.then_some(())
    }
}
