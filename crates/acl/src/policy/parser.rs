//! Recursive-descent parser. Values are resolved against their field while parsing, so an
//! error points at the exact token that is wrong.

use std::net::{Ipv4Addr, Ipv6Addr};

use super::lexer::{Pos, Tok};
use super::{suggest, Action, ErrorKind, Expr, PolicyDef, PolicyError, SourceFile};
use crate::field::{opcodes_by_name, CmType, Field};
use crate::set::ValueSet;

/// Deepest nesting of `(` and `!` accepted; the parser and normaliser recurse per level.
pub const MAX_NESTING: usize = 64;

pub(super) struct Parser {
    toks: Vec<(Tok, Pos)>,
    at: usize,
    depth: usize,
}

fn err(pos: Pos, kind: ErrorKind) -> PolicyError {
    PolicyError {
        line: pos.line,
        col: pos.col,
        kind,
    }
}

impl Parser {
    pub(super) fn new(toks: Vec<(Tok, Pos)>) -> Parser {
        Parser {
            toks,
            at: 0,
            depth: 0,
        }
    }

    fn peek(&self) -> &(Tok, Pos) {
        &self.toks[self.at.min(self.toks.len() - 1)]
    }

    fn next(&mut self) -> (Tok, Pos) {
        let t = self.peek().clone();
        if self.at < self.toks.len() - 1 {
            self.at += 1;
        }
        t
    }

    fn unexpected(&self, expected: &'static str) -> PolicyError {
        let (tok, pos) = self.peek();
        err(
            *pos,
            ErrorKind::Unexpected {
                found: tok.describe(),
                expected,
            },
        )
    }

    fn expect(&mut self, tok: Tok, expected: &'static str) -> Result<Pos, PolicyError> {
        if self.peek().0 == tok {
            Ok(self.next().1)
        } else {
            Err(self.unexpected(expected))
        }
    }

    fn is_word(&self, w: &str) -> bool {
        matches!(&self.peek().0, Tok::Word(x) if x == w)
    }

    fn word(&mut self, expected: &'static str) -> Result<(String, Pos), PolicyError> {
        match self.peek().clone() {
            (Tok::Word(w), pos) => {
                self.next();
                Ok((w, pos))
            }
            _ => Err(self.unexpected(expected)),
        }
    }

    fn skip_semis(&mut self) {
        while self.peek().0 == Tok::Semi {
            self.next();
        }
    }

    pub(super) fn file(&mut self) -> Result<SourceFile, PolicyError> {
        let mut file = SourceFile::default();
        loop {
            self.skip_semis();
            let (tok, pos) = self.peek().clone();
            match tok {
                Tok::Eof => return Ok(file),
                Tok::Word(w) if w == "policy" => {
                    let def = self.policy()?;
                    if let Some(prev) = file.policies.iter().find(|p| p.name == def.name) {
                        return Err(err(
                            def.pos,
                            ErrorKind::DuplicatePolicy {
                                name: def.name,
                                first_line: prev.pos.line,
                            },
                        ));
                    }
                    file.policies.push(def);
                }
                Tok::Word(w) if w == "apply" => {
                    if file.apply.is_some() {
                        return Err(err(pos, ErrorKind::DuplicateApply));
                    }
                    self.next();
                    self.expect(Tok::LParen, "`(` after `apply`")?;
                    let mut names: Vec<(String, Pos)> = Vec::new();
                    if self.peek().0 != Tok::RParen {
                        loop {
                            let (name, npos) = self.word("a policy name")?;
                            if names.iter().any(|(n, _)| *n == name) {
                                return Err(err(npos, ErrorKind::AppliedTwice(name)));
                            }
                            names.push((name, npos));
                            if self.peek().0 == Tok::Comma {
                                self.next();
                            } else {
                                break;
                            }
                        }
                    }
                    self.expect(Tok::RParen, "`,` or `)` in the apply list")?;
                    file.apply = Some((names, pos));
                }
                Tok::Word(w) if w == "default" => {
                    if file.default.is_some() {
                        return Err(err(pos, ErrorKind::DuplicateDefault));
                    }
                    self.next();
                    file.default = Some(self.action()?);
                }
                _ => return Err(self.unexpected("`policy`, `apply` or `default`")),
            }
        }
    }

