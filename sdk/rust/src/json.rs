//! The JSON of the bridge (docs/wasm-program-abi.md, "JSON"): [`Value`], its writer and its
//! parser, and JavaScript's ways of writing numbers ([`number_string`], [`to_fixed`]).
//!
//! A handle is `{"$": h}` (results add `"type"`: `"tensor"`, `"object"` or `"function"`); a
//! number JSON cannot hold is `{"$num": "NaN"}` (`"Infinity"`, `"-Infinity"`).

use std::fmt::Write as _;

use crate::{Error, Kind, Object, Result, Tensor};

/// A value of the API as the bridge carries it: JSON's values, and handles.
///
/// Results of calls are `Value`s whose handles the program owns (dropped, they are released).
/// Arguments are `Value`s too: [`Value::from`] a `&Tensor` or `&Object` names the handle
/// without owning it, so that passing a tensor to a call never gives it away.
#[derive(Debug)]
pub enum Value {
    /// JSON's `null`, and JavaScript's `undefined` in results.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A number: NaN and the infinities too.
    Number(f64),
    /// A string.
    String(String),
    /// An array.
    Array(Vec<Value>),
    /// A plain object (options, a state dict, a memory report): its keys in order.
    Dict(Vec<(String, Value)>),
    /// A tensor's handle.
    Tensor(Tensor),
    /// Another value's handle: a module, an optimizer, a function.
    Object(Object),
}

