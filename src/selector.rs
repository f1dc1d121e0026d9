//! Kubernetes label selectors (`--node-selector`), read and checked by the rules of
//! apimachinery's `labels.Parse`, the parser behind `kubectl get -l`, so that a
//! selector that works with kubectl means the same here and one kubectl refuses is
//! refused here too, with a message that points at the bad part.
//!
//! The grammar (a comma means AND; spaces around tokens do not matter):
//!
//! ```text
//! selector    := "" | requirement ("," requirement)*
//! requirement := KEY                          the label exists
//!              | "!" KEY                      the label does not exist
//!              | KEY ("=" | "==" | "!=") VALUE
//!              | KEY ("in" | "notin") "(" VALUE ("," VALUE)* ")"
//!              | KEY (">" | "<") INTEGER      the label's value, read as an integer
//! ```
//!
//! KEY is a qualified name: an optional DNS-subdomain prefix and `/`, then a name of at
//! most 63 characters (alphanumerics, `-`, `_`, `.`, starting and ending with an
//! alphanumeric). VALUE follows the label-value rule: empty, or such a name. As in
//! apimachinery, `in`, `notin` and an operator's missing value mean the empty value
//! (`key=` selects `key` set to ""), and `in`/`notin` may be a value. So `zone in ()`
//! and `zone notin ()` parse, as the set holding the empty value: apimachinery's
//! `parseValues` returns `{""}` for `()`, so `NewRequirement`'s "values set can't be
//! empty" never fires from a parsed string (its own tests parse `x notin ( )`), and
//! refusing here would refuse a selector that kubectl accepts.
//!
//! This module parses text from the command line: it must never panic, whatever the
//! bytes (`label_selectors` in `src/fuzz.rs` holds it to that).

use std::collections::BTreeMap;
use std::fmt;

/// A node's labels, by key.
pub type Labels = BTreeMap<String, String>;

/// A parsed label selector: every requirement must hold (AND). The empty selector
/// selects everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector {
    /// Sorted by key, as apimachinery sorts them, so the text form is canonical.
    requirements: Vec<Requirement>,
}

/// One requirement of a selector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requirement {
    key: String,
    operator: Operator,
    /// Sorted and without repeats; one value for the exact-match operators, none for
    /// `Exists` and `DoesNotExist`.
    values: Vec<String>,
}

/// How a requirement relates its key to its values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operator {
    /// `key`: the label is present, with any value.
    Exists,
    /// `!key`: the label is absent.
    DoesNotExist,
    /// `key=value`.
    Equals,
    /// `key==value` (the same as `=`; kept to print the selector as it was written).
    DoubleEquals,
    /// `key!=value`: the label is absent or has another value.
    NotEquals,
    /// `key in (a,b)`: the label is present with one of the values.
    In,
    /// `key notin (a,b)`: the label is absent or has none of the values.
    NotIn,
    /// `key>n`: the label is present and its value is an integer above n.
    GreaterThan,
    /// `key<n`: the label is present and its value is an integer below n.
    LessThan,
}

/// Why a selector does not parse: what is wrong and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SelectorError {
    /// The selector as given.
    pub input: String,
    /// The byte offset of the bad part in `input`.
    pub at: usize,
    /// What is wrong there.
    pub problem: String,
}

impl fmt::Display for SelectorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rest = self.input.get(self.at..).unwrap_or("");
        let character = self.input.get(..self.at).map_or(0, |s| s.chars().count()) + 1;
        if rest.is_empty() {
            write!(
                f,
                "label selector {:?}: {} (at the end)",
                self.input, self.problem
            )
        } else {
            write!(
                f,
                "label selector {:?}: {} (at character {character}: {:?})",
                self.input,
                self.problem,
                prefix(rest, 40)
            )
        }
    }
}

impl std::error::Error for SelectorError {}

