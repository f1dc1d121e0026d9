//! A lenient reader for the XML that EC2 (and IAM, for the tests) answers with.
//!
//! Replies are small, so they are read into a tree of [`Element`]s and navigated by
//! local name. Namespaces are ignored (real AWS has a trailing slash on the namespace,
//! moto does not), unknown elements are kept but never required, and a missing optional
//! element is simply absent. This module must never fail on an element it does not
//! know; it fails only on XML that is not well formed.

use std::fmt;

use quick_xml::Reader;
use quick_xml::events::Event;

/// One element: its local name (without namespace prefix), its text (the
/// concatenation of its own text nodes, entities resolved, trimmed) and its children.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Element {
    pub name: String,
    pub text: String,
    pub children: Vec<Element>,
}

/// Why a reply could not be read as XML.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XmlError(pub String);

impl fmt::Display for XmlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "malformed XML: {}", self.0)
    }
}

impl std::error::Error for XmlError {}

/// Documents deeper than this are refused rather than read (EC2 replies nest about
/// eight levels).
const MAX_DEPTH: usize = 64;

impl Element {
    /// Parses a document and returns its root element.
    pub fn parse(xml: &str) -> Result<Element, XmlError> {
        let mut reader = Reader::from_str(xml);
        // Start with a synthetic parent so that the root is simply its first child.
        let mut stack: Vec<Element> = vec![Element::default()];
        loop {
            let event = reader
                .read_event()
                .map_err(|e| XmlError(format!("at byte {}: {e}", reader.buffer_position())))?;
            match event {
                Event::Start(start) => {
                    if stack.len() > MAX_DEPTH {
                        return Err(XmlError(format!("nested deeper than {MAX_DEPTH}")));
                    }
                    stack.push(Element::named(start.local_name().as_ref()));
                }
                Event::Empty(start) => {
                    let element = Element::named(start.local_name().as_ref());
                    top(&mut stack)?.children.push(element);
                }
                Event::End(_) => {
                    let mut done = stack.pop().ok_or_else(|| XmlError("unbalanced".into()))?;
                    done.text = done.text.trim().to_string();
                    top(&mut stack)?.children.push(done);
                }
                Event::Text(text) => top(&mut stack)?.text.push_str(&text.xml10_content()),
                Event::CData(data) => top(&mut stack)?.text.push_str(&data.into_inner()),
                Event::GeneralRef(reference) => {
                    let resolved = match reference.resolve_char_ref() {
                        Ok(Some(c)) => c.to_string(),
                        Ok(None) => predefined_entity(&reference.xml10_content())
                            .ok_or_else(|| {
                                XmlError(format!("unknown entity &{};", reference.xml10_content()))
                            })?
                            .to_string(),
                        Err(e) => return Err(XmlError(format!("bad character reference: {e}"))),
                    };
                    top(&mut stack)?.text.push_str(&resolved);
                }
                Event::Eof => break,
                Event::Comment(_) | Event::Decl(_) | Event::PI(_) | Event::DocType(_) => {}
            }
        }
        if stack.len() != 1 {
            return Err(XmlError(format!(
                "{} element(s) left open",
                stack.len() - 1
            )));
        }
        let document = stack.pop().unwrap_or_default();
        document
            .children
            .into_iter()
            .next()
            .ok_or_else(|| XmlError("no root element".into()))
    }

    fn named(name: &str) -> Element {
        Element {
            name: name.to_string(),
            ..Element::default()
        }
    }

    /// The first child called `name`.
    pub fn child(&self, name: &str) -> Option<&Element> {
        self.children.iter().find(|c| c.name == name)
    }

    /// The text of the first child called `name`, if it is present and not empty.
    pub fn text_of(&self, name: &str) -> Option<&str> {
        self.child(name)
            .map(|c| c.text.as_str())
            .filter(|t| !t.is_empty())
    }

    /// The `<item>` children of the list element `set` (EC2's `routeTableSet`,
    /// `tagSet`, …); empty when the list is absent.
    pub fn items<'a>(&'a self, set: &str) -> impl Iterator<Item = &'a Element> + 'a {
        self.child(set)
            .into_iter()
            .flat_map(|s| s.children.iter().filter(|c| c.name == "item"))
    }

    /// The first element called `name` anywhere below this one, depth first. Error
    /// replies differ in shape (`Response/Errors/Error`, `ErrorResponse/Error`), so
    /// their fields are found by search.
    pub fn find(&self, name: &str) -> Option<&Element> {
        self.children.iter().find_map(|c| {
            if c.name == name {
                Some(c)
            } else {
                c.find(name)
            }
        })
    }
}