impl Value {
    /// The number, if this is one.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Number(x) => Some(*x),
            _ => None,
        }
    }

    /// The boolean, if this is one.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// The elements, if this is an array.
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }

    /// The tensor, if this is a tensor's handle.
    pub fn as_tensor(&self) -> Option<&Tensor> {
        match self {
            Value::Tensor(t) => Some(t),
            _ => None,
        }
    }

    /// The object, if this is another value's handle.
    pub fn as_object(&self) -> Option<&Object> {
        match self {
            Value::Object(o) => Some(o),
            _ => None,
        }
    }

    /// Member `key` of a plain object (`None` for a missing key or a value that is not one).
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Dict(d) => d.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// Whether this is `null` (or `undefined`).
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    /// The number, or an error naming what this is instead.
    pub fn to_f64(&self) -> Result<f64> {
        self.as_f64().ok_or_else(|| Error::new(format!("zeroeng: {} is not a number", self.describe())))
    }

    /// The tensor, or an error naming what this is instead (whose handles are released).
    pub fn into_tensor(self) -> Result<Tensor> {
        match self {
            Value::Tensor(t) => Ok(t),
            v => Err(Error::new(format!("zeroeng: {} is not a tensor", v.describe()))),
        }
    }

    /// The object, or an error naming what this is instead.
    pub fn into_object(self) -> Result<Object> {
        match self {
            Value::Object(o) => Ok(o),
            v => Err(Error::new(format!("zeroeng: {} is not an object", v.describe()))),
        }
    }

    /// The elements, or an error naming what this is instead.
    pub fn into_array(self) -> Result<Vec<Value>> {
        match self {
            Value::Array(a) => Ok(a),
            v => Err(Error::new(format!("zeroeng: {} is not an array", v.describe()))),
        }
    }

    /// The tensors of an array of tensors (`parameters()`).
    pub fn into_tensors(self) -> Result<Vec<Tensor>> {
        self.into_array()?.into_iter().map(Value::into_tensor).collect()
    }

    /// The members of a plain object, or an error naming what this is instead.
    pub fn into_dict(self) -> Result<Vec<(String, Value)>> {
        match self {
            Value::Dict(d) => Ok(d),
            v => Err(Error::new(format!("zeroeng: {} is not a plain object", v.describe()))),
        }
    }

    /// A short description for messages: the JSON of small values, the kind of others.
    pub fn describe(&self) -> String {
        match self {
            Value::Array(a) => format!("an array of {}", a.len()),
            Value::Dict(_) => "a plain object".to_string(),
            Value::Tensor(_) => "a tensor".to_string(),
            Value::Object(o) => format!("{} {}", if o.kind() == Kind::Object { "an" } else { "a" }, o.kind().name()),
            v => {
                let s = v.to_json();
                match s.char_indices().nth(40) {
                    Some((i, _)) => format!("{}...", &s[..i]),
                    None => s,
                }
            }
        }
    }

    /// The value as the bridge's JSON: handles as `{"$":h}`, NaN and the infinities as
    /// `{"$num":...}`, other numbers as JavaScript writes them (so that, without those, this is
    /// what `JSON.stringify` writes).
    pub fn to_json(&self) -> String {
        let mut s = String::new();
        self.write_json(&mut s);
        s
    }

    /// The value as JavaScript's `JSON.stringify` writes data: [`to_json`](Value::to_json)'s
    /// text but for NaN and the infinities, which are `null`, and negative zero, `0` (for
    /// printing a result as a script prints it; handles are still `{"$":h}`).
    pub fn stringify(&self) -> String {
        let mut s = String::new();
        self.write(&mut s, true);
        s
    }

    /// Appends [`to_json`](Value::to_json)'s text to `out`.
    pub fn write_json(&self, out: &mut String) {
        self.write(out, false)
    }

    fn write(&self, out: &mut String, js: bool) {
        match self {
            Value::Null => out.push_str("null"),
            Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Value::Number(x) if js && !x.is_finite() => out.push_str("null"),
            Value::Number(x) if js => out.push_str(&number_string(*x)),
            Value::Number(x) => write_number(out, *x),
            Value::String(s) => write_string(out, s),
            Value::Array(a) => {
                out.push('[');
                for (i, v) in a.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    v.write(out, js);
                }
                out.push(']');
            }
            Value::Dict(d) => {
                out.push('{');
                for (i, (k, v)) in d.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write_string(out, k);
                    out.push(':');
                    v.write(out, js);
                }
                out.push('}');
            }
            Value::Tensor(t) => {
                let _ = write!(out, "{{\"$\":{}}}", t.raw());
            }
            Value::Object(o) => {
                let _ = write!(out, "{{\"$\":{}}}", o.raw());
            }
        }
    }

    /// Parses JSON text in the bridge's form. Its handles (`{"$":h}`) are named, not owned:
    /// dropping them releases nothing (results of calls, which own theirs, are parsed by the
    /// SDK itself).
    pub fn from_json(text: &str) -> Result<Value> {
        parse(text.as_bytes(), false)
    }

    /// A copy whose handles name this value's without owning them (dropping it releases
    /// nothing): how a result is passed on as an argument, `args![&params]`.
    pub fn borrowed(&self) -> Value {
        match self {
            Value::Null => Value::Null,
            Value::Bool(b) => Value::Bool(*b),
            Value::Number(x) => Value::Number(*x),
            Value::String(s) => Value::String(s.clone()),
            Value::Array(a) => Value::Array(a.iter().map(Value::borrowed).collect()),
            Value::Dict(d) => Value::Dict(d.iter().map(|(k, v)| (k.clone(), v.borrowed())).collect()),
            Value::Tensor(t) => Value::Tensor(t.borrowed()),
            Value::Object(o) => Value::Object(o.borrowed()),
        }
    }

    /// Gives up the value's handles without releasing them: the host keeps each until it is
    /// released by its number or the program ends (what a callback's return value needs).
    pub fn forget(self) {
        match self {
            Value::Tensor(t) => {
                t.into_raw();
            }
            Value::Object(o) => {
                o.into_raw();
            }
            Value::Array(a) => a.into_iter().for_each(Value::forget),
            Value::Dict(d) => d.into_iter().for_each(|(_, v)| v.forget()),
            _ => {}
        }
    }

    /// Calls `f` with the handle of every tensor in the value.
    pub(crate) fn each_tensor(&self, f: &mut dyn FnMut(u32)) {
        match self {
            Value::Tensor(t) => f(t.raw()),
            Value::Array(a) => a.iter().for_each(|v| v.each_tensor(f)),
            Value::Dict(d) => d.iter().for_each(|(_, v)| v.each_tensor(f)),
            _ => {}
        }
    }
}