    fn action(&mut self) -> Result<Action, PolicyError> {
        let (w, pos) = self.word("`allow` or `deny`")?;
        match w.as_str() {
            "allow" => Ok(Action::Allow),
            "deny" => Ok(Action::Deny),
            _ => Err(err(
                pos,
                ErrorKind::Unexpected {
                    found: format!("`{w}`"),
                    expected: "`allow` or `deny`",
                },
            )),
        }
    }

    fn policy(&mut self) -> Result<PolicyDef, PolicyError> {
        let kw = self.next().1;
        let (name, pos) = self.word("a policy name")?;
        let _ = kw;
        self.expect(Tok::LBrace, "`{` to open the policy body")?;
        let mut predicate: Option<Expr> = None;
        let mut action: Option<Action> = None;
        loop {
            self.skip_semis();
            let (tok, ipos) = self.peek().clone();
            match tok {
                Tok::RBrace => {
                    self.next();
                    break;
                }
                Tok::Word(w) if w == "predicate" => {
                    if predicate.is_some() {
                        return Err(err(ipos, ErrorKind::DuplicateItem("predicate")));
                    }
                    self.next();
                    self.expect(Tok::Eq, "`=` after `predicate`")?;
                    predicate = Some(self.expr()?);
                }
                Tok::Word(w) if w == "action" => {
                    if action.is_some() {
                        return Err(err(ipos, ErrorKind::DuplicateItem("action")));
                    }
                    self.next();
                    self.expect(Tok::Eq, "`=` after `action`")?;
                    action = Some(self.action()?);
                }
                _ => {
                    return Err(self
                        .unexpected("`predicate = ...`, `action = ...` or `}` in the policy body"))
                }
            }
        }
        let predicate = predicate.ok_or_else(|| {
            err(
                pos,
                ErrorKind::MissingItem {
                    policy: name.clone(),
                    item: "predicate",
                },
            )
        })?;
        let action = action.ok_or_else(|| {
            err(
                pos,
                ErrorKind::MissingItem {
                    policy: name.clone(),
                    item: "action",
                },
            )
        })?;
        Ok(PolicyDef {
            name,
            pos,
            predicate,
            action,
        })
    }

    fn expr(&mut self) -> Result<Expr, PolicyError> {
        let mut terms = vec![self.term()?];
        while self.peek().0 == Tok::Pipe {
            self.next();
            terms.push(self.term()?);
        }
        Ok(if terms.len() == 1 {
            terms.pop().expect("one term")
        } else {
            Expr::Or(terms)
        })
    }

    fn term(&mut self) -> Result<Expr, PolicyError> {
        let mut factors = vec![self.factor()?];
        while self.peek().0 == Tok::Amp {
            self.next();
            factors.push(self.factor()?);
        }
        Ok(if factors.len() == 1 {
            factors.pop().expect("one factor")
        } else {
            Expr::And(factors)
        })
    }

    fn factor(&mut self) -> Result<Expr, PolicyError> {
        let (tok, pos) = self.peek().clone();
        if matches!(tok, Tok::Bang | Tok::LParen) {
            if self.depth >= MAX_NESTING {
                return Err(err(pos, ErrorKind::TooDeep(MAX_NESTING)));
            }
            self.depth += 1;
            let e = self.nested(tok);
            self.depth -= 1;
            return e;
        }
        self.simple(tok, pos)
    }

    fn nested(&mut self, tok: Tok) -> Result<Expr, PolicyError> {
        self.next();
        if tok == Tok::Bang {
            return Ok(Expr::Not(Box::new(self.factor()?)));
        }
        let e = self.expr()?;
        self.expect(Tok::RParen, "`)` to close the parenthesis")?;
        Ok(e)
    }

    fn simple(&mut self, tok: Tok, pos: Pos) -> Result<Expr, PolicyError> {
        match tok {
            Tok::Word(w) if w == "any" => {
                self.next();
                Ok(Expr::Any)
            }
            Tok::Word(w) if w == "match" => {
                self.next();
                self.expect(Tok::LParen, "`(` after `match`")?;
                let field = self.field()?;
                let set = if self.peek().0 == Tok::Eq {
                    self.next();
                    if self.is_word("any") {
                        self.next();
                        ValueSet::full(field)
                    } else {
                        ValueSet::from_ranges(self.value(field, true)?)
                    }
                } else if self.is_word("in") {
                    self.next();
                    self.membership(field)?
                } else {
                    return Err(self.unexpected("`=` or `in` after the field name"));
                };
                self.expect(Tok::RParen, "`)` to close `match(`")?;
                Ok(Expr::Match { field, set, pos })
            }
            _ => Err(self.unexpected("`match(...)`, `any`, `!` or `(`")),
        }
    }

