//! The encoding the controller's long-lived records share: a node of the view
//! ([`super::known::Known`]) and a route of the cloud's list
//! ([`super::view::KeptRoute`]) are each one byte string, read field by field. Tens of
//! thousands of them stay in memory for the life of the process, and a record of one
//! allocation costs malloc's overhead once, where a struct of strings pays it per
//! string.
//!
//! A field is a varint length and that many bytes; a well-known word (an address
//! type, a condition's status or reason) is a byte: its place in its list plus one,
//! or [`OTHER`] when the word is another, whose text then follows as a field.

/// The code of a word that is not well known: its text is kept as a field.
pub(super) const OTHER: u8 = 0;

/// `word`'s code: its place in `known` plus one, or [`OTHER`].
pub(super) fn code(word: &str, known: &[&str]) -> u8 {
    known
        .iter()
        .position(|k| *k == word)
        .and_then(|i| u8::try_from(i + 1).ok())
        .unwrap_or(OTHER)
}

pub(super) fn push_varint(data: &mut Vec<u8>, mut n: usize) {
    while n >= 0x80 {
        data.push((n as u8 & 0x7f) | 0x80);
        n >>= 7;
    }
    data.push(n as u8);
}

pub(super) fn push_field(data: &mut Vec<u8>, bytes: &[u8]) {
    push_varint(data, bytes.len());
    data.extend_from_slice(bytes);
}

/// Appends a word of `known` as its code, or [`OTHER`] and its text.
pub(super) fn push_word(data: &mut Vec<u8>, word: &str, known: &[&str]) {
    let code = code(word, known);
    data.push(code);
    if code == OTHER {
        push_field(data, word.as_bytes());
    }
}

/// Walks the fields of a record. Reads past the end give empty fields and zeros: a
/// record is only ever written by its own constructor, so they do not happen.
#[derive(Clone, Copy)]
pub(super) struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    pub fn new(data: &'a [u8]) -> Reader<'a> {
        Reader { data, at: 0 }
    }

    /// Where the next read starts, in the data.
    pub fn position(&self) -> usize {
        self.at.min(self.data.len())
    }

    pub fn byte(&mut self) -> u8 {
        let b = self.data.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        b
    }

    pub fn varint(&mut self) -> usize {
        let mut n = 0usize;
        for shift in (0..usize::BITS).step_by(7) {
            let b = self.byte();
            n |= usize::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                break;
            }
        }
        n
    }

    pub fn field(&mut self) -> &'a [u8] {
        let len = self.varint();
        let start = self.at.min(self.data.len());
        let end = start.saturating_add(len).min(self.data.len());
        self.at = start.saturating_add(len);
        &self.data[start..end]
    }

    /// A field written from a `&str`.
    pub fn text(&mut self) -> &'a str {
        std::str::from_utf8(self.field()).unwrap_or("")
    }

    /// A word [`push_word`] wrote.
    pub fn word(&mut self, known: &[&'static str]) -> &'a str {
        match self.byte() {
            OTHER => self.text(),
            code => known.get(usize::from(code) - 1).copied().unwrap_or(""),
        }
    }

    pub fn skip(&mut self, fields: usize) {
        for _ in 0..fields {
            self.field();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards the encoding: fields of every length class (one- to three-byte
    /// varints), words known and not, read back in order; a read past the end gives
    /// empty fields. A varint that keeps the eighth bit, or one that stops a byte
    /// early, fails it.
    #[test]
    fn fields_and_words_come_back_in_order() {
        let known = ["Alpha", "Beta"];
        let texts: Vec<String> = [0, 1, 127, 128, 300, 20_000]
            .iter()
            .map(|&n| "x".repeat(n))
            .collect();
        let mut data = Vec::new();
        for t in &texts {
            push_field(&mut data, t.as_bytes());
            push_word(&mut data, "Beta", &known);
            push_word(&mut data, t, &known);
        }
        let mut r = Reader::new(&data);
        for t in &texts {
            assert_eq!(r.text(), t);
            assert_eq!(r.word(&known), "Beta");
            assert_eq!(r.word(&known), t);
        }
        assert_eq!(r.text(), "");
        assert_eq!(r.byte(), 0);
        assert_eq!(code("Alpha", &known), 1);
        assert_eq!(code("Gamma", &known), OTHER);
    }
}
