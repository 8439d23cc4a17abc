//! C struct layouts as the C compiler laid them out, and the same description of a Rust struct, so a test can
//! prove that a user's message or state structs agree on both sides (size, and each field's offset and size).
//! `ringvisor_build::Behaviours::c_struct` generates the C side (`c_layouts()` in the build script's output);
//! [`rust_layout!`](crate::rust_layout) describes the Rust side; [`CLayout::check`] compares them.

/// One field of a struct: its name, offset and size in bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CField {
    /// The field's name.
    pub name: &'static str,
    /// Its offset from the start of the struct.
    pub offset: usize,
    /// Its size.
    pub size: usize,
}

/// A struct's size and the fields that were listed, as one compiler laid them out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CLayout {
    /// The struct's name (the C type, or the Rust type for [`rust_layout!`](crate::rust_layout)).
    pub name: &'static str,
    /// `sizeof` / `size_of`.
    pub size: usize,
    /// The listed fields, in the order listed.
    pub fields: Vec<CField>,
}

impl CLayout {
    /// Compares this layout with `other` (typically the C side with the Rust mirror): the sizes, the set of
    /// field names, and each field's offset and size. `Err` lists every difference, naming both structs.
    pub fn check(&self, other: &CLayout) -> Result<(), String> {
        let mut wrong = Vec::new();
        if self.size != other.size {
            wrong.push(format!("size: {} is {} bytes, {} is {}", self.name, self.size, other.name, other.size));
        }
        for f in &self.fields {
            match other.fields.iter().find(|g| g.name == f.name) {
                None => wrong.push(format!("field `{}` of {} is not in {}", f.name, self.name, other.name)),
                Some(g) if (g.offset, g.size) != (f.offset, f.size) => wrong.push(format!(
                    "field `{}`: offset {} size {} in {}, offset {} size {} in {}",
                    f.name, f.offset, f.size, self.name, g.offset, g.size, other.name
                )),
                Some(_) => {}
            }
        }
        for g in other.fields.iter().filter(|g| !self.fields.iter().any(|f| f.name == g.name)) {
            wrong.push(format!("field `{}` of {} is not in {}", g.name, other.name, self.name));
        }
        if wrong.is_empty() {
            Ok(())
        } else {
            Err(format!("{} and {} differ: {}", self.name, other.name, wrong.join("; ")))
        }
    }
}

/// The size of the field `field` selects (for [`rust_layout!`](crate::rust_layout)).
pub fn field_size<T, F>(_field: fn(&T) -> &F) -> usize {
    std::mem::size_of::<F>()
}

/// The [`CLayout`] of a Rust struct and the listed fields: `rust_layout!(Reply, [client, granted])`, to
/// [`check`](CLayout::check) against the C struct's.
#[macro_export]
macro_rules! rust_layout {
    ($t:ty, [$($f:ident),* $(,)?]) => {
        $crate::c_layout::CLayout {
            name: stringify!($t),
            size: ::core::mem::size_of::<$t>(),
            fields: ::std::vec![$(
                $crate::c_layout::CField {
                    name: stringify!($f),
                    offset: ::core::mem::offset_of!($t, $f),
                    size: $crate::c_layout::field_size(|v: &$t| &v.$f),
                }
            ),*],
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[repr(C)]
    struct Pair {
        a: u32,
        b: u64,
    }

    #[test]
    fn a_rust_struct_is_described_and_every_difference_named() {
        let rust = crate::rust_layout!(Pair, [a, b]);
        assert_eq!((rust.size, rust.fields[1].offset, rust.fields[1].size), (16, 8, 8));
        let same = CLayout {
            name: "pair",
            size: 16,
            fields: vec![CField { name: "a", offset: 0, size: 4 }, CField { name: "b", offset: 8, size: 8 }],
        };
        assert_eq!(same.check(&rust), Ok(()));
        let packed = CLayout {
            name: "pair",
            size: 12,
            fields: vec![CField { name: "a", offset: 0, size: 4 }, CField { name: "c", offset: 4, size: 8 }],
        };
        let err = packed.check(&rust).unwrap_err();
        for part in ["size: pair is 12 bytes, Pair is 16", "field `c` of pair is not in Pair", "field `b` of Pair"] {
            assert!(err.contains(part), "{part} in {err}");
        }
    }
}
