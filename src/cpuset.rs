//! `CpuSet`: a set of logical CPU ids with the Linux list format ("0-3,8,10-11").
//!
//! Owns parsing (with errors that say what is wrong), set algebra and the canonical
//! output. Backed by a bit vector so set algebra on 4096-CPU machines stays cheap.
//! Never touches the filesystem.

use std::fmt;
use std::str::FromStr;

/// Largest CPU id accepted by the parser; anything above is a typo, not a machine.
pub const MAX_CPU_ID: u32 = 1 << 16;

/// A set of logical CPU ids, ordered ascending.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct CpuSet {
    words: Vec<u64>,
}

/// Why a CPU list could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CpuSetError {
    #[error("cpu list {input:?}: {item:?} is not a cpu id or range")]
    NotANumber { input: String, item: String },
    #[error("cpu list {input:?}: range {item:?} runs backwards")]
    Backwards { input: String, item: String },
    #[error("cpu list {input:?}: cpu id {id} is above the limit {MAX_CPU_ID}")]
    TooLarge { input: String, id: u64 },
    #[error("cpu list {input:?}: empty element")]
    EmptyElement { input: String },
}

impl CpuSet {
    /// The empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Parses the Linux list format. The empty string (and surrounding whitespace) is the empty set.
    pub fn parse(input: &str) -> Result<Self, CpuSetError> {
        let trimmed = input.trim();
        let mut set = Self::new();
        if trimmed.is_empty() {
            return Ok(set);
        }
        for item in trimmed.split(',') {
            let item = item.trim();
            if item.is_empty() {
                return Err(CpuSetError::EmptyElement {
                    input: input.to_string(),
                });
            }
            let (lo, hi) = match item.split_once('-') {
                Some((a, b)) => (parse_id(input, item, a)?, parse_id(input, item, b)?),
                None => {
                    let id = parse_id(input, item, item)?;
                    (id, id)
                }
            };
            if hi < lo {
                return Err(CpuSetError::Backwards {
                    input: input.to_string(),
                    item: item.to_string(),
                });
            }
            for id in lo..=hi {
                set.insert(id);
            }
        }
        Ok(set)
    }

    /// A set holding `lo..=hi`.
    pub fn range(lo: u32, hi: u32) -> Self {
        (lo..=hi).collect()
    }

    pub fn insert(&mut self, id: u32) {
        let (w, b) = ((id / 64) as usize, id % 64);
        if self.words.len() <= w {
            self.words.resize(w + 1, 0);
        }
        self.words[w] |= 1 << b;
    }

    pub fn remove(&mut self, id: u32) {
        let (w, b) = ((id / 64) as usize, id % 64);
        if let Some(word) = self.words.get_mut(w) {
            *word &= !(1 << b);
        }
        self.trim();
    }

    pub fn contains(&self, id: u32) -> bool {
        let (w, b) = ((id / 64) as usize, id % 64);
        self.words.get(w).is_some_and(|word| word & (1 << b) != 0)
    }

    pub fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// Ids in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.words.iter().enumerate().flat_map(|(w, &word)| {
            let mut bits = word;
            std::iter::from_fn(move || {
                if bits == 0 {
                    return None;
                }
                let b = bits.trailing_zeros();
                bits &= bits - 1;
                Some(w as u32 * 64 + b)
            })
        })
    }

    /// Ids in ascending order, collected.
    pub fn to_vec(&self) -> Vec<u32> {
        self.iter().collect()
    }

    pub fn first(&self) -> Option<u32> {
        self.iter().next()
    }

    pub fn union(&self, other: &Self) -> Self {
        let n = self.words.len().max(other.words.len());
        let words = (0..n).map(|i| self.word(i) | other.word(i)).collect();
        Self::from_words(words)
    }

    pub fn intersection(&self, other: &Self) -> Self {
        let n = self.words.len().min(other.words.len());
        let words = (0..n).map(|i| self.word(i) & other.word(i)).collect();
        Self::from_words(words)
    }

    pub fn difference(&self, other: &Self) -> Self {
        let words = (0..self.words.len())
            .map(|i| self.word(i) & !other.word(i))
            .collect();
        Self::from_words(words)
    }

    pub fn is_subset(&self, other: &Self) -> bool {
        (0..self.words.len()).all(|i| self.word(i) & !other.word(i) == 0)
    }

    pub fn is_disjoint(&self, other: &Self) -> bool {
        self.intersection(other).is_empty()
    }

    /// The canonical Linux list format: ascending, ranges of 2+ ids collapsed ("0-3,8,10-11").
    pub fn to_list(&self) -> String {
        self.to_string()
    }

    fn word(&self, i: usize) -> u64 {
        self.words.get(i).copied().unwrap_or(0)
    }

    fn from_words(words: Vec<u64>) -> Self {
        let mut set = Self { words };
        set.trim();
        set
    }

    fn trim(&mut self) {
        while self.words.last() == Some(&0) {
            self.words.pop();
        }
    }
}