fn prefix(s: &str, max_chars: usize) -> &str {
    match s.char_indices().nth(max_chars) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

impl Selector {
    /// The selector that selects every node.
    pub fn everything() -> Selector {
        Selector::default()
    }

    /// Parses `input` as `kubectl -l` does.
    pub fn parse(input: &str) -> Result<Selector, SelectorError> {
        let tokens = lex(input).map_err(|(at, problem)| SelectorError {
            input: input.to_string(),
            at,
            problem,
        })?;
        let mut parser = Parser { tokens, next: 0 };
        let mut requirements = parser.selector().map_err(|(at, problem)| SelectorError {
            input: input.to_string(),
            at,
            problem,
        })?;
        // Stable: two requirements on one key keep their order, as in Go's sort.Sort
        // of a selector (which is not stable, but the order does not change a match).
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(Selector { requirements })
    }

    /// Whether it selects everything (no requirement).
    pub fn is_everything(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether a node with `labels` is selected.
    pub fn matches(&self, labels: &Labels) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }

    /// The requirements, sorted by key.
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }
}

impl Requirement {
    /// The label key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The operator.
    pub fn operator(&self) -> Operator {
        self.operator
    }

    /// The values, sorted.
    pub fn values(&self) -> &[String] {
        &self.values
    }

    /// Whether `labels` satisfy this requirement (apimachinery's `Requirement.Matches`).
    pub fn matches(&self, labels: &Labels) -> bool {
        let value = labels.get(&self.key);
        let listed = |v: &String| self.values.iter().any(|x| x == v);
        match self.operator {
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
            Operator::Equals | Operator::DoubleEquals | Operator::In => value.is_some_and(listed),
            Operator::NotEquals | Operator::NotIn => !value.is_some_and(listed),
            Operator::GreaterThan | Operator::LessThan => {
                let (Some(have), Some(limit)) = (
                    value.and_then(|v| v.parse::<i64>().ok()),
                    self.values.first().and_then(|v| v.parse::<i64>().ok()),
                ) else {
                    return false;
                };
                if self.operator == Operator::GreaterThan {
                    have > limit
                } else {
                    have < limit
                }
            }
        }
    }
}

impl fmt::Display for Selector {
    /// The canonical text: requirements sorted by key, values sorted, no spaces but
    /// around `in` and `notin` (as apimachinery prints a selector).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let first = self.values.first().map_or("", String::as_str);
        match self.operator {
            Operator::Exists => write!(f, "{}", self.key),
            Operator::DoesNotExist => write!(f, "!{}", self.key),
            Operator::Equals => write!(f, "{}={first}", self.key),
            Operator::DoubleEquals => write!(f, "{}=={first}", self.key),
            Operator::NotEquals => write!(f, "{}!={first}", self.key),
            Operator::GreaterThan => write!(f, "{}>{first}", self.key),
            Operator::LessThan => write!(f, "{}<{first}", self.key),
            Operator::In => write!(f, "{} in ({})", self.key, self.values.join(",")),
            Operator::NotIn => write!(f, "{} notin ({})", self.key, self.values.join(",")),
        }
    }
}

// ---------------------------------------------------------------------------------
// The lexer: identifiers are runs of anything but spaces and the operator characters;
// `in` and `notin` are keywords where an operator may stand.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Token {
    Identifier,
    In,
    NotIn,
    Not,
    Equals,
    DoubleEquals,
    NotEquals,
    GreaterThan,
    LessThan,
    OpenParen,
    CloseParen,
    Comma,
    End,
}

/// A token, its text and its byte offset.
#[derive(Clone, Copy, Debug)]
struct Item<'a> {
    token: Token,
    text: &'a str,
    at: usize,
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_operator_char(b: u8) -> bool {
    matches!(b, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

fn symbol(text: &str) -> Option<Token> {
    Some(match text {
        "=" => Token::Equals,
        "==" => Token::DoubleEquals,
        "!" => Token::Not,
        "!=" => Token::NotEquals,
        ">" => Token::GreaterThan,
        "<" => Token::LessThan,
        "(" => Token::OpenParen,
        ")" => Token::CloseParen,
        "," => Token::Comma,
        _ => return None,
    })
}

type Failure = (usize, String);

fn lex(input: &str) -> Result<Vec<Item<'_>>, Failure> {
    let bytes = input.as_bytes();
    let mut items = Vec::new();
    let mut i = 0;
    loop {
        while i < bytes.len() && is_space(bytes[i]) {
            i += 1;
        }
        if i == bytes.len() {
            items.push(Item {
                token: Token::End,
                text: "",
                at: i,
            });
            return Ok(items);
        }
        let start = i;
        if is_operator_char(bytes[i]) {
            // The longest run of operator characters that is one symbol ("!=" beats
            // "!"), as the Go lexer scans it. Operator characters are ASCII, so the
            // slices below fall on character boundaries.
            let mut best: Option<(Token, usize)> = None;
            let mut end = i;
            while end < bytes.len() && is_operator_char(bytes[end]) {
                end += 1;
                match symbol(&input[start..end]) {
                    Some(t) => best = Some((t, end)),
                    None if best.is_some() => break,
                    None => {}
                }
            }
            let Some((token, end)) = best else {
                return Err((
                    start,
                    format!("{:?} is not an operator", &input[start..end]),
                ));
            };
            items.push(Item {
                token,
                text: &input[start..end],
                at: start,
            });
            i = end;
        } else {
            while i < bytes.len() && !is_space(bytes[i]) && !is_operator_char(bytes[i]) {
                i += 1;
            }
            let text = &input[start..i];
            let token = match text {
                "in" => Token::In,
                "notin" => Token::NotIn,
                _ => Token::Identifier,
            };
            items.push(Item {
                token,
                text,
                at: start,
            });
        }
    }
}

// ---------------------------------------------------------------------------------
// The parser: recursive descent over the tokens, as apimachinery's.

struct Parser<'a> {
    tokens: Vec<Item<'a>>,
    next: usize,
}

