//! Tokens of the policy language, each with the line and column where it starts.

use super::{ErrorKind, PolicyError};

/// A 1-based source position.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Pos {
    /// Line, from 1.
    pub line: u32,
    /// Column in characters, from 1.
    pub col: u32,
}

/// Token kinds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tok {
    /// A run of letters, digits, `_`, `.` and `:`: keywords, names, numbers, addresses.
    Word(String),
    LBrace,
    RBrace,
    LParen,
    RParen,
    LBracket,
    RBracket,
    Comma,
    Eq,
    Amp,
    Pipe,
    Bang,
    Slash,
    Semi,
    Eof,
}

impl Tok {
    /// How the token reads in an error message.
    pub fn describe(&self) -> String {
        match self {
            Tok::Word(w) => format!("`{w}`"),
            Tok::LBrace => "`{`".into(),
            Tok::RBrace => "`}`".into(),
            Tok::LParen => "`(`".into(),
            Tok::RParen => "`)`".into(),
            Tok::LBracket => "`[`".into(),
            Tok::RBracket => "`]`".into(),
            Tok::Comma => "`,`".into(),
            Tok::Eq => "`=`".into(),
            Tok::Amp => "`&`".into(),
            Tok::Pipe => "`|`".into(),
            Tok::Bang => "`!`".into(),
            Tok::Slash => "`/`".into(),
            Tok::Semi => "`;`".into(),
            Tok::Eof => "end of file".into(),
        }
    }
}

fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == ':'
}

/// Splits `src` into tokens; `#` starts a comment that runs to the end of the line.
pub fn lex(src: &str) -> Result<Vec<(Tok, Pos)>, PolicyError> {
    let mut out = Vec::new();
    let mut chars = src.chars().peekable();
    let (mut line, mut col) = (1u32, 1u32);
    while let Some(&c) = chars.peek() {
        let pos = Pos { line, col };
        if c == '\n' {
            chars.next();
            line += 1;
            col = 1;
            continue;
        }
        if c.is_whitespace() {
            chars.next();
            col += 1;
            continue;
        }
        if c == '#' {
            while let Some(&c) = chars.peek() {
                if c == '\n' {
                    break;
                }
                chars.next();
            }
            continue;
        }
        if is_word_char(c) {
            let mut word = String::new();
            while let Some(&c) = chars.peek() {
                if !is_word_char(c) {
                    break;
                }
                word.push(c);
                chars.next();
                col += 1;
            }
            out.push((Tok::Word(word), pos));
            continue;
        }
        let tok = match c {
            '{' => Tok::LBrace,
            '}' => Tok::RBrace,
            '(' => Tok::LParen,
            ')' => Tok::RParen,
            '[' => Tok::LBracket,
            ']' => Tok::RBracket,
            ',' => Tok::Comma,
            '=' => Tok::Eq,
            '&' => Tok::Amp,
            '|' => Tok::Pipe,
            '!' => Tok::Bang,
            '/' => Tok::Slash,
            ';' => Tok::Semi,
            other => {
                return Err(PolicyError {
                    line,
                    col,
                    kind: ErrorKind::UnexpectedChar(other),
                })
            }
        };
        chars.next();
        col += 1;
        out.push((tok, pos));
    }
    out.push((Tok::Eof, Pos { line, col }));
    Ok(out)
}
