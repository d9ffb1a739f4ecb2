//! Hostile inputs made from real ones: seeded mutations of JSON documents and their bytes.
//!
//! Every input is a pure function of `(seed, target, index)` ([`input_rng`]), so any one input
//! can be regenerated without the ones before it. The mutations:
//!
//! - **structured** ([`mutate_json`]): at a node chosen by a random descent, delete, duplicate
//!   or rename a field or element, swap the value's type, put in boundary numbers (`u64::MAX`,
//!   `i64::MIN`, `1e308`, `2^53 + 1`, ...), long strings, unicode (emoji, right-to-left, NUL,
//!   combining marks), or wrap it in arrays and objects;
//! - **bytes** ([`mutate_bytes`]): bit flips, truncation, deleted, repeated and inserted ranges,
//!   JSON tokens and invalid UTF-8 spliced in, a top-level key repeated;
//! - **deep nesting** ([`deep_nesting`]): a value replaced by up to 200,000 nested arrays
//!   (valid JSON, beyond any parser's recursion limit);
//! - **random bytes** ([`random_bytes`]).

use serde_json::{Map, Value};

/// What an input's mutations were, for the results' counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// The real document, unchanged.
    Pristine,
    /// Structured mutations of the JSON value.
    Structured,
    /// Byte mutations of the serialized document (after structured ones, sometimes).
    Bytes,
    /// A value replaced by deeply nested arrays.
    DeepNesting,
    /// Random bytes, nothing of the document.
    Random,
}

impl Kind {
    /// Name in the results file.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Pristine => "pristine",
            Kind::Structured => "structured",
            Kind::Bytes => "bytes",
            Kind::DeepNesting => "deep_nesting",
            Kind::Random => "random_bytes",
        }
    }
}

/// The generator of input `index` of `target` in the run seeded `seed`.
pub fn input_rng(seed: u64, target: &str, index: u64) -> fastrand::Rng {
    let mut h = seed ^ 0x9e37_79b9_7f4a_7c15;
    for b in target.bytes() {
        h = splitmix(h ^ u64::from(b));
    }
    fastrand::Rng::with_seed(splitmix(h ^ splitmix(index)))
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A document mutated by one of the [`Kind`]s, serialized; the kind is chosen with the weights
/// pristine 10%, structured 45%, bytes 35%, deep nesting 5%, random 5%.
pub fn mutated_document(rng: &mut fastrand::Rng, original: &Value) -> (Kind, Vec<u8>) {
    let roll = rng.u32(0..100);
    match roll {
        0..10 => (Kind::Pristine, to_bytes(original)),
        10..55 => {
            let mut v = original.clone();
            for _ in 0..rng.usize(1..=4) {
                mutate_json(rng, &mut v);
            }
            (Kind::Structured, to_bytes(&v))
        }
        55..90 => {
            let mut v = original.clone();
            if rng.bool() {
                mutate_json(rng, &mut v);
            }
            let mut bytes = to_bytes(&v);
            for _ in 0..rng.usize(1..=4) {
                mutate_bytes(rng, &mut bytes);
            }
            (Kind::Bytes, bytes)
        }
        90..95 => (Kind::DeepNesting, deep_nesting(rng, original)),
        _ => (Kind::Random, random_bytes(rng, 4096)),
    }
}

fn to_bytes(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).expect("a Value always serializes")
}

/// Applies one structured mutation somewhere in `v`.
pub fn mutate_json(rng: &mut fastrand::Rng, v: &mut Value) {
    let node = pick(rng, v);
    match node {
        Value::Object(map) if !map.is_empty() && rng.u32(0..3) > 0 => mutate_object(rng, map),
        Value::Array(list) if !list.is_empty() && rng.u32(0..3) > 0 => mutate_array(rng, list),
        other => *other = replacement(rng, other),
    }
}

/// A node reached by descending from `v` into random children, stopping with probability 1/4
/// at each level (and at leaves).
fn pick<'a>(rng: &mut fastrand::Rng, v: &'a mut Value) -> &'a mut Value {
    let stop = rng.u32(0..4) == 0;
    let len = match &*v {
        Value::Object(m) => m.len(),
        Value::Array(l) => l.len(),
        _ => 0,
    };
    if stop || len == 0 {
        return v;
    }
    let i = rng.usize(0..len);
    match v {
        Value::Object(m) => {
            let child = m.values_mut().nth(i).expect("index below len");
            pick(rng, child)
        }
        Value::Array(l) => pick(rng, &mut l[i]),
        _ => unreachable!("only containers have children"),
    }
}

