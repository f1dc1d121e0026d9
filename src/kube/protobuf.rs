//! The node watch in Kubernetes' protobuf encoding (`application/vnd.kubernetes.protobuf;
//! stream=watch`), read for the fields the controller keeps.
//!
//! The kube-apiserver encodes a node in protobuf about four times faster than in JSON (a
//! list of 5 000 realistic nodes: 0.25–0.34 s against 0.87–1.4 s; benches/README.md,
//! "Protobuf against JSON, by hand"), and at 5 000 nodes that was most of our start-up:
//! upstream's client-go asks for protobuf. Protobuf is length-delimited, so a field
//! nobody reads (managed fields, images) is stepped over in one move, without looking at
//! its bytes.
//!
//! A stream is frames, each a 4-byte big-endian length and a `metav1.WatchEvent`:
//! `type` (1) and `object` (2, a `RawExtension` whose `raw` (1) is the object as the
//! protobuf serializer writes it: the magic `k8s\0`, then a `runtime.Unknown` whose
//! `raw` (2) is the object's message). Field numbers are those of `k8s.io/api`'s
//! `generated.proto`, which Kubernetes keeps stable (a number is never reused).

use super::error::Status;
use crate::model::skim::EventType;
use crate::model::{
    ADDRESS_TYPES, CONDITION_WORDS, Condition, LabeledNode, NETWORK_UNAVAILABLE, Node, NodeAddress,
    label,
};
use crate::selector::Labels;

/// The content type of a protobuf watch stream, as the API server names it.
pub const WATCH_CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf;stream=watch";

/// What one frame of a node watch holds.
#[derive(Debug)]
pub enum Frame {
    /// `ADDED`, `MODIFIED` or `DELETED`, with the node (its labels only if asked for).
    Node(EventType, LabeledNode),
    /// `BOOKMARK`: its resourceVersion, and whether it ends a streaming list's
    /// initial events (the annotation `k8s.io/initial-events-end: "true"`).
    Bookmark {
        /// `metadata.resourceVersion`.
        resource_version: String,
        /// The annotation `k8s.io/initial-events-end` is `"true"`.
        initial_events_end: bool,
    },
    /// `ERROR`, with its status.
    Error(Status),
    /// Any other type.
    Unknown(String),
}

/// One frame's event, or why it cannot be read.
pub fn watch_event(frame: &[u8], with_labels: bool) -> Result<Frame, String> {
    let mut kind = None;
    let mut object = None;
    for field in Fields(frame) {
        match field? {
            (1, Value::Bytes(b)) => kind = Some(text(b)?),
            (2, Value::Bytes(b)) => object = Some(b),
            _ => {}
        }
    }
    let kind = kind.ok_or("a watch event without a type")?;
    let raw = match object {
        Some(o) => only(o, 1)?.unwrap_or_default(),
        None => &[],
    };
    let message = unwrap_object(raw)?;
    Ok(match kind {
        "ADDED" | "MODIFIED" | "DELETED" => {
            let event = match kind {
                "ADDED" => EventType::Added,
                "MODIFIED" => EventType::Modified,
                _ => EventType::Deleted,
            };
            Frame::Node(event, node(message, with_labels)?)
        }
        "BOOKMARK" => bookmark(message)?,
        "ERROR" => Frame::Error(status(message)?),
        other => Frame::Unknown(other.to_string()),
    })
}

/// The message inside the serializer's envelope: `k8s\0`, then `runtime.Unknown`'s
/// `raw` (2). An empty object is an empty message.
fn unwrap_object(raw: &[u8]) -> Result<&[u8], String> {
    if raw.is_empty() {
        return Ok(raw);
    }
    let unknown = raw
        .strip_prefix(b"k8s\0")
        .ok_or("an object without the protobuf serializer's k8s\\0 prefix")?;
    Ok(only(unknown, 2)?.unwrap_or_default())
}

// ---- the messages ---------------------------------------------------------------