macro_rules! from_number {
    ($($t:ty),*) => {$(
        impl From<$t> for Value {
            fn from(x: $t) -> Value {
                Value::Number(x as f64)
            }
        }
    )*};
}
from_number!(f64, f32, i8, i16, i32, i64, u8, u16, u32, u64, isize, usize);

impl From<bool> for Value {
    fn from(b: bool) -> Value {
        Value::Bool(b)
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Value {
        Value::String(s.to_string())
    }
}

impl From<String> for Value {
    fn from(s: String) -> Value {
        Value::String(s)
    }
}

impl From<&String> for Value {
    fn from(s: &String) -> Value {
        Value::String(s.clone())
    }
}

impl From<&Tensor> for Value {
    /// Names the tensor's handle without owning it.
    fn from(t: &Tensor) -> Value {
        Value::Tensor(t.borrowed())
    }
}

impl From<&Object> for Value {
    /// Names the object's handle without owning it.
    fn from(o: &Object) -> Value {
        Value::Object(o.borrowed())
    }
}

impl From<Tensor> for Value {
    /// Takes the handle over: the value owns it.
    fn from(t: Tensor) -> Value {
        Value::Tensor(t)
    }
}

impl From<Object> for Value {
    /// Takes the handle over: the value owns it.
    fn from(o: Object) -> Value {
        Value::Object(o)
    }
}

impl From<&Value> for Value {
    /// [`Value::borrowed`]: the same value, naming its handles without owning them.
    fn from(v: &Value) -> Value {
        v.borrowed()
    }
}

impl From<Vec<Value>> for Value {
    fn from(a: Vec<Value>) -> Value {
        Value::Array(a)
    }
}

impl From<&[Tensor]> for Value {
    /// An array naming the tensors' handles.
    fn from(ts: &[Tensor]) -> Value {
        Value::Array(ts.iter().map(Value::from).collect())
    }
}

impl From<&Vec<Tensor>> for Value {
    /// An array naming the tensors' handles.
    fn from(ts: &Vec<Tensor>) -> Value {
        Value::from(ts.as_slice())
    }
}

impl<T: Into<Value>> From<Option<T>> for Value {
    /// `None` is `null`.
    fn from(v: Option<T>) -> Value {
        v.map_or(Value::Null, Into::into)
    }
}

/// Builds a plain object, its keys in order: `dict! { "lr" => 1e-3, "stage" => 2 }`. Each
/// value is anything [`Value::from`] takes (`&tensor` names a handle).
#[macro_export]
macro_rules! dict {
    ($($k:expr => $v:expr),* $(,)?) => {
        $crate::Value::Dict(::std::vec![$((::std::string::String::from($k), $crate::Value::from($v))),*])
    };
}

/// Builds the arguments of a JSON call, an array of [`Value`]s: `args![&x, 784, "mean"]`
/// (`&tensor` names a handle; pass `&args![...]` where a call takes `&[Value]`).
#[macro_export]
macro_rules! args {
    ($($v:expr),* $(,)?) => {
        [$($crate::Value::from($v)),*]
    };
}

/// Writes x as the bridge does: as JavaScript writes it, but NaN and the infinities as
/// `{"$num":...}` and negative zero as `-0`.
fn write_number(out: &mut String, x: f64) {
    if x.is_nan() {
        out.push_str("{\"$num\":\"NaN\"}");
    } else if x.is_infinite() {
        out.push_str(if x > 0.0 { "{\"$num\":\"Infinity\"}" } else { "{\"$num\":\"-Infinity\"}" });
    } else if x == 0.0 && x.is_sign_negative() {
        out.push_str("-0");
    } else {
        out.push_str(&number_string(x));
    }
}

fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Writes x as JavaScript's `String(x)` does: the shortest decimal that reads back as x,
/// positional from 1e-7 to 1e21 (`"0.001"`, `"784"`, `"-0.5"`), exponential outside
/// (`"1e+21"`, `"1.5e-7"`); `"NaN"`, `"Infinity"`, `"-Infinity"`; negative zero is `"0"`.
pub fn number_string(x: f64) -> String {
    if x.is_nan() {
        return "NaN".to_string();
    }
    if x.is_infinite() {
        return if x > 0.0 { "Infinity" } else { "-Infinity" }.to_string();
    }
    if x == 0.0 {
        return "0".to_string();
    }
    // Rust's {:e} writes the shortest digits that read back: "1.5e-7", "7.84e2". Of two
    // such decimals as short, JavaScript writes the one closer to x, on a tie the even one:
    // x rounded to as many digits, which Rust's exact formatting rounds half to even, when
    // that reads back too (Rust's shortest may be the other).
    let mut sci = format!("{:e}", x.abs());
    let k = sci.split('e').next().map_or(0, |m| m.chars().filter(char::is_ascii_digit).count());
    let rounded = format!("{:.*e}", k.max(1) - 1, x.abs());
    if rounded != sci && rounded.parse::<f64>().ok() == Some(x.abs()) {
        sci = rounded;
    }
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let k = digits.len() as i32;
    // x = 0.d1d2...dk × 10^n
    let n = exp.parse::<i32>().unwrap_or(0) + 1;
    let mut s = String::new();
    if x < 0.0 {
        s.push('-');
    }
    if k <= n && n <= 21 {
        s.push_str(&digits);
        s.extend(std::iter::repeat('0').take((n - k) as usize));
    } else if 0 < n && n <= 21 {
        s.push_str(&digits[..n as usize]);
        s.push('.');
        s.push_str(&digits[n as usize..]);
    } else if -6 < n && n <= 0 {
        s.push_str("0.");
        s.extend(std::iter::repeat('0').take((-n) as usize));
        s.push_str(&digits);
    } else {
        s.push_str(&digits[..1]);
        if k > 1 {
            s.push('.');
            s.push_str(&digits[1..]);
        }
        let e = n - 1;
        let _ = write!(s, "e{}{}", if e > 0 { "+" } else { "-" }, e.abs());
    }
    s
}

/// Writes x as JavaScript's `x.toFixed(digits)` does: rounded to `digits` decimals, half
/// away from zero (Rust's formatting rounds a tie to even); `String(x)` from 1e21 on.
pub fn to_fixed(x: f64, digits: usize) -> String {
    if !x.is_finite() || x.abs() >= 1e21 {
        return number_string(x);
    }
    // The exact decimal expansion (a double's has at most 1074 decimals), rounded by hand.
    let exact = format!("{:.1074}", x.abs());
    let (int, frac) = exact.split_once('.').unwrap_or((&exact, ""));
    let mut d: Vec<u8> = int.bytes().chain(frac.bytes().take(digits)).collect();
    d.extend(std::iter::repeat(b'0').take(int.len() + digits - d.len()));
    if frac.as_bytes().get(digits).map_or(false, |&c| c >= b'5') {
        let mut i = d.len();
        loop {
            if i == 0 {
                d.insert(0, b'1');
                break;
            }
            i -= 1;
            if d[i] == b'9' {
                d[i] = b'0';
            } else {
                d[i] += 1;
                break;
            }
        }
    }
    let split = d.len() - digits;
    let mut s = String::with_capacity(d.len() + 2);
    if x < 0.0 {
        s.push('-');
    }
    s.push_str(std::str::from_utf8(&d[..split]).unwrap_or("0"));
    if digits > 0 {
        s.push('.');
        s.push_str(std::str::from_utf8(&d[split..]).unwrap_or(""));
    }
    s
}

/// Parses the bridge's JSON; `owned` says whether the handles in it are the program's to
/// release (a result's) or only named (a callback's arguments, text of the program's own).
pub(crate) fn parse(b: &[u8], owned: bool) -> Result<Value> {
    let mut p = Parser { b, i: 0, owned };
    p.space();
    let v = p.value(0)?;
    p.space();
    if p.i != b.len() {
        return Err(p.error("unexpected text after the value"));
    }
    Ok(v)
}

const MAX_DEPTH: usize = 128;

struct Parser<'a> {
    b: &'a [u8],
    i: usize,
    owned: bool,
}

