//! The code-aware tokenizer: `getUserName`, `get_user_name`, `os.path.join` and
//! `src/app/models.py` each give the whole token, lowercased, and then its parts.

use tantivy::tokenizer::{Token, TokenStream, Tokenizer};

/// Holds the buffer its streams fill, so tokenizing a field value allocates nothing
/// once it has grown (tantivy keeps one tokenizer per field while it indexes).
#[derive(Clone, Default)]
pub struct CodeTokenizer {
    spans: Vec<(usize, usize)>,
    token: Token,
}

/// One value's tokens: their byte ranges in the value, and the one `Token` tantivy
/// reads, refilled on each `advance` with the next range's text lowercased.
pub struct CodeTokenStream<'a> {
    text: &'a str,
    /// (offset_from, offset_to) of each token in `text`, in order
    spans: &'a [(usize, usize)],
    next: usize,
    token: &'a mut Token,
}

impl Tokenizer for CodeTokenizer {
    type TokenStream<'a> = CodeTokenStream<'a>;
    fn token_stream<'a>(&'a mut self, text: &'a str) -> CodeTokenStream<'a> {
        let CodeTokenizer { spans, token } = self;
        spans.clear();
        split_ranges(text, &mut |from, to| spans.push((from, to)));
        token.reset();
        CodeTokenStream { text, spans, next: 0, token }
    }
}

impl TokenStream for CodeTokenStream<'_> {
    fn advance(&mut self) -> bool {
        let Some(&(from, to)) = self.spans.get(self.next) else { return false };
        self.token.offset_from = from;
        self.token.offset_to = to;
        self.token.position = self.next;
        self.token.position_length = 1;
        // Lowercased straight into the token's text (no buffer between).
        self.token.text.clear();
        push_lower(&self.text[from..to], &mut self.token.text);
        self.next += 1;
        true
    }
    fn token(&self) -> &Token {
        self.token
    }
    fn token_mut(&mut self) -> &mut Token {
        self.token
    }
}

fn is_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '$'
}

/// Which ASCII bytes are word characters: `[A-Za-z0-9_$]`, what [`is_word`] says of them.
const ASCII_WORD: [bool; 128] = {
    let mut t = [false; 128];
    let mut b = 0;
    while b < 128 {
        let c = b as u8;
        t[b] = c.is_ascii_alphanumeric() || c == b'_' || c == b'$';
        b += 1;
    }
    t
};

/// The byte length of the word character at byte `i` of `text` (a char boundary), or 0
/// when it is not one (or `i` is the end).
#[inline]
fn word_len_at(text: &str, i: usize) -> usize {
    match text.as_bytes().get(i) {
        None => 0,
        Some(&b) if b < 0x80 => usize::from(ASCII_WORD[b as usize]),
        Some(_) => match text[i..].chars().next() {
            Some(c) if is_word(c) => c.len_utf8(),
            _ => 0,
        },
    }
}

/// `s` lowercased, appended to `buf`: bytewise when ASCII, else as `str::to_lowercase`
/// does it (which knows a word-final sigma).
#[inline]
fn push_lower(s: &str, buf: &mut String) {
    if s.is_ascii() {
        let at = buf.len();
        buf.push_str(s);
        buf[at..].make_ascii_lowercase();
    } else {
        buf.push_str(&s.to_lowercase());
    }
}

/// Call `emit(from, to, text)` for every token: each run of word characters joined by
/// `.`, `/`, `-` or `::` as a whole (when it has parts), then each word, then the parts of
/// each word split at `_` and camelCase boundaries. `text` is lowercased, and borrowed
/// for the call only.
pub(crate) fn split(text: &str, emit: &mut dyn FnMut(usize, usize, &str)) {
    let mut buf = String::new();
    split_ranges(text, &mut |from, to| {
        buf.clear();
        push_lower(&text[from..to], &mut buf);
        emit(from, to, &buf);
    });
}

/// The byte ranges of [`split`]'s tokens, in its order (not lowercased).
fn split_ranges(text: &str, emit: &mut dyn FnMut(usize, usize)) {
    let bytes = text.as_bytes();
    // (start, end, plain): a plain word (ASCII lowercase letters and digits) has no parts.
    let mut words: Vec<(usize, usize, bool)> = Vec::new();
    let mut parts: Vec<(usize, usize)> = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        // Not a word character: the next one (ASCII in one step).
        if b < 0x80 {
            if !ASCII_WORD[b as usize] {
                i += 1;
                continue;
            }
        } else if word_len_at(text, i) == 0 {
            i += text[i..].chars().next().map_or(1, char::len_utf8);
            continue;
        }
        // A compound: words joined by single separators.
        let start = i;
        let mut end = i;
        words.clear();
        loop {
            let ws = end;
            let mut we = end;
            let mut plain = true;
            loop {
                let n = word_len_at(text, we);
                if n == 0 {
                    break;
                }
                // One byte: ASCII (a longer word character is not).
                plain &= n == 1 && matches!(bytes[we], b'a'..=b'z' | b'0'..=b'9');
                we += n;
            }
            words.push((ws, we, plain));
            end = we;
            let sep_len = match bytes.get(end) {
                Some(b':') if bytes.get(end + 1) == Some(&b':') => 2,
                Some(b'.' | b'/' | b'-') => 1,
                _ => 0,
            };
            if sep_len > 0 && word_len_at(text, end + sep_len) > 0 {
                end += sep_len;
            } else {
                break;
            }
        }
        if words.len() > 1 {
            emit(start, end);
        }
        for &(ws, we, plain) in &words {
            emit(ws, we);
            if plain {
                continue;
            }
            let word = &text[ws..we];
            word_parts(word, &mut parts);
            if parts.len() > 1 {
                for &(ps, pe) in &parts {
                    emit(ws + ps, ws + pe);
                }
            }
        }
        i = end.max(i + 1);
    }
}