    /// A field name, exactly as documented; a near miss is named in the error.
    fn field(&mut self) -> Result<Field, PolicyError> {
        let (name, pos) = self.word("a field name")?;
        Field::from_name(&name).ok_or_else(|| {
            let suggestion = suggest::nearest(&name, Field::ALL.map(Field::name));
            err(pos, ErrorKind::UnknownField { name, suggestion })
        })
    }

    /// What follows `match(field in`: a set `{v, ...}`, a range `[lo, hi]` (`hi` may be
    /// `inf`), or, for an address field, one prefix (`10.0.4.0/24`; a bare address is the
    /// prefix of full length).
    fn membership(&mut self, field: Field) -> Result<ValueSet, PolicyError> {
        match self.peek().clone() {
            (Tok::LBrace, _) => {
                self.next();
                let mut ranges = self.value(field, true)?;
                while self.peek().0 == Tok::Comma {
                    self.next();
                    ranges.extend(self.value(field, true)?);
                }
                self.expect(Tok::RBrace, "`,` or `}` in the value set")?;
                Ok(ValueSet::from_ranges(ranges))
            }
            (Tok::LBracket, bpos) => {
                self.next();
                let lo = self.value(field, false)?[0].0;
                self.expect(Tok::Comma, "`,` between the range bounds")?;
                let hi = if self.is_word("inf") {
                    self.next();
                    open_range_end(field, lo)
                } else {
                    self.value(field, false)?[0].1
                };
                self.expect(Tok::RBracket, "`]` to close the range")?;
                if lo > hi {
                    return Err(err(bpos, ErrorKind::EmptyRange { field }));
                }
                Ok(ValueSet::from_ranges(vec![(lo, hi)]))
            }
            (Tok::Word(w), wpos) if w == "any" => Err(err(wpos, ErrorKind::MisplacedAny { field })),
            (Tok::Word(_), _) if field.is_address() => {
                Ok(ValueSet::from_ranges(self.value(field, true)?))
            }
            _ => Err(self.unexpected(if field.is_address() {
                "`{`, `[` or a prefix after `in`"
            } else {
                "`{` or `[` after `in`"
            })),
        }
    }

    /// One value for `field` as the ranges it stands for (a name may stand for several).
    fn value(
        &mut self,
        field: Field,
        allow_prefix: bool,
    ) -> Result<Vec<(u128, u128)>, PolicyError> {
        let (w, pos) = self.word("a value")?;
        match w.as_str() {
            "any" => return Err(err(pos, ErrorKind::MisplacedAny { field })),
            "inf" => return Err(err(pos, ErrorKind::MisplacedInf { field })),
            _ => {}
        }
        let bad = |reason: String| {
            err(
                pos,
                ErrorKind::BadValue {
                    field,
                    value: w.clone(),
                    reason,
                },
            )
        };
        if field.is_address() {
            return self.address(field, allow_prefix, &w, pos);
        }
        let number = parse_number(&w);
        let v = match field {
            Field::Opcode => match number {
                Some(n) => n,
                None => {
                    let ops = opcodes_by_name(&w)
                        .ok_or_else(|| bad("not an opcode name, opcode group or number".into()))?;
                    return Ok(ops.into_iter().map(|o| (o as u128, o as u128)).collect());
                }
            },
            Field::CmType => match number {
                Some(n) => n,
                None => CmType::from_name(&w)
                    .ok_or_else(|| bad("not a CM message type name".into()))?
                    as u128,
            },
            Field::CmForged => match w.as_str() {
                "true" => 1,
                "false" => 0,
                _ => number.ok_or_else(|| bad("expected true or false".into()))?,
            },
            _ => number.ok_or_else(|| bad(number_problem(field, &w)))?,
        };
        if v > field.max() {
            return Err(bad(format!(
                "out of range: the maximum is {:#x}",
                field.max()
            )));
        }
        Ok(vec![(v, v)])
    }