/// `v1.Node`: metadata (1), spec (2), status (3).
fn node(message: &[u8], with_labels: bool) -> Result<LabeledNode, String> {
    let mut node = Node::default();
    let mut labels = Labels::new();
    for field in Fields(message) {
        match field? {
            (1, Value::Bytes(meta)) => {
                // ObjectMeta: name (1), uid (5), resourceVersion (6), labels (11).
                for field in Fields(meta) {
                    match field? {
                        (1, Value::Bytes(b)) => node.name = text(b)?.to_string(),
                        (5, Value::Bytes(b)) => node.uid = text(b)?.to_string(),
                        (6, Value::Bytes(b)) => node.resource_version = text(b)?.to_string(),
                        (11, Value::Bytes(entry)) if with_labels => {
                            let (k, v) = map_entry(entry)?;
                            labels.insert(k.to_string(), v.to_string());
                        }
                        _ => {}
                    }
                }
            }
            (2, Value::Bytes(spec)) => {
                // NodeSpec: providerID (3), podCIDRs (7).
                for field in Fields(spec) {
                    match field? {
                        (3, Value::Bytes(b)) => {
                            let id = text(b)?;
                            node.provider_id = (!id.is_empty()).then(|| id.to_string());
                        }
                        (7, Value::Bytes(b)) => node.pod_cidrs.push(text(b)?.to_string()),
                        _ => {}
                    }
                }
            }
            (3, Value::Bytes(status)) => {
                // NodeStatus: conditions (4), addresses (5).
                for field in Fields(status) {
                    match field? {
                        // The first NetworkUnavailable condition, as the JSON path.
                        (4, Value::Bytes(c)) if node.network_unavailable.is_none() => {
                            node.network_unavailable = network_unavailable(c)?;
                        }
                        (5, Value::Bytes(a)) => node.addresses.push(address(a)?),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    // As the JSON decoder keeps them: 50 000 nodes stay in memory.
    node.pod_cidrs.shrink_to_fit();
    node.addresses.shrink_to_fit();
    Ok(LabeledNode { node, labels })
}

/// A `NodeCondition` (type 1, status 2, reason 5) if it is NetworkUnavailable.
fn network_unavailable(message: &[u8]) -> Result<Option<Condition>, String> {
    let (mut kind, mut status, mut reason) = ("", "", "");
    for field in Fields(message) {
        match field? {
            (1, Value::Bytes(b)) => kind = text(b)?,
            (2, Value::Bytes(b)) => status = text(b)?,
            (5, Value::Bytes(b)) => reason = text(b)?,
            _ => {}
        }
    }
    Ok((kind == NETWORK_UNAVAILABLE).then(|| Condition {
        status: label(status, CONDITION_WORDS),
        reason: label(reason, CONDITION_WORDS),
        // Not kept: the skip rule reads status and reason only.
        message: "".into(),
    }))
}

/// A `NodeAddress`: type (1), address (2).
fn address(message: &[u8]) -> Result<NodeAddress, String> {
    let (mut kind, mut address) = ("", "");
    for field in Fields(message) {
        match field? {
            (1, Value::Bytes(b)) => kind = text(b)?,
            (2, Value::Bytes(b)) => address = text(b)?,
            _ => {}
        }
    }
    Ok(NodeAddress {
        kind: label(kind, ADDRESS_TYPES),
        address: address.to_string(),
    })
}

/// A bookmark's object: a node with only metadata's resourceVersion (6) and
/// annotations (12).
fn bookmark(message: &[u8]) -> Result<Frame, String> {
    let mut resource_version = String::new();
    let mut initial_events_end = false;
    if let Some(meta) = only(message, 1)? {
        for field in Fields(meta) {
            match field? {
                (6, Value::Bytes(b)) => resource_version = text(b)?.to_string(),
                (12, Value::Bytes(entry)) => {
                    let (k, v) = map_entry(entry)?;
                    if k == "k8s.io/initial-events-end" {
                        initial_events_end = v == "true";
                    }
                }
                _ => {}
            }
        }
    }
    Ok(Frame::Bookmark {
        resource_version,
        initial_events_end,
    })
}

/// `metav1.Status`: status (2), message (3), reason (4), code (6).
fn status(message: &[u8]) -> Result<Status, String> {
    let mut s = Status {
        kind: "Status".into(),
        ..Status::default()
    };
    for field in Fields(message) {
        match field? {
            (2, Value::Bytes(b)) => s.status = text(b)?.to_string(),
            (3, Value::Bytes(b)) => s.message = text(b)?.to_string(),
            (4, Value::Bytes(b)) => s.reason = text(b)?.to_string(),
            (6, Value::Varint(code)) => s.code = u16::try_from(code).unwrap_or(0),
            _ => {}
        }
    }
    Ok(s)
}

/// A `map<string, string>` entry: key (1), value (2).
fn map_entry(entry: &[u8]) -> Result<(&str, &str), String> {
    let (mut key, mut value) = ("", "");
    for field in Fields(entry) {
        match field? {
            (1, Value::Bytes(b)) => key = text(b)?,
            (2, Value::Bytes(b)) => value = text(b)?,
            _ => {}
        }
    }
    Ok((key, value))
}

// ---- the wire format --------------------------------------------------------------

/// A protobuf string: UTF-8, as Go's protobuf writes it.
fn text(bytes: &[u8]) -> Result<&str, String> {
    std::str::from_utf8(bytes).map_err(|_| "a string that is not UTF-8".to_string())
}

/// The last value of length-delimited field `number` (protobuf's rule for a repeated
/// message field read as one), if any.
fn only(message: &[u8], number: u32) -> Result<Option<&[u8]>, String> {
    let mut found = None;
    for field in Fields(message) {
        if let (n, Value::Bytes(b)) = field?
            && n == number
        {
            found = Some(b);
        }
    }
    Ok(found)
}

/// One field's value.
enum Value<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    /// A fixed 32- or 64-bit value, never read here.
    Fixed,
}

/// The fields of a message, in order; an error ends it.
struct Fields<'a>(&'a [u8]);

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u32, Value<'a>), String>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.0.is_empty() {
            return None;
        }
        let field = self.field();
        if field.is_err() {
            self.0 = &[];
        }
        Some(field)
    }
}