fn parse_id(input: &str, item: &str, s: &str) -> Result<u32, CpuSetError> {
    let s = s.trim();
    let id: u64 = s.parse().map_err(|_| CpuSetError::NotANumber {
        input: input.to_string(),
        item: item.to_string(),
    })?;
    if id > u64::from(MAX_CPU_ID) {
        return Err(CpuSetError::TooLarge {
            input: input.to_string(),
            id,
        });
    }
    Ok(id as u32)
}

impl FromStr for CpuSet {
    type Err = CpuSetError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl FromIterator<u32> for CpuSet {
    fn from_iter<I: IntoIterator<Item = u32>>(iter: I) -> Self {
        let mut set = Self::new();
        for id in iter {
            set.insert(id);
        }
        set
    }
}

impl fmt::Display for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut ids = self.iter().peekable();
        let mut first = true;
        while let Some(lo) = ids.next() {
            let mut hi = lo;
            while ids.peek() == Some(&(hi + 1)) {
                hi = ids.next().unwrap_or(hi);
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if hi == lo {
                write!(f, "{lo}")?;
            } else {
                write!(f, "{lo}-{hi}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CpuSet({self})")
    }
}

impl serde::Serialize for CpuSet {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for CpuSet {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_and_prints_canonical_lists() {
        for (input, want) in [
            ("", ""),
            ("0", "0"),
            ("0-3,8,10-11", "0-3,8,10-11"),
            ("3,2,1,0", "0-3"),
            (" 1 , 5-6 ", "1,5-6"),
            ("0-0", "0"),
            ("63-65", "63-65"),
            ("7\n", "7"),
        ] {
            assert_eq!(
                CpuSet::parse(input).unwrap().to_string(),
                want,
                "input {input:?}"
            );
        }
    }

    #[test]
    fn rejects_bad_lists_with_reason() {
        let err = |s: &str| CpuSet::parse(s).unwrap_err().to_string();
        assert!(err("a").contains("\"a\" is not a cpu id"), "{}", err("a"));
        assert!(err("3-1").contains("runs backwards"));
        assert!(err("1,,2").contains("empty element"));
        assert!(err("999999").contains("above the limit"));
        assert!(err("1-").contains("is not a cpu id"));
    }

    #[test]
    fn set_algebra() {
        let a = CpuSet::parse("0-7").unwrap();
        let b = CpuSet::parse("4-11").unwrap();
        assert_eq!(a.union(&b).to_string(), "0-11");
        assert_eq!(a.intersection(&b).to_string(), "4-7");
        assert_eq!(a.difference(&b).to_string(), "0-3");
        assert!(CpuSet::parse("1-2").unwrap().is_subset(&a));
        assert!(!b.is_subset(&a));
        assert_eq!(b.difference(&b), CpuSet::new());
        assert!(b.difference(&b).is_empty());
    }

    proptest! {
        #[test]
        fn display_parse_roundtrip(ids in proptest::collection::btree_set(0u32..300, 0..40)) {
            let set: CpuSet = ids.iter().copied().collect();
            let back = CpuSet::parse(&set.to_string()).unwrap();
            prop_assert_eq!(&back, &set);
            prop_assert_eq!(back.to_vec(), ids.into_iter().collect::<Vec<_>>());
        }

        #[test]
        fn algebra_matches_btreeset(
            a in proptest::collection::btree_set(0u32..200, 0..30),
            b in proptest::collection::btree_set(0u32..200, 0..30),
        ) {
            let (sa, sb): (CpuSet, CpuSet) = (a.iter().copied().collect(), b.iter().copied().collect());
            prop_assert_eq!(sa.union(&sb).to_vec(), a.union(&b).copied().collect::<Vec<_>>());
            prop_assert_eq!(sa.intersection(&sb).to_vec(), a.intersection(&b).copied().collect::<Vec<_>>());
            prop_assert_eq!(sa.difference(&sb).to_vec(), a.difference(&b).copied().collect::<Vec<_>>());
            prop_assert_eq!(sa.len(), a.len());
        }
    }
}