    /// An address value `w` (already taken) and its prefix, if one follows: IPv4 as
    /// `::ffff:a.b.c.d`, IPv6 as written, and for the GID fields a plain integer as the GID's
    /// 128-bit big-endian value (`500` is `::1f4`).
    fn address(
        &mut self,
        field: Field,
        allow_prefix: bool,
        w: &str,
        pos: Pos,
    ) -> Result<Vec<(u128, u128)>, PolicyError> {
        let bad = |reason: String| {
            err(
                pos,
                ErrorKind::BadValue {
                    field,
                    value: w.to_owned(),
                    reason,
                },
            )
        };
        let is_gid = matches!(field, Field::SGid | Field::DGid);
        let (addr, bits) = if let Ok(v4) = w.parse::<Ipv4Addr>() {
            (u128::from(v4.to_ipv6_mapped()), 32u32)
        } else if let Ok(v6) = w.parse::<Ipv6Addr>() {
            (u128::from(v6), 128u32)
        } else if is_gid {
            let gid = parse_number(w).ok_or_else(|| {
                bad(if is_numeral(w) {
                    number_problem(field, w)
                } else {
                    "not a GID (IPv6 syntax, an IPv4 address or an integer)".into()
                })
            })?;
            if self.peek().0 == Tok::Slash {
                return Err(bad(format!(
                    "a prefix needs the GID in IPv6 syntax: write `{}/LEN`",
                    Ipv6Addr::from(gid)
                )));
            }
            return Ok(vec![(gid, gid)]);
        } else {
            return Err(bad("not an IPv4 or IPv6 address".into()));
        };
        if self.peek().0 != Tok::Slash {
            return Ok(vec![(addr, addr)]);
        }
        let spos = self.next().1;
        if !allow_prefix {
            return Err(err(spos, ErrorKind::PrefixInRange { field }));
        }
        let (len_word, lpos) = self.word("a prefix length")?;
        let len: u32 = len_word
            .parse()
            .ok()
            .filter(|l| *l <= bits)
            .ok_or_else(|| {
                err(
                    lpos,
                    ErrorKind::BadValue {
                        field,
                        value: len_word.clone(),
                        reason: format!("prefix length must be 0..={bits}"),
                    },
                )
            })?;
        let mapped_len = len + (128 - bits);
        let host = if mapped_len == 128 {
            0
        } else {
            u128::MAX >> mapped_len
        };
        if addr & host != 0 {
            let network = addr & !host;
            let network = if bits == 32 {
                Ipv4Addr::from(network as u32).to_string()
            } else {
                Ipv6Addr::from(network).to_string()
            };
            return Err(err(
                pos,
                ErrorKind::HostBitsSet {
                    field,
                    value: format!("{w}/{len}"),
                    len,
                    suggestion: format!("{network}/{len}"),
                },
            ));
        }
        Ok(vec![(addr, addr | host)])
    }
}

/// The value `inf` stands for in `[lo, inf]`: the field's largest value, except that a range
/// of addresses from an IPv4 address ends at `255.255.255.255`. IPv4 notation stays within
/// IPv4, as a prefix does: an `allow` of `[10.0.0.0, inf]` must not let every IPv6 address
/// above `::ffff:10.0.0.0` through.
fn open_range_end(field: Field, lo: u128) -> u128 {
    const IPV4_MAPPED_MAX: u128 = 0xffff_ffff_ffff;
    if field.is_address() && lo >> 32 == 0xffff {
        IPV4_MAPPED_MAX
    } else {
        field.max()
    }
}

/// Why `w` is not a number of `field`'s domain: too large even for 128 bits, or no number.
fn number_problem(field: Field, w: &str) -> String {
    if is_numeral(w) {
        format!("out of range: the maximum is {:#x}", field.max())
    } else {
        "not a number (decimal or 0x hexadecimal)".into()
    }
}

/// Whether `w` is written as a number (decimal or `0x` hexadecimal digits, `_` between),
/// whatever its size.
fn is_numeral(w: &str) -> bool {
    match w.strip_prefix("0x").or_else(|| w.strip_prefix("0X")) {
        Some(hex) => !hex.is_empty() && hex.chars().all(|c| c.is_ascii_hexdigit() || c == '_'),
        None => {
            w.starts_with(|c: char| c.is_ascii_digit())
                && w.chars().all(|c| c.is_ascii_digit() || c == '_')
        }
    }
}

fn parse_number(w: &str) -> Option<u128> {
    if let Some(hex) = w.strip_prefix("0x").or_else(|| w.strip_prefix("0X")) {
        u128::from_str_radix(&hex.replace('_', ""), 16).ok()
    } else if w.starts_with(|c: char| c.is_ascii_digit()) {
        w.replace('_', "").parse().ok()
    } else {
        None
    }
}
