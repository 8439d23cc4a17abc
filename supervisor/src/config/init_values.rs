//! Typed `init` values: what a TOML `init` array encodes to.
//!
//! Each item is a byte (`0` to `255`) or a one-key table naming a type: `{ u32 = 10 }`, `{ i16 = -3 }`,
//! `{ f64 = 0.5 }`, `{ bytes = "text" }` (or an array of bytes), `{ zeros = 8 }`. Numbers are
//! little-endian, each at a multiple of its size from the start, as in a C struct declaring the same fields
//! in the same order; there is no trailing padding. An integer may also be a string (`"{i}"` in a template,
//! or a `u64` beyond TOML's integer range).

use toml::Value;

/// A problem in an `init` value: where inside it (`[2].u32`, empty for the whole value) and what.
pub(super) type InitError = (String, String);

#[derive(Clone, Copy)]
enum Kind {
    Unsigned,
    Signed,
    Float,
}

/// The number types, with their size in bytes.
const NUMBERS: [(&str, usize, Kind); 10] = [
    ("u8", 1, Kind::Unsigned),
    ("u16", 2, Kind::Unsigned),
    ("u32", 4, Kind::Unsigned),
    ("u64", 8, Kind::Unsigned),
    ("i8", 1, Kind::Signed),
    ("i16", 2, Kind::Signed),
    ("i32", 4, Kind::Signed),
    ("i64", 8, Kind::Signed),
    ("f32", 4, Kind::Float),
    ("f64", 8, Kind::Float),
];

const TYPES: &str = "u8, u16, u32, u64, i8, i16, i32, i64, f32, f64, bytes, zeros";