/// `get_user_name` -> get, user, name; `getUserName` -> get, User, Name;
/// `HTTPServer` -> HTTP, Server; `parse2json` stays whole. Into `parts` (cleared first).
fn word_parts(word: &str, parts: &mut Vec<(usize, usize)>) {
    parts.clear();
    if word.is_ascii() {
        return ascii_word_parts(word.as_bytes(), parts);
    }
    let mut start: Option<usize> = None;
    // The previous character, this one (at byte `i`) and the next.
    let mut it = word.char_indices().peekable();
    let mut prev: Option<char> = None;
    while let Some((i, c)) = it.next() {
        let next = it.peek().map(|&(_, n)| n);
        if c == '_' || c == '$' {
            if let Some(s) = start.take() {
                parts.push((s, i));
            }
            prev = Some(c);
            continue;
        }
        let boundary = match (prev, next) {
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
        prev = Some(c);
    }
    if let Some(s) = start {
        parts.push((s, word.len()));
    }
}

/// [`word_parts`] of an ASCII word, bytewise (for ASCII, `char::is_lowercase` is
/// `a-z` and `is_uppercase` is `A-Z`).
fn ascii_word_parts(w: &[u8], parts: &mut Vec<(usize, usize)>) {
    let mut start: Option<usize> = None;
    for i in 0..w.len() {
        let c = w[i];
        if c == b'_' || c == b'$' {
            if let Some(s) = start.take() {
                parts.push((s, i));
            }
            continue;
        }
        let boundary = i > 0 && {
            let p = w[i - 1];
            (p.is_ascii_lowercase() && c.is_ascii_uppercase())
                || (p.is_ascii_uppercase()
                    && c.is_ascii_uppercase()
                    && w.get(i + 1).is_some_and(|n| n.is_ascii_lowercase()))
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
        parts.push((s, w.len()));
    }
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
        split(s, &mut |_, _, t| v.push(t.to_string()));
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

    /// The tokenizer as it was before its tokens stopped allocating one `String` each: the
    /// reference the new one must equal, token for token.
    mod reference {
        fn is_word(c: char) -> bool {
            c.is_alphanumeric() || c == '_' || c == '$'
        }

        /// Call `emit(from, to, text)` for every token: each run of word characters joined by
        /// `.`, `/`, `-` or `::` as a whole (when it has parts), then each word, then the parts of
        /// each word split at `_` and camelCase boundaries.
        pub(super) fn split(text: &str, emit: &mut dyn FnMut(usize, usize, String)) {
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
    }

    fn all_tokens(text: &str) -> Vec<(usize, usize, String)> {
        let mut v = Vec::new();
        split(text, &mut |a, b, t| v.push((a, b, t.to_string())));
        v
    }

    /// Every source file of this repository and its fixtures, and some hard cases: the
    /// tokens, offsets and positions equal the reference's.
    #[test]
    fn the_tokens_equal_the_reference_tokenizers_on_real_text() {
        let mut texts: Vec<String> = [
            "ΣΊΣΥΦΟΣ getΣigma ΌΣΟΣ.ΣΑ HTTPServer::new a::b::c x--y a..b $jq_$x İstanbul ǅemal",
            "ﬀoo ß ẞTRASSE camelCaseWORDSHere __init__ _ $ a.b/c-d::e f.",
            "",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        // `REPROAGENT_TOKENIZER_CORPUS=DIR` adds a tree (checked on Django, Guava and
        // TypeScript: benches/data).
        let extra = std::env::var_os("REPROAGENT_TOKENIZER_CORPUS").map(std::path::PathBuf::from);
        let dirs = ["src", "fixtures", "tests"].map(|d| root.join(d));
        for dir in dirs.iter().chain(extra.as_ref()) {
            for e in ignore::WalkBuilder::new(dir).build().flatten() {
                if let Ok(t) = std::fs::read_to_string(e.path()) {
                    texts.push(t);
                }
            }
        }
        assert!(texts.len() > 100, "found {} texts", texts.len());
        let mut tokenizer = CodeTokenizer::default();
        for t in &texts {
            let mut want = Vec::new();
            reference::split(t, &mut |a, b, s| want.push((a, b, s)));
            assert_eq!(all_tokens(t), want);
            // One tokenizer for every text: its buffers carry nothing from one to the next.
            let mut stream = tokenizer.token_stream(t);
            let mut n = 0;
            while stream.advance() {
                let tok = stream.token();
                assert_eq!(
                    (tok.offset_from, tok.offset_to, &tok.text, tok.position),
                    (want[n].0, want[n].1, &want[n].2, n)
                );
                n += 1;
            }
            assert_eq!(n, want.len());
        }
    }
}