impl<'a> Fields<'a> {
    fn field(&mut self) -> Result<(u32, Value<'a>), String> {
        let key = self.varint()?;
        let number = u32::try_from(key >> 3).map_err(|_| "a field number out of range")?;
        let value = match key & 7 {
            0 => Value::Varint(self.varint()?),
            1 => {
                self.take(8)?;
                Value::Fixed
            }
            2 => {
                let len = usize::try_from(self.varint()?).map_err(|_| "a length out of range")?;
                Value::Bytes(self.take(len)?)
            }
            5 => {
                self.take(4)?;
                Value::Fixed
            }
            wire => {
                return Err(format!(
                    "field {number} of wire type {wire}, which proto3 does not use"
                ));
            }
        };
        Ok((number, value))
    }

    fn varint(&mut self) -> Result<u64, String> {
        let mut value = 0u64;
        for (i, &b) in self.0.iter().enumerate().take(10) {
            value |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                self.0 = &self.0[i + 1..];
                return Ok(value);
            }
        }
        Err("a varint cut short or longer than 10 bytes".into())
    }

    fn take(&mut self, len: usize) -> Result<&'a [u8], String> {
        if len > self.0.len() {
            return Err(format!(
                "a field of {len} bytes where {} are left",
                self.0.len()
            ));
        }
        let (taken, rest) = self.0.split_at(len);
        self.0 = rest;
        Ok(taken)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A length-delimited field.
    fn bytes(number: u32, value: &[u8]) -> Vec<u8> {
        let mut out = varint(u64::from(number) << 3 | 2);
        out.extend(varint(value.len() as u64));
        out.extend_from_slice(value);
        out
    }

    fn varint(mut v: u64) -> Vec<u8> {
        let mut out = Vec::new();
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                return out;
            }
            out.push(b | 0x80);
        }
    }

    fn wrapped(message: &[u8]) -> Vec<u8> {
        let mut unknown = b"k8s\0".to_vec();
        unknown.extend(bytes(1, &[bytes(1, b"v1"), bytes(2, b"Node")].concat()));
        unknown.extend(bytes(2, message));
        unknown
    }

    fn event(kind: &str, message: &[u8]) -> Vec<u8> {
        [
            bytes(1, kind.as_bytes()),
            bytes(2, &bytes(1, &wrapped(message))),
        ]
        .concat()
    }

    #[test]
    fn a_node_event_is_read_for_the_fields_kept() {
        let meta = [
            bytes(1, b"n1"),
            bytes(2, b""),
            bytes(5, b"uid-1"),
            bytes(6, b"42"),
            bytes(11, &[bytes(1, b"zone"), bytes(2, b"a")].concat()),
            bytes(17, b"managed fields, never looked at"),
        ]
        .concat();
        let spec = [
            bytes(1, b"10.0.1.0/24"),
            bytes(3, b"hcloud://7"),
            bytes(7, b"10.0.1.0/24"),
            bytes(7, b"fd00::/64"),
        ]
        .concat();
        let ready = [bytes(1, b"Ready"), bytes(2, b"True")].concat();
        let routed = [
            bytes(1, b"NetworkUnavailable"),
            bytes(2, b"False"),
            bytes(5, b"RouteCreated"),
        ]
        .concat();
        let status = [
            bytes(4, &ready),
            bytes(4, &routed),
            bytes(
                5,
                &[bytes(1, b"InternalIP"), bytes(2, b"10.0.0.2")].concat(),
            ),
            bytes(8, b"images"),
        ]
        .concat();
        let node = [bytes(1, &meta), bytes(2, &spec), bytes(3, &status)].concat();
        let Frame::Node(kind, read) = watch_event(&event("MODIFIED", &node), true).unwrap() else {
            panic!("a node event");
        };
        assert_eq!(kind, EventType::Modified);
        assert_eq!(read.node.name, "n1");
        assert_eq!(read.node.uid, "uid-1");
        assert_eq!(read.node.resource_version, "42");
        assert_eq!(read.node.provider_id.as_deref(), Some("hcloud://7"));
        assert_eq!(read.node.pod_cidrs, ["10.0.1.0/24", "fd00::/64"]);
        assert_eq!(read.node.addresses, [NodeAddress::internal_ip("10.0.0.2")]);
        assert_eq!(
            read.node.network_unavailable,
            Some(Condition::new("False", "RouteCreated", ""))
        );
        assert_eq!(read.labels.get("zone").map(String::as_str), Some("a"));
        let Frame::Node(_, unlabeled) = watch_event(&event("ADDED", &node), false).unwrap() else {
            panic!("a node event");
        };
        assert!(unlabeled.labels.is_empty());
    }

    #[test]
    fn bookmarks_errors_and_bad_frames() {
        let meta = [
            bytes(6, b"99"),
            bytes(
                12,
                &[bytes(1, b"k8s.io/initial-events-end"), bytes(2, b"true")].concat(),
            ),
        ]
        .concat();
        let Frame::Bookmark {
            resource_version,
            initial_events_end,
        } = watch_event(&event("BOOKMARK", &bytes(1, &meta)), false).unwrap()
        else {
            panic!("a bookmark");
        };
        assert_eq!(
            (resource_version.as_str(), initial_events_end),
            ("99", true)
        );
        let mut gone = [
            bytes(2, b"Failure"),
            bytes(3, b"too old"),
            bytes(4, b"Expired"),
        ]
        .concat();
        gone.extend(varint(6 << 3));
        gone.extend(varint(410));
        let Frame::Error(status) = watch_event(&event("ERROR", &gone), false).unwrap() else {
            panic!("an error event");
        };
        assert_eq!((status.code, status.reason.as_str()), (410, "Expired"));
        assert!(matches!(
            watch_event(&event("SURPRISE", b""), false).unwrap(),
            Frame::Unknown(t) if t == "SURPRISE"
        ));
        // Cut short, or without the serializer's envelope.
        let whole = event("ADDED", &bytes(1, &bytes(1, b"n1")));
        assert!(watch_event(&whole[..whole.len() - 2], false).is_err());
        let bare = [bytes(1, b"ADDED"), bytes(2, &bytes(1, b"no envelope"))].concat();
        assert!(watch_event(&bare, false).is_err());
        assert!(watch_event(&[0xff; 12], false).is_err());
    }
}