fn top(stack: &mut [Element]) -> Result<&mut Element, XmlError> {
    stack
        .last_mut()
        .ok_or_else(|| XmlError("text outside the document".into()))
}

fn predefined_entity(name: &str) -> Option<&'static str> {
    match name {
        "lt" => Some("<"),
        "gt" => Some(">"),
        "amp" => Some("&"),
        "apos" => Some("'"),
        "quot" => Some("\""),
        _ => None,
    }
}

/// An error reply of an AWS Query API, whichever of its shapes it has.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ErrorReply {
    pub code: String,
    pub message: String,
    pub request_id: Option<String>,
}

impl ErrorReply {
    /// Reads an error body; `None` if the body is not an AWS error document.
    pub fn parse(body: &str) -> Option<ErrorReply> {
        let root = Element::parse(body).ok()?;
        let code = root.find("Code")?.text.clone();
        if code.is_empty() {
            return None;
        }
        let message = root
            .find("Message")
            .map(|m| m.text.clone())
            .unwrap_or_default();
        let request_id = ["RequestID", "RequestId", "requestId"]
            .iter()
            .find_map(|n| root.find(n))
            .map(|e| e.text.clone())
            .filter(|t| !t.is_empty());
        Some(ErrorReply {
            code,
            message,
            request_id,
        })
    }
}

/// The `requestId` of a successful reply, for log lines.
pub fn request_id(root: &Element) -> Option<&str> {
    root.text_of("requestId")
        .or_else(|| root.find("RequestId").map(|e| e.text.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_are_ignored_and_text_is_trimmed() {
        let root = Element::parse(
            r#"<?xml version="1.0" encoding="UTF-8"?>
            <ec2:CreateRouteResponse xmlns:ec2="http://ec2.amazonaws.com/doc/2016-11-15/">
              <ec2:requestId> 59dbff89 </ec2:requestId>
              <ec2:return>true</ec2:return>
            </ec2:CreateRouteResponse>"#,
        )
        .expect("parses");
        assert_eq!(root.name, "CreateRouteResponse");
        assert_eq!(root.text_of("requestId"), Some("59dbff89"));
        assert_eq!(root.text_of("return"), Some("true"));
        assert_eq!(root.text_of("missing"), None);
    }

    #[test]
    fn entities_and_character_references_are_resolved() {
        let root = Element::parse("<a><m>x &lt; y &amp;&#32;z&#x21;</m></a>").expect("parses");
        assert_eq!(root.text_of("m"), Some("x < y & z!"));
    }

    #[test]
    fn empty_sets_and_empty_elements_yield_no_items() {
        let root = Element::parse("<r><associationSet/><tagSet></tagSet></r>").expect("parses");
        assert_eq!(root.items("associationSet").count(), 0);
        assert_eq!(root.items("tagSet").count(), 0);
        assert_eq!(root.items("absentSet").count(), 0);
    }

    #[test]
    fn malformed_xml_is_an_error_not_a_panic() {
        assert!(Element::parse("<a><b></a>").is_err());
        assert!(Element::parse("<a>").is_err());
        assert!(Element::parse("").is_err());
        assert!(Element::parse("<html><body>Internal Server Error").is_err());
        assert!(Element::parse("<a>&bogus;</a>").is_err());
    }

    #[test]
    fn error_replies_of_each_shape_are_read() {
        let ec2 = "<Response><Errors><Error><Code>InvalidRoute.NotFound</Code>\
                   <Message>no route</Message></Error></Errors><RequestID>r-1</RequestID></Response>";
        assert_eq!(
            ErrorReply::parse(ec2),
            Some(ErrorReply {
                code: "InvalidRoute.NotFound".into(),
                message: "no route".into(),
                request_id: Some("r-1".into()),
            })
        );
        let moto_auth = "<ErrorResponse><Errors><Error><Code>AuthFailure</Code><Message>AWS was \
                         not able to validate the provided access credentials</Message><Type>Sender\
                         </Type></Error></Errors></ErrorResponse>";
        let reply = ErrorReply::parse(moto_auth).expect("an error");
        assert_eq!(reply.code, "AuthFailure");
        assert_eq!(reply.request_id, None);
        let iam = "<ErrorResponse xmlns=\"https://iam.amazonaws.com/doc/2010-05-08/\"><Error>\
                   <Type>Sender</Type><Code>NoSuchEntity</Code><Message>x</Message></Error>\
                   <RequestId>abc</RequestId></ErrorResponse>";
        let reply = ErrorReply::parse(iam).expect("an error");
        assert_eq!(
            (reply.code.as_str(), reply.request_id.as_deref()),
            ("NoSuchEntity", Some("abc"))
        );
        assert_eq!(ErrorReply::parse("<html>oops</html>"), None);
    }
}