fn mutate_object(rng: &mut fastrand::Rng, map: &mut Map<String, Value>) {
    let key = map
        .keys()
        .nth(rng.usize(0..map.len()))
        .expect("non-empty")
        .clone();
    match rng.u32(0..4) {
        0 | 1 => {
            map.remove(&key);
        }
        2 => {
            // Renamed: the field is missing and an unknown one appears.
            let value = map.remove(&key).expect("present");
            map.insert(format!("{key}{}", odd_text(rng)), value);
        }
        _ => {
            let value = map[&key].clone();
            map.insert(odd_text(rng), value);
        }
    }
}

fn mutate_array(rng: &mut fastrand::Rng, list: &mut Vec<Value>) {
    let i = rng.usize(0..list.len());
    match rng.u32(0..3) {
        0 => {
            list.remove(i);
        }
        1 => {
            // Many copies: long lists where one was expected.
            let copies = rng.usize(1..=64);
            let value = list[i].clone();
            list.extend(std::iter::repeat_n(value, copies));
        }
        _ => {
            let j = rng.usize(0..list.len());
            list.swap(i, j);
        }
    }
}

/// Something to put where `old` was: another type, a boundary value, odd text, a wrapper.
fn replacement(rng: &mut fastrand::Rng, old: &Value) -> Value {
    match rng.u32(0..12) {
        0 => Value::Null,
        1 => Value::Bool(rng.bool()),
        2 | 3 => boundary_number(rng),
        4 => Value::String(odd_text(rng)),
        5 => {
            let max = 1 << rng.u32(1..17);
            Value::String("x".repeat(rng.usize(1..=max)))
        }
        6 => Value::Array(vec![old.clone()]),
        7 => Value::Object(Map::from_iter([("value".to_owned(), old.clone())])),
        8 => Value::Array(Vec::new()),
        9 => Value::Object(Map::new()),
        // The same value written as another type: "5" for 5, 5 for "5", "true" for true.
        10 => match old {
            Value::String(s) => s
                .parse::<serde_json::Number>()
                .map(Value::Number)
                .unwrap_or_else(|_| boundary_number(rng)),
            other => Value::String(other.to_string()),
        },
        _ => Value::String(format!("{}{}", old.as_str().unwrap_or("v"), odd_text(rng))),
    }
}

fn boundary_number(rng: &mut fastrand::Rng) -> Value {
    let n: serde_json::Number = match rng.u32(0..12) {
        0 => 0.into(),
        1 => (-1).into(),
        2 => u64::MAX.into(),
        3 => i64::MIN.into(),
        4 => i64::MAX.into(),
        5 => u64::from(u32::MAX).into(),
        6 => (1u64 << 53).wrapping_add(1).into(),
        7 => serde_json::Number::from_f64(1e308).expect("finite"),
        8 => serde_json::Number::from_f64(-0.5).expect("finite"),
        9 => serde_json::Number::from_f64(5e-324).expect("finite"),
        10 => i64::from(i32::MIN).into(),
        _ => rng.i64(..).into(),
    };
    Value::Number(n)
}

/// Text that trips naive handling: unicode of every width, controls, separators, injection
/// characters.
fn odd_text(rng: &mut fastrand::Rng) -> String {
    const PIECES: [&str; 16] = [
        "", " ", "\u{0}", "\u{7f}", "é", "\u{301}", "\u{202e}", "\u{feff}", "\u{fffd}", "😀", "𝕏",
        "中文", "/", ",", "../", "%00",
    ];
    (0..rng.usize(1..=6))
        .map(|_| PIECES[rng.usize(0..PIECES.len())])
        .collect()
}

/// Applies one byte-level mutation to `bytes`.
pub fn mutate_bytes(rng: &mut fastrand::Rng, bytes: &mut Vec<u8>) {
    const TOKENS: [&[u8]; 16] = [
        b"\"",
        b"\\",
        b"{",
        b"}",
        b"[",
        b"]",
        b",",
        b":",
        b"null",
        b"\\u0000",
        b"\\ud800",
        b"1e999999",
        b"-",
        b"\xff",
        b"\xc0\x80",
        b"\xed\xa0\x80",
    ];
    if bytes.is_empty() {
        bytes.extend_from_slice(TOKENS[rng.usize(0..TOKENS.len())]);
        return;
    }
    let at = rng.usize(0..bytes.len());
    match rng.u32(0..7) {
        0 => {
            for _ in 0..rng.usize(1..=8) {
                let i = rng.usize(0..bytes.len());
                bytes[i] ^= 1 << rng.u32(0..8);
            }
        }
        1 => bytes.truncate(at),
        2 => {
            let end = (at + rng.usize(1..=64)).min(bytes.len());
            bytes.drain(at..end);
        }
        3 => {
            let end = (at + rng.usize(1..=256)).min(bytes.len());
            let copy = bytes[at..end].to_vec();
            bytes.splice(at..at, copy);
        }
        4 => {
            let token = TOKENS[rng.usize(0..TOKENS.len())];
            bytes.splice(at..at, token.iter().copied());
        }
        5 => {
            let junk: Vec<u8> = (0..rng.usize(1..=16)).map(|_| rng.u8(..)).collect();
            bytes.splice(at..at, junk);
        }
        _ => repeat_first_key(rng, bytes),
    }
}