impl<'a> Parser<'a> {
    fn error(&self, what: &str) -> Error {
        let end = (self.i + 20).min(self.b.len());
        Error::new(format!(
            "zeroeng: JSON at byte {}: {} (near {:?})",
            self.i,
            what,
            String::from_utf8_lossy(&self.b[self.i.min(end)..end])
        ))
    }

    fn space(&mut self) {
        while self.i < self.b.len() && matches!(self.b[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }

    fn literal(&mut self, word: &str, v: Value) -> Result<Value> {
        if self.b[self.i..].starts_with(word.as_bytes()) {
            self.i += word.len();
            Ok(v)
        } else {
            Err(self.error("unexpected character"))
        }
    }

    fn value(&mut self, depth: usize) -> Result<Value> {
        if depth > MAX_DEPTH {
            return Err(self.error("nested too deeply"));
        }
        match self.b.get(self.i) {
            None => Err(self.error("unexpected end")),
            Some(b'{') => self.object(depth),
            Some(b'[') => {
                self.i += 1;
                let mut a = Vec::new();
                self.space();
                if self.b.get(self.i) == Some(&b']') {
                    self.i += 1;
                    return Ok(Value::Array(a));
                }
                loop {
                    self.space();
                    a.push(self.value(depth + 1)?);
                    self.space();
                    match self.b.get(self.i) {
                        Some(b',') => self.i += 1,
                        Some(b']') => {
                            self.i += 1;
                            return Ok(Value::Array(a));
                        }
                        _ => return Err(self.error("want , or ] in an array")),
                    }
                }
            }
            Some(b'"') => Ok(Value::String(self.string()?)),
            Some(b't') => self.literal("true", Value::Bool(true)),
            Some(b'f') => self.literal("false", Value::Bool(false)),
            Some(b'n') => self.literal("null", Value::Null),
            Some(c) if *c == b'-' || c.is_ascii_digit() => {
                let start = self.i;
                while self.i < self.b.len() && matches!(self.b[self.i], b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E') {
                    self.i += 1;
                }
                let text = std::str::from_utf8(&self.b[start..self.i]).unwrap_or("");
                match text.parse::<f64>() {
                    Ok(x) => Ok(Value::Number(x)),
                    Err(_) => {
                        self.i = start;
                        Err(self.error("bad number"))
                    }
                }
            }
            Some(_) => Err(self.error("unexpected character")),
        }
    }

    fn object(&mut self, depth: usize) -> Result<Value> {
        self.i += 1;
        let mut d: Vec<(String, Value)> = Vec::new();
        self.space();
        if self.b.get(self.i) == Some(&b'}') {
            self.i += 1;
            return Ok(Value::Dict(d));
        }
        loop {
            self.space();
            if self.b.get(self.i) != Some(&b'"') {
                return Err(self.error("want a key in an object"));
            }
            let k = self.string()?;
            self.space();
            if self.b.get(self.i) != Some(&b':') {
                return Err(self.error("want : after a key"));
            }
            self.i += 1;
            self.space();
            let v = self.value(depth + 1)?;
            d.push((k, v));
            self.space();
            match self.b.get(self.i) {
                Some(b',') => self.i += 1,
                Some(b'}') => {
                    self.i += 1;
                    break;
                }
                _ => return Err(self.error("want , or } in an object")),
            }
        }
        // {"$": h} or {"$": h, "type": kind}: a handle.
        let handle = match d.as_slice() {
            [(k, Value::Number(h))] if k == "$" => Some((*h, "")),
            [(k, Value::Number(h)), (t, Value::String(kind))] if k == "$" && t == "type" => Some((*h, kind.as_str())),
            _ => None,
        };
        if let Some((h, kind)) = handle {
            if h < 1.0 || h > u32::MAX as f64 || h != h.trunc() {
                return Err(self.error("a handle that is not a handle number"));
            }
            let h = h as u32;
            return Ok(match kind {
                "tensor" => Value::Tensor(Tensor::with(h, self.owned)),
                "function" => Value::Object(Object::with(h, Kind::Function, self.owned)),
                "object" => Value::Object(Object::with(h, Kind::Object, self.owned)),
                // A handle the program wrote itself ({"$": h}) says no kind: a tensor's is
                // the common case, and a kind only tells the SDK which methods to offer.
                _ => Value::Tensor(Tensor::with(h, self.owned)),
            });
        }
        if let [(k, Value::String(s))] = d.as_slice() {
            if k == "$num" {
                return match s.as_str() {
                    "NaN" => Ok(Value::Number(f64::NAN)),
                    "Infinity" => Ok(Value::Number(f64::INFINITY)),
                    "-Infinity" => Ok(Value::Number(f64::NEG_INFINITY)),
                    _ => Err(self.error("{\"$num\": ...} wants \"NaN\", \"Infinity\" or \"-Infinity\"")),
                };
            }
        }
        Ok(Value::Dict(d))
    }

    fn hex4(&mut self) -> Result<u32> {
        let h = self.b.get(self.i..self.i + 4).and_then(|h| std::str::from_utf8(h).ok()).and_then(|h| u32::from_str_radix(h, 16).ok());
        match h {
            Some(h) => {
                self.i += 4;
                Ok(h)
            }
            None => Err(self.error("bad \\u escape")),
        }
    }

    fn string(&mut self) -> Result<String> {
        self.i += 1;
        let mut s: Vec<u8> = Vec::new();
        loop {
            let c = match self.b.get(self.i) {
                None => return Err(self.error("unterminated string")),
                Some(c) => *c,
            };
            self.i += 1;
            match c {
                b'"' => break,
                b'\\' => {
                    let e = match self.b.get(self.i) {
                        None => return Err(self.error("unterminated string")),
                        Some(e) => *e,
                    };
                    self.i += 1;
                    let ch = match e {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'n' => '\n',
                        b't' => '\t',
                        b'r' => '\r',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'u' => {
                            let hi = self.hex4()?;
                            let code = if (0xd800..0xdc00).contains(&hi) && self.b[self.i..].starts_with(b"\\u") {
                                let save = self.i;
                                self.i += 2;
                                let lo = self.hex4()?;
                                if (0xdc00..0xe000).contains(&lo) {
                                    0x10000 + ((hi - 0xd800) << 10) + (lo - 0xdc00)
                                } else {
                                    self.i = save;
                                    hi
                                }
                            } else {
                                hi
                            };
                            char::from_u32(code).unwrap_or('\u{fffd}')
                        }
                        _ => return Err(self.error("bad escape")),
                    };
                    let mut buf = [0u8; 4];
                    s.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                }
                c if c < 0x20 => return Err(self.error("control character in a string")),
                c => s.push(c),
            }
        }
        Ok(String::from_utf8(s).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_as_javascript_writes_them() {
        for (x, want) in [
            (0.0, "0"),
            (-0.0, "0"),
            (784.0, "784"),
            (-0.5, "-0.5"),
            (0.001, "0.001"),
            (1e-3, "0.001"),
            (1e-7, "1e-7"),
            (1.5e-7, "1.5e-7"),
            (1.234e-6, "0.000001234"),
            (0.1 + 0.2, "0.30000000000000004"),
            (1e21, "1e+21"),
            (1e20, "100000000000000000000"),
            (123456789012345680000.0, "123456789012345680000"),
            (2.5e25, "2.5e+25"),
            (f64::NAN, "NaN"),
            (f64::NEG_INFINITY, "-Infinity"),
            (0.02 / (4f64).sqrt(), "0.01"),
            (5e-324, "5e-324"),
            (f64::MAX, "1.7976931348623157e+308"),
            (1172665156708789.2, "1172665156708789.2"), // Rust's shortest is ...789.3, as close
            (1263972057492.7812, "1263972057492.7812"),
        ] {
            assert_eq!(number_string(x), want, "{:e}", x);
        }
    }

    #[test]
    fn to_fixed_rounds_ties_away_from_zero() {
        for (x, d, want) in [
            (0.5, 0, "1"),
            (1.5, 0, "2"),
            (2.5, 0, "3"),
            (-2.5, 0, "-3"),
            (0.125, 2, "0.13"),
            (0.375, 2, "0.38"),
            (1.005, 2, "1.00"), // 1.005 is below the tie in binary
            (0.82355, 4, "0.8236"), // 0.82355 is above the tie in binary
            (0.00005, 4, "0.0001"),
            (123.456, 1, "123.5"),
            (0.8236, 4, "0.8236"),
            (-0.0, 4, "0.0000"),
            (-0.00001, 4, "-0.0000"),
            (1.25, 1, "1.3"),
            (1e21, 2, "1e+21"),
            (13660339603484.04, 6, "13660339603484.039063"), // a tie at 7 decimals, an ulp of 2^-9
            (569439600148087.2, 1, "569439600148087.3"),
            (9.995, 2, "9.99"),
            (9.9999, 2, "10.00"),
            (99.5, 0, "100"),
        ] {
            assert_eq!(to_fixed(x, d), want, "{}.toFixed({})", x, d);
        }
    }

    #[test]
    fn round_trip() {
        let text = r#"[null,true,false,-1.5e-8,"a\"b\\c\n\u00e9\ud83d\ude00",{"k":[1,2],"$num":3},{"$num":"NaN"},{"$":7},{"$":8,"type":"object"},{"$":9,"type":"function"},{}]"#;
        let v = parse(text.as_bytes(), false).unwrap();
        let a = v.as_array().unwrap();
        assert!(a[0].is_null());
        assert_eq!(a[1].as_bool(), Some(true));
        assert_eq!(a[3].as_f64(), Some(-1.5e-8));
        assert_eq!(a[4].as_str(), Some("a\"b\\c\n\u{e9}\u{1f600}"));
        assert_eq!(a[5].get("$num").and_then(Value::as_f64), Some(3.0));
        assert!(a[6].as_f64().unwrap().is_nan());
        assert_eq!(a[7].as_tensor().map(Tensor::raw), Some(7));
        assert_eq!(a[8].as_object().map(|o| (o.raw(), o.kind())), Some((8, Kind::Object)));
        assert_eq!(a[9].as_object().map(|o| o.kind()), Some(Kind::Function));
        assert_eq!(
            v.to_json(),
            r#"[null,true,false,-1.5e-8,"a\"b\\c\né😀",{"k":[1,2],"$num":3},{"$num":"NaN"},{"$":7},{"$":8},{"$":9},{}]"#
        );
        let d = dict! { "lr" => 1e-3, "betas" => vec![Value::from(0.9), Value::from(0.95)], "x" => Option::<f64>::None, "inf" => f64::INFINITY, "neg" => -0.0 };
        assert_eq!(d.to_json(), r#"{"lr":0.001,"betas":[0.9,0.95],"x":null,"inf":{"$num":"Infinity"},"neg":-0}"#);
        assert_eq!(Value::from("\u{1}").to_json(), "\"\\u0001\"");
        let r = dict! { "loss" => f64::NAN, "t" => f64::INFINITY, "z" => -0.0, "a" => vec![Value::from(1e21)] };
        assert_eq!(r.stringify(), r#"{"loss":null,"t":null,"z":0,"a":[1e+21]}"#);
    }

    #[test]
    fn errors() {
        for bad in ["", "[1,", "{\"a\" 1}", "[1 2]", "\"abc", "tru", "1 2", "{\"$\":0}", "{\"$num\":\"nan\"}", "\"\\x\"", "-"] {
            assert!(parse(bad.as_bytes(), false).is_err(), "{:?} parsed", bad);
        }
        let deep = "[".repeat(200) + &"]".repeat(200);
        assert!(parse(deep.as_bytes(), false).is_err());
    }
}
