//! The code-aware tokenizer: `getUserName`, `get_user_name`, `os.path.join` and
//! `src/app/models.py` each give the whole token, lowercased, and then its parts.

use tantivy::tokenizer::{Token, TokenStream, Tokenizer};

#[derive(Clone, Default)]
pub struct CodeTokenizer;

pub struct CodeTokenStream {
    tokens: Vec<Token>,
    next: usize,
}

impl Tokenizer for CodeTokenizer {
    type TokenStream<'a> = CodeTokenStream;
    fn token_stream<'a>(&'a mut self, text: &'a str) -> CodeTokenStream {
        let mut tokens = Vec::new();
        split(text, &mut |from, to, t| {
            let position = tokens.len();
            tokens.push(Token { offset_from: from, offset_to: to, position, text: t, position_length: 1 });
        });
        CodeTokenStream { tokens, next: 0 }
    }
}

impl TokenStream for CodeTokenStream {
    fn advance(&mut self) -> bool {
        if self.next < self.tokens.len() {
            self.next += 1;
            true
        } else {
            false
        }
    }
    fn token(&self) -> &Token {
        &self.tokens[self.next - 1]
    }
    fn token_mut(&mut self) -> &mut Token {
        &mut self.tokens[self.next - 1]
    }
}

fn is_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '$'
}

/// Call `emit(from, to, text)` for every token: each run of word characters joined by
/// `.`, `/`, `-` or `::` as a whole (when it has parts), then each word, then the parts of
/// each word split at `_` and camelCase boundaries.
pub(crate) fn split(text: &str, emit: &mut dyn FnMut(usize, usize, String)) {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < text.len() {
        let Some(c) = text[i..].chars().next() else { break };
        if !is_word(c) {
            i += c.len_utf8();
            continue;
        }
        // A compound: words joined by single separators.
        let start = i;
        let mut end = i;
        let mut words: Vec<(usize, usize)> = Vec::new();
        loop {
            let ws = end;
            let mut we = end;
            for ch in text[end..].chars() {
                if is_word(ch) {
                    we += ch.len_utf8();
                } else {
                    break;
                }
            }
            words.push((ws, we));
            end = we;
            let sep_len = if text[end..].starts_with("::") {
                2
            } else if end < bytes.len() && matches!(bytes[end], b'.' | b'/' | b'-') {
                1
            } else {
                0
            };
            let after = end + sep_len;
            if sep_len > 0 && text[after..].chars().next().is_some_and(is_word) {
                end = after;
            } else {
                break;
            }
        }
        if words.len() > 1 {
            emit(start, end, text[start..end].to_lowercase());
        }
        for (ws, we) in words {
            let word = &text[ws..we];
            emit(ws, we, word.to_lowercase());
            let parts = word_parts(word);
            if parts.len() > 1 {
                for (ps, pe) in parts {
                    emit(ws + ps, ws + pe, word[ps..pe].to_lowercase());
                }
            }
        }
        i = end.max(i + 1);
    }
}

/// `get_user_name` -> get, user, name; `getUserName` -> get, User, Name;
/// `HTTPServer` -> HTTP, Server; `parse2json` stays whole.
fn word_parts(word: &str) -> Vec<(usize, usize)> {
    let mut parts = Vec::new();
    let chars: Vec<(usize, char)> = word.char_indices().collect();
    let mut start: Option<usize> = None;
    for (k, &(i, c)) in chars.iter().enumerate() {
        if c == '_' || c == '$' {
            if let Some(s) = start.take() {
                parts.push((s, i));
            }
            continue;
        }
        let boundary = match (k.checked_sub(1).map(|p| chars[p].1), chars.get(k + 1).map(|n| n.1)) {
            (Some(p), _) if p.is_lowercase() && c.is_uppercase() => true,
            (Some(p), Some(n)) if p.is_uppercase() && c.is_uppercase() && n.is_lowercase() => true,
            _ => false,
        };
        if boundary {
            if let Some(s) = start.take() {
                parts.push((s, i));
            }
        }
        if start.is_none() {
            start = Some(i);
        }
    }
    if let Some(s) = start {
        parts.push((s, word.len()));
    }
    parts
}

/// The distinct lowercased tokens of a query, longest first (for snippet lines).
/// Snippet terms: the query's words longer than two letters, longest first.
pub(crate) fn query_terms(words: &[String]) -> Vec<String> {
    let mut out: Vec<String> = words.iter().filter(|t| t.len() > 2).cloned().collect();
    out.sort_by(|a, b| b.len().cmp(&a.len()).then(a.cmp(b)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(s: &str) -> Vec<String> {
        let mut v = Vec::new();
        split(s, &mut |_, _, t| v.push(t));
        v
    }

    #[test]
    fn splits_identifiers_and_keeps_the_whole() {
        assert_eq!(toks("get_user_name"), ["get_user_name", "get", "user", "name"]);
        assert_eq!(toks("getUserName()"), ["getusername", "get", "user", "name"]);
        assert_eq!(toks("HTTPServer"), ["httpserver", "http", "server"]);
        assert_eq!(toks("os.path.join(a)"), ["os.path.join", "os", "path", "join", "a"]);
        assert_eq!(toks("src/app/models.py"), ["src/app/models.py", "src", "app", "models", "py"]);
        assert_eq!(toks("a. b"), ["a", "b"]);
        assert_eq!(toks("Ünïcode_wörd"), ["ünïcode_wörd", "ünïcode", "wörd"]);
    }
}