/// Encodes an `init` value (see the module doc), or reports every bad item.
pub(super) fn encode(v: &Value) -> Result<Vec<u8>, Vec<InitError>> {
    let Value::Array(items) = v else {
        return Err(vec![(
            String::new(),
            format!("expected an array of bytes or typed values, found {}", super::type_name(v)),
        )]);
    };
    let mut out = Vec::new();
    let mut errors = Vec::new();
    for (i, item) in items.iter().enumerate() {
        match item {
            Value::Integer(n) if (0..=255).contains(n) => out.push(*n as u8),
            Value::Table(t) if t.len() == 1 => {
                let (ty, value) = t.iter().next().expect("one key");
                if let Err(msg) = field(&mut out, ty, value) {
                    errors.push((format!("[{i}].{ty}"), msg));
                }
            }
            other => {
                let msg = format!("expected a byte (0 to 255) or a one-key table such as {{ u32 = 7 }}, found {other}");
                errors.push((format!("[{i}]"), msg));
            }
        }
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
}

/// Appends one typed field.
fn field(out: &mut Vec<u8>, ty: &str, value: &Value) -> Result<(), String> {
    match ty {
        "bytes" => out.extend(byte_string(value)?),
        "zeros" => match value {
            Value::Integer(n) if (0..=65_536).contains(n) => out.resize(out.len() + *n as usize, 0),
            other => return Err(format!("expected a count of zero bytes (0 to 65536), found {other}")),
        },
        _ => {
            let Some(&(_, size, kind)) = NUMBERS.iter().find(|(name, ..)| *name == ty) else {
                return Err(format!("unknown type `{ty}` (expected one of: {TYPES})"));
            };
            out.resize(out.len().next_multiple_of(size), 0);
            match kind {
                Kind::Float => out.extend(float(value, size)?),
                Kind::Unsigned | Kind::Signed => out.extend(&integer(value, size, kind, ty)?.to_le_bytes()[..size]),
            }
        }
    }
    Ok(())
}

fn byte_string(value: &Value) -> Result<Vec<u8>, String> {
    match value {
        Value::String(s) => Ok(s.as_bytes().to_vec()),
        Value::Array(items) => items
            .iter()
            .map(|b| match b {
                Value::Integer(n) if (0..=255).contains(n) => Ok(*n as u8),
                other => Err(format!("expected a byte (0 to 255), found {other}")),
            })
            .collect(),
        other => Err(format!("expected a string or an array of bytes, found {other}")),
    }
}

/// An integer of `size` bytes, range-checked; two's complement, so its low `size` bytes are the encoding.
fn integer(value: &Value, size: usize, kind: Kind, ty: &str) -> Result<i128, String> {
    let n: i128 = match value {
        Value::Integer(n) => i128::from(*n),
        Value::String(s) if s.contains('{') => {
            return Err(format!("unknown placeholder in \"{s}\" (a template of `count` children replaces `{{i}}`)"))
        }
        Value::String(s) => s.trim().parse().map_err(|_| format!("expected an integer, found \"{s}\""))?,
        other => return Err(format!("expected an integer, found {other}")),
    };
    let bits = 8 * size as u32;
    let (min, max) = match kind {
        Kind::Signed => (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1),
        _ => (0, (1i128 << bits) - 1),
    };
    if !(min..=max).contains(&n) {
        return Err(format!("{n} does not fit {ty} ({min} to {max})"));
    }
    Ok(n)
}

fn float(value: &Value, size: usize) -> Result<Vec<u8>, String> {
    let x = match value {
        Value::Float(x) => *x,
        Value::Integer(n) => *n as f64,
        Value::String(s) => s.trim().parse().map_err(|_| format!("expected a number, found \"{s}\""))?,
        other => return Err(format!("expected a number, found {other}")),
    };
    if size == 8 {
        return Ok(x.to_le_bytes().to_vec());
    }
    let single = x as f32;
    if x.is_finite() && !single.is_finite() {
        return Err(format!("{x} does not fit f32"));
    }
    Ok(single.to_le_bytes().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(text: &str) -> Result<Vec<u8>, InitError> {
        let doc: toml::Table = format!("init = {text}").parse().unwrap();
        encode(&doc["init"]).map_err(|mut errors| {
            assert_eq!(errors.len(), 1, "{errors:?}");
            errors.remove(0)
        })
    }

    #[test]
    fn typed_values_are_laid_out_as_a_c_struct() {
        assert_eq!(enc("[1, 2, 3]").unwrap(), [1, 2, 3]);
        // struct { uint8_t a; uint32_t b; int16_t c; double d; }: b at 4, c at 8, d at 16.
        let bytes = enc("[{ u8 = 1 }, { u32 = 0x01020304 }, { i16 = -2 }, { f64 = 0.5 }]").unwrap();
        let mut want = vec![1, 0, 0, 0, 4, 3, 2, 1, 0xfe, 0xff, 0, 0, 0, 0, 0, 0];
        want.extend(0.5f64.to_le_bytes());
        assert_eq!(bytes, want);
        assert_eq!(enc("[{ bytes = \"ab\" }, { zeros = 2 }, { f32 = 1 }]").unwrap(), {
            let mut v = vec![b'a', b'b', 0, 0];
            v.extend(1.0f32.to_le_bytes());
            v
        });
        assert_eq!(enc("[{ u64 = \"18446744073709551615\" }]").unwrap(), [0xff; 8]);
        assert_eq!(enc("[{ bytes = [9, 8] }, 7]").unwrap(), [9, 8, 7]);
        assert!(enc("[]").unwrap().is_empty());
    }

    #[test]
    fn bad_values_say_where_and_why() {
        let cases = [
            ("[256]", "[0]", "expected a byte"),
            ("[1, { u8 = 300 }]", "[1].u8", "300 does not fit u8 (0 to 255)"),
            ("[{ i8 = -129 }]", "[0].i8", "does not fit i8"),
            ("[{ u32 = -1 }]", "[0].u32", "does not fit u32"),
            ("[{ u16 = \"x\" }]", "[0].u16", "expected an integer"),
            ("[{ f32 = 1e300 }]", "[0].f32", "does not fit f32"),
            ("[{ int = 1 }]", "[0].int", "unknown type `int`"),
            ("[{ u8 = 1, u16 = 2 }]", "[0]", "one-key table"),
            ("[{ bytes = 3 }]", "[0].bytes", "a string or an array of bytes"),
            ("[{ zeros = -1 }]", "[0].zeros", "count of zero bytes"),
            ("\"text\"", "", "expected an array"),
        ];
        for (text, at, why) in cases {
            let (path, msg) = enc(text).unwrap_err();
            assert_eq!(path, at, "{text}: {msg}");
            assert!(msg.contains(why), "{text}: {msg}");
        }
    }

    #[test]
    fn every_bad_item_is_reported_not_only_the_first() {
        let doc: toml::Table = "init = [{ u8 = 300 }, 7, { u32 = \"x\" }, 256]".parse().unwrap();
        let errors = encode(&doc["init"]).unwrap_err();
        let at: Vec<&str> = errors.iter().map(|(at, _)| at.as_str()).collect();
        assert_eq!(at, ["[0].u8", "[2].u32", "[3]"]);
    }
}