/// Repeats the document's first key with another value right after the opening brace: JSON
/// with a duplicate key, which typed decoders must refuse or resolve, not trip over.
fn repeat_first_key(rng: &mut fastrand::Rng, bytes: &mut Vec<u8>) {
    let Ok(Value::Object(map)) = serde_json::from_slice::<Value>(bytes) else {
        return;
    };
    let Some(key) = map.keys().next() else {
        return;
    };
    let value = boundary_number(rng);
    let inserted = format!("{}:{value},", Value::String(key.clone()));
    if let Some(brace) = bytes.iter().position(|b| *b == b'{') {
        bytes.splice(brace + 1..brace + 1, inserted.into_bytes());
    }
}

/// `original` with one value replaced by up to 200,000 nested arrays, serialized. Built as
/// text: a `Value` that deep would overflow the generator's own stack.
pub fn deep_nesting(rng: &mut fastrand::Rng, original: &Value) -> Vec<u8> {
    const MARK: &str = "\u{1}deep\u{1}";
    let mut v = original.clone();
    *pick(rng, &mut v) = Value::String(MARK.to_owned());
    let text = serde_json::to_string(&v).expect("a Value always serializes");
    let depth = 1usize << rng.u32(4..18);
    let depth = depth + rng.usize(0..depth);
    let nested = format!("{}0{}", "[".repeat(depth), "]".repeat(depth));
    let marked = serde_json::to_string(MARK).expect("a string serializes");
    text.replacen(&marked, &nested, 1).into_bytes()
}

/// Up to `max` random bytes.
pub fn random_bytes(rng: &mut fastrand::Rng, max: usize) -> Vec<u8> {
    (0..rng.usize(0..=max)).map(|_| rng.u8(..)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn doc() -> Value {
        json!({"action": "queued", "workflow_job": {"id": 7, "labels": ["a", "b"],
               "name": "build"}, "repository": {"full_name": "o/r"}})
    }

    #[test]
    fn the_same_seed_target_and_index_give_the_same_input() {
        let make = |seed, target, index| {
            let mut rng = input_rng(seed, target, index);
            mutated_document(&mut rng, &doc())
        };
        assert_eq!(make(1, "webhook", 5), make(1, "webhook", 5));
        let others = [
            make(2, "webhook", 5),
            make(1, "crd", 5),
            make(1, "webhook", 6),
        ];
        let distinct = others
            .iter()
            .filter(|o| **o != make(1, "webhook", 5))
            .count();
        assert!(distinct >= 2, "seed, target and index all steer the input");
    }

    #[test]
    fn every_kind_is_generated_and_mutations_change_the_document() {
        let original = serde_json::to_vec(&doc()).unwrap();
        let mut kinds = std::collections::BTreeMap::new();
        for index in 0..2000 {
            let mut rng = input_rng(9, "test", index);
            let (kind, bytes) = mutated_document(&mut rng, &doc());
            let changed = bytes != original;
            let e = kinds.entry(kind).or_insert((0, 0));
            e.0 += 1;
            e.1 += usize::from(changed);
        }
        assert_eq!(kinds.len(), 5, "{kinds:?}");
        assert_eq!(
            kinds[&Kind::Pristine].1,
            0,
            "pristine inputs are the document"
        );
        for kind in [Kind::Structured, Kind::Bytes, Kind::DeepNesting] {
            let (n, changed) = kinds[&kind];
            assert!(changed * 10 >= n * 9, "{kind:?}: {changed} of {n} changed");
        }
    }

    #[test]
    fn deep_nesting_is_valid_json_beyond_the_parsers_recursion_limit() {
        let mut rng = input_rng(3, "test", 0);
        let bytes = deep_nesting(&mut rng, &doc());
        let depth = bytes.iter().filter(|b| **b == b'[').count();
        assert!(depth >= 16, "{depth}");
        let err = serde_json::from_slice::<Value>(&bytes).unwrap_err();
        assert!(
            err.to_string().contains("recursion limit") || depth < 128,
            "{err}"
        );
    }

    #[test]
    fn a_repeated_first_key_is_a_duplicate_key() {
        let mut rng = input_rng(4, "test", 0);
        let mut bytes = serde_json::to_vec(&doc()).unwrap();
        repeat_first_key(&mut rng, &mut bytes);
        let text = String::from_utf8(bytes).unwrap();
        assert_eq!(text.matches("\"action\"").count(), 2, "{text}");
    }
}