/// How a token reads where a value may stand: `in` and `notin` are plain words there.
fn as_value(item: Item<'_>) -> Token {
    match item.token {
        Token::In | Token::NotIn => Token::Identifier,
        t => t,
    }
}

fn shown(item: Item<'_>) -> String {
    if item.token == Token::End {
        "the end".to_string()
    } else {
        format!("{:?}", item.text)
    }
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Item<'a> {
        // The lexer always ends the list with End, and nothing consumes past it.
        self.tokens[self.next.min(self.tokens.len() - 1)]
    }

    fn take(&mut self) -> Item<'a> {
        let item = self.peek();
        if item.token != Token::End {
            self.next += 1;
        }
        item
    }

    fn selector(&mut self) -> Result<Vec<Requirement>, Failure> {
        let mut requirements = Vec::new();
        if self.peek().token == Token::End {
            return Ok(requirements);
        }
        loop {
            let item = self.peek();
            if !matches!(as_value(item), Token::Identifier | Token::Not) {
                return Err((
                    item.at,
                    format!("found {}, expected a label key or '!'", shown(item)),
                ));
            }
            requirements.push(self.requirement()?);
            let after = self.take();
            match after.token {
                Token::End => return Ok(requirements),
                Token::Comma => {
                    let next = self.peek();
                    if !matches!(as_value(next), Token::Identifier | Token::Not) {
                        return Err((
                            next.at,
                            format!(
                                "found {} after ',', expected a label key or '!'",
                                shown(next)
                            ),
                        ));
                    }
                }
                _ => {
                    return Err((
                        after.at,
                        format!(
                            "found {}, expected ',' or the end of the selector",
                            shown(after)
                        ),
                    ));
                }
            }
        }
    }

    fn requirement(&mut self) -> Result<Requirement, Failure> {
        let mut first = self.take();
        let negated = first.token == Token::Not;
        if negated {
            first = self.take();
        }
        if as_value(first) != Token::Identifier {
            return Err((
                first.at,
                format!("found {}, expected a label key", shown(first)),
            ));
        }
        let key = first.text;
        check_key(key).map_err(|p| (first.at, p))?;
        let follows = self.peek().token;
        if negated || matches!(follows, Token::End | Token::Comma) {
            if negated && !matches!(follows, Token::End | Token::Comma) {
                // "!key=value": Go reads the operator next and fails on it; say why.
                let item = self.peek();
                return Err((
                    item.at,
                    format!(
                        "found {} after !{key}, expected ',' or the end of the selector: '!' \
                         takes a key alone",
                        shown(item)
                    ),
                ));
            }
            let operator = if negated {
                Operator::DoesNotExist
            } else {
                Operator::Exists
            };
            return Ok(Requirement {
                key: key.to_string(),
                operator,
                values: Vec::new(),
            });
        }
        let op_item = self.take();
        let operator = match op_item.token {
            Token::Equals => Operator::Equals,
            Token::DoubleEquals => Operator::DoubleEquals,
            Token::NotEquals => Operator::NotEquals,
            Token::In => Operator::In,
            Token::NotIn => Operator::NotIn,
            Token::GreaterThan => Operator::GreaterThan,
            Token::LessThan => Operator::LessThan,
            _ => {
                return Err((
                    op_item.at,
                    format!(
                        "found {} after the key {key:?}, expected one of =, ==, !=, in, notin, \
                         >, <, ',' or the end",
                        shown(op_item)
                    ),
                ));
            }
        };
        let values = match operator {
            Operator::In | Operator::NotIn => self.value_set()?,
            _ => vec![self.exact_value()?],
        };
        for (value, at) in &values {
            check_value(key, value).map_err(|p| (*at, p))?;
            if matches!(operator, Operator::GreaterThan | Operator::LessThan)
                && value.parse::<i64>().is_err()
            {
                return Err((
                    *at,
                    format!("the value {value:?} of {key:?} must be an integer for '>' and '<'"),
                ));
            }
        }
        let mut values: Vec<String> = values.into_iter().map(|(v, _)| v.to_string()).collect();
        values.sort();
        values.dedup();
        Ok(Requirement {
            key: key.to_string(),
            operator,
            values,
        })
    }

    /// The value after `=`, `==`, `!=`, `>` or `<`; none (the end or a comma) is "".
    fn exact_value(&mut self) -> Result<(&'a str, usize), Failure> {
        let item = self.peek();
        match as_value(item) {
            Token::End | Token::Comma => Ok(("", item.at)),
            Token::Identifier => {
                self.take();
                Ok((item.text, item.at))
            }
            _ => Err((item.at, format!("found {}, expected a value", shown(item)))),
        }
    }

    /// `( a, b, ... )`; an empty entry (`()`, `(a,)`, `(,a)`) is the empty value.
    fn value_set(&mut self) -> Result<Vec<(&'a str, usize)>, Failure> {
        let open = self.take();
        if open.token != Token::OpenParen {
            return Err((open.at, format!("found {}, expected '('", shown(open))));
        }
        let mut values = Vec::new();
        // Whether a value may come next: at the start and after each comma.
        let mut want_value = true;
        loop {
            let item = self.take();
            match as_value(item) {
                Token::Identifier if want_value => {
                    values.push((item.text, item.at));
                    want_value = false;
                }
                Token::Comma => {
                    if want_value {
                        values.push(("", item.at));
                    }
                    want_value = true;
                }
                Token::CloseParen => {
                    if want_value {
                        values.push(("", item.at));
                    }
                    return Ok(values);
                }
                _ => {
                    let expected = if want_value {
                        "a value, ',' or ')'"
                    } else {
                        "',' or ')'"
                    };
                    return Err((
                        item.at,
                        format!("found {}, expected {expected}", shown(item)),
                    ));
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------
// Validation of keys and values (apimachinery's IsQualifiedName and
// IsValidLabelValue).

/// The longest name part of a key, and the longest value.
const NAME_MAX: usize = 63;
/// The longest DNS subdomain (a key's prefix).
const SUBDOMAIN_MAX: usize = 253;

const NAME_RULE: &str = "alphanumeric characters, '-', '_' or '.', starting and ending with an \
                         alphanumeric character (e.g. 'MyName', 'my.name', '123-abc')";
const PREFIX_RULE: &str = "a DNS subdomain: lower case alphanumeric characters, '-' or '.', \
                           each part starting and ending with an alphanumeric character \
                           (e.g. 'example.com')";

/// A label key: `[prefix/]name`.
fn check_key(key: &str) -> Result<(), String> {
    let mut problems = Vec::new();
    let name = match key.split_once('/') {
        None => key,
        Some((_, rest)) if rest.contains('/') => {
            return Err(format!(
                "the label key {key:?} has more than one '/': a key is a name of {NAME_RULE}, \
                 with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
            ));
        }
        Some((prefix, name)) => {
            if prefix.is_empty() {
                problems.push("its prefix part must not be empty".to_string());
            } else {
                if prefix.len() > SUBDOMAIN_MAX {
                    problems.push(format!(
                        "its prefix part must be at most {SUBDOMAIN_MAX} characters"
                    ));
                }
                if !is_dns_subdomain(prefix) {
                    problems.push(format!("its prefix part must be {PREFIX_RULE}"));
                }
            }
            name
        }
    };
    if name.is_empty() {
        problems.push("its name part must not be empty".to_string());
    } else {
        if name.len() > NAME_MAX {
            problems.push(format!(
                "its name part must be at most {NAME_MAX} characters"
            ));
        }
        if !is_name(name) {
            problems.push(format!("its name part must consist of {NAME_RULE}"));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "invalid label key {key:?}: {}",
            problems.join("; ")
        ))
    }
}

/// A label value: empty or a name of at most 63 characters.
fn check_value(key: &str, value: &str) -> Result<(), String> {
    let mut problems = Vec::new();
    if value.len() > NAME_MAX {
        problems.push(format!("it must be at most {NAME_MAX} characters"));
    }
    if !value.is_empty() && !is_name(value) {
        problems.push(format!("it must be empty or consist of {NAME_RULE}"));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "invalid value {value:?} for the label key {key:?}: {}",
            problems.join("; ")
        ))
    }
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, non-empty.
fn is_name(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(first), Some(last)) => {
            first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// Dot-separated DNS-1123 labels: `[a-z0-9]([-a-z0-9]*[a-z0-9])?`.
fn is_dns_subdomain(s: &str) -> bool {
    s.split('.').all(|label| {
        let b = label.as_bytes();
        let edge = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
        match (b.first(), b.last()) {
            (Some(first), Some(last)) => {
                edge(first) && edge(last) && b.iter().all(|c| edge(c) || *c == b'-')
            }
            _ => false,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn selects(selector: &str, pairs: &[(&str, &str)]) -> bool {
        Selector::parse(selector).unwrap().matches(&labels(pairs))
    }

    fn error(selector: &str) -> SelectorError {
        match Selector::parse(selector) {
            Ok(s) => panic!("{selector:?} parsed as {s:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn every_operator_matches_as_in_kubernetes() {
        let worker = &[("role", "worker"), ("zone", "fsn1"), ("gen", "3")][..];
        let robot = &[
            ("role", "worker"),
            ("instance.hetzner.cloud/is-root-server", "true"),
        ][..];
        for (selector, on_worker, on_robot) in [
            ("", true, true),
            ("role", true, true),
            ("!zone", false, true),
            ("role=worker", true, true),
            ("role==worker", true, true),
            ("zone!=fsn1", false, true), // absent counts as "not equal"
            ("zone in (fsn1,nbg1)", true, false),
            ("zone notin (fsn1)", false, true), // absent counts as "not in"
            ("gen>2", true, false),             // absent never compares
            ("gen<3", false, false),
            ("instance.hetzner.cloud/is-root-server!=true", true, false),
            (
                "role=worker,!instance.hetzner.cloud/is-root-server",
                true,
                false,
            ),
            ("role=worker, zone in (fsn1) ,gen", true, false),
        ] {
            assert_eq!(
                selects(selector, worker),
                on_worker,
                "{selector:?} on the worker"
            );
            assert_eq!(
                selects(selector, robot),
                on_robot,
                "{selector:?} on the robot"
            );
        }
    }

    #[test]
    fn empty_values_and_keywords_as_values_read_as_apimachinery_reads_them() {
        assert!(selects("a=", &[("a", "")]));
        assert!(selects("a=,b", &[("a", ""), ("b", "x")]));
        assert!(selects("a in ()", &[("a", "")]));
        assert!(selects("a in (,x)", &[("a", "")]));
        assert!(selects("a in (x,)", &[("a", "")]));
        assert!(selects("a in (in, notin)", &[("a", "notin")]));
        assert!(selects("a=in", &[("a", "in")]));
        assert!(!selects("a=in", &[("a", "x")]));
        // A key named like a keyword is still a key at the start of a requirement.
        assert!(selects("in", &[("in", "x")]));
    }

    #[test]
    fn an_empty_set_is_the_empty_value_and_parses_as_kubectl_parses_it() {
        // What k8s.io/apimachinery v0.37.2 labels.Parse says of each (run with Go):
        // in () matches only zone="", notin () matches all but zone="".
        for (selector, canonical, unset, empty, fsn1) in [
            ("zone in ()", "zone in ()", false, true, false),
            ("zone in ( )", "zone in ()", false, true, false),
            ("zone notin ()", "zone notin ()", true, false, true),
            ("zone notin (  )", "zone notin ()", true, false, true),
        ] {
            let s = Selector::parse(selector).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(s.to_string(), canonical, "{selector:?}");
            assert_eq!(s.requirements()[0].values(), [""], "{selector:?}");
            assert_eq!(selects(selector, &[]), unset, "{selector:?}, zone unset");
            assert_eq!(
                selects(selector, &[("zone", "")]),
                empty,
                "{selector:?}, zone=\"\""
            );
            assert_eq!(selects(selector, &[("zone", "fsn1")]), fsn1, "{selector:?}");
        }
    }

    #[test]
    fn the_text_form_is_canonical() {
        let s = Selector::parse(" zone in (nbg1, fsn1,fsn1),role==w , !robot,gen>2").unwrap();
        assert_eq!(s.to_string(), "gen>2,!robot,role==w,zone in (fsn1,nbg1)");
        assert_eq!(Selector::parse(&s.to_string()).unwrap(), s);
        assert!(Selector::parse("  ").unwrap().is_everything());
    }

    #[test]
    fn syntax_errors_point_at_the_bad_part() {
        for (selector, at, says) in [
            ("role=worker,", 12, "after ','"),
            (",role", 0, "expected a label key"),
            ("role=worker zone=x", 12, "expected ',' or the end"),
            ("zone in (a,b", 12, "expected ',' or ')'"),
            ("zone in a", 8, "expected '('"),
            ("zone in (a b)", 11, "expected ',' or ')'"),
            ("zone in (a,=)", 11, "expected a value"),
            ("role worker", 5, "expected one of"),
            ("role=(x)", 5, "expected a value"),
            ("!role=x", 5, "'!' takes a key alone"),
            ("!", 1, "expected a label key"),
            ("role=!x", 5, "expected a value"),
            ("role=>x", 5, "expected a value"),
            ("a&&=b", 0, "invalid label key"),
        ] {
            let e = error(selector);
            assert_eq!(e.at, at, "{selector:?}: {e}");
            assert!(e.problem.contains(says), "{selector:?}: {e}");
            assert!(e.to_string().contains(&format!("{selector:?}")), "{e}");
        }
        // The message quotes where the problem starts, or says it is at the end.
        assert!(error("zone in (a,b").to_string().ends_with("(at the end)"));
        assert!(
            error("role=worker zone=x")
                .to_string()
                .ends_with("(at character 13: \"zone=x\")")
        );
    }

    #[test]
    fn keys_are_qualified_names_with_an_optional_subdomain_prefix() {
        let long_name = "n".repeat(63);
        let long_prefix = format!("{}.com", "p".repeat(250));
        for good in [
            "role".to_string(),
            "node-role.kubernetes.io/worker".to_string(),
            "Role_1.x".to_string(),
            "1".to_string(),
            long_name.clone(),
            format!("example.com/{long_name}"),
        ] {
            assert!(Selector::parse(&good).is_ok(), "{good:?}");
        }
        for (bad, says) in [
            (format!("{long_name}n"), "at most 63"),
            ("-role".to_string(), "name part must consist"),
            ("role-".to_string(), "name part must consist"),
            ("ro$le".to_string(), "name part must consist"),
            ("/role".to_string(), "prefix part must not be empty"),
            ("example.com/".to_string(), "name part must not be empty"),
            (
                "Example.com/role".to_string(),
                "prefix part must be a DNS subdomain",
            ),
            (
                "a..b/role".to_string(),
                "prefix part must be a DNS subdomain",
            ),
            ("a/b/c".to_string(), "more than one '/'"),
            (format!("{long_prefix}/role"), "at most 253"),
            ("rôle".to_string(), "name part must consist"),
        ] {
            let e = error(&bad);
            assert!(e.problem.contains(says), "{bad:?}: {e}");
            assert_eq!(e.at, 0, "{bad:?}");
        }
    }

    #[test]
    fn values_follow_the_label_value_rule() {
        assert!(Selector::parse(&format!("a={}", "v".repeat(63))).is_ok());
        for (bad, at, says) in [
            (format!("a={}", "v".repeat(64)), 2, "at most 63"),
            ("a=-x".to_string(), 2, "must be empty or consist"),
            ("a in (x,y_)".to_string(), 8, "must be empty or consist"),
            ("a!=x/y".to_string(), 3, "must be empty or consist"),
            ("a>x".to_string(), 2, "must be an integer"),
            ("a<".to_string(), 2, "must be an integer"),
        ] {
            let e = error(&bad);
            assert_eq!(e.at, at, "{bad:?}: {e}");
            assert!(e.problem.contains(says), "{bad:?}: {e}");
        }
    }
}
