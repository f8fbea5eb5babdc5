//! Kubernetes resource quantities ("500m", "1Gi", "1.5", "2e3", "128974848") with the API's
//! rounding: `value()` and `milli_value()` round up, as `resource.Quantity` does.
//!
//! Pure parsing; no knowledge of which resource a quantity belongs to.

use std::fmt;

/// A parsed quantity, held exactly in nano-units.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Quantity {
    nanos: i128,
}

/// Why a quantity string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error("quantity {0:?}: empty")]
    Empty(String),
    #[error("quantity {0:?}: not a number with an optional suffix (e.g. 500m, 2, 1Gi, 1e3)")]
    Malformed(String),
    #[error("quantity {0:?}: unknown suffix {1:?}")]
    UnknownSuffix(String, String),
    #[error("quantity {0:?}: too large")]
    TooLarge(String),
    #[error("quantity {0:?}: more precision than a nano-unit")]
    TooPrecise(String),
}

const NANO: i128 = 1_000_000_000;

impl Quantity {
    /// Parses the Kubernetes quantity format.
    pub fn parse(input: &str) -> Result<Self, QuantityError> {
        let s = input.trim();
        if s.is_empty() {
            return Err(QuantityError::Empty(input.to_string()));
        }
        let (sign, body) = match s.as_bytes()[0] {
            b'-' => (-1, &s[1..]),
            b'+' => (1, &s[1..]),
            _ => (1, s),
        };
        let num_end = body
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(body.len());
        let (number, suffix) = body.split_at(num_end);
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return Err(QuantityError::Malformed(input.to_string()));
        }
        let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
        let (mult_num, mult_den) = suffix_factor(input, suffix)?;
        // value = (int.frac) * mult_num / mult_den, in nanos.
        let digits = format!("{int_part}{frac_part}");
        let mantissa: i128 = digits
            .parse()
            .map_err(|_| QuantityError::TooLarge(input.to_string()))?;
        let frac_scale = 10i128
            .checked_pow(frac_part.len() as u32)
            .ok_or_else(|| QuantityError::TooPrecise(input.to_string()))?;
        let numerator = mantissa
            .checked_mul(NANO)
            .and_then(|v| v.checked_mul(mult_num))
            .ok_or_else(|| QuantityError::TooLarge(input.to_string()))?;
        let denominator = frac_scale * mult_den;
        if numerator % denominator != 0 {
            return Err(QuantityError::TooPrecise(input.to_string()));
        }
        Ok(Self {
            nanos: sign * (numerator / denominator),
        })
    }

    /// A quantity of whole units.
    pub fn from_value(v: i64) -> Self {
        Self {
            nanos: i128::from(v) * NANO,
        }
    }

    /// A quantity of milli-units.
    pub fn from_milli(v: i64) -> Self {
        Self {
            nanos: i128::from(v) * 1_000_000,
        }
    }

    /// Whole units, rounded up (`Quantity.Value()`).
    pub fn value(self) -> i64 {
        ceil_div(self.nanos, NANO)
    }

    /// Milli-units, rounded up (`Quantity.MilliValue()`).
    pub fn milli_value(self) -> i64 {
        ceil_div(self.nanos, 1_000_000)
    }

    /// True when the quantity is a whole number of units (`Value()*1000 == MilliValue()` for CPUs).
    pub fn is_integral(self) -> bool {
        self.nanos % NANO == 0
    }

    pub fn is_zero(self) -> bool {
        self.nanos == 0
    }

    pub fn is_negative(self) -> bool {
        self.nanos < 0
    }

    /// The sum, saturating at the representable bounds (resource totals never get near them).
    pub fn saturating_add(self, other: Self) -> Self {
        Self {
            nanos: self.nanos.saturating_add(other.nanos),
        }
    }
}

/// A byte count in the largest binary unit that divides it exactly, as Kubernetes writes
/// quantities: 64 GiB → "64Gi", 6402822144 → "6252756Ki", 1000 → "1000", 0 → "0".
pub fn format_binary(bytes: u64) -> String {
    const UNITS: [(&str, u32); 6] = [
        ("Ei", 60),
        ("Pi", 50),
        ("Ti", 40),
        ("Gi", 30),
        ("Mi", 20),
        ("Ki", 10),
    ];
    if bytes == 0 {
        return "0".to_string();
    }
    UNITS
        .iter()
        .find(|(_, shift)| bytes.trailing_zeros() >= *shift)
        .map_or_else(
            || bytes.to_string(),
            |(suffix, shift)| format!("{}{suffix}", bytes >> shift),
        )
}

fn ceil_div(n: i128, d: i128) -> i64 {
    let q = n.div_euclid(d) + i128::from(n.rem_euclid(d) != 0);
    q.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

/// The suffix as a fraction num/den.
fn suffix_factor(input: &str, suffix: &str) -> Result<(i128, i128), QuantityError> {
    let binary = |p: u32| Ok((1i128 << (10 * p), 1));
    let decimal = |p: u32| Ok((10i128.pow(p), 1));
    match suffix {
        "" => decimal(0),
        "n" => Ok((1, NANO)),
        "u" => Ok((1, 1_000_000)),
        "m" => Ok((1, 1000)),
        "k" => decimal(3),
        "M" => decimal(6),
        "G" => decimal(9),
        "T" => decimal(12),
        "P" => decimal(15),
        "E" => decimal(18),
        "Ki" => binary(1),
        "Mi" => binary(2),
        "Gi" => binary(3),
        "Ti" => binary(4),
        "Pi" => binary(5),
        "Ei" => binary(6),
        s if s.starts_with(['e', 'E']) => {
            let exp: i32 = s[1..]
                .parse()
                .map_err(|_| QuantityError::UnknownSuffix(input.into(), s.into()))?;
            if exp.abs() > 18 {
                return Err(QuantityError::TooLarge(input.to_string()));
            }
            if exp >= 0 {
                decimal(exp as u32)
            } else {
                Ok((1, 10i128.pow(exp.unsigned_abs())))
            }
        }
        s => Err(QuantityError::UnknownSuffix(
            input.to_string(),
            s.to_string(),
        )),
    }
}

impl std::str::FromStr for Quantity {
    type Err = QuantityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl fmt::Display for Quantity {
    /// Milli-precision decimal form ("1500m", "2"); not the API's canonical form.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_integral() {
            write!(f, "{}", self.value())
        } else {
            write!(f, "{}m", self.milli_value())
        }
    }
}

impl<'de> serde::Deserialize<'de> for Quantity {
    /// Accepts a string or a bare YAML/JSON number, as manifests do.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(serde::Deserialize)]
        #[serde(untagged)]
        enum Raw {
            S(String),
            I(i64),
            F(f64),
        }
        let text = match Raw::deserialize(d)? {
            Raw::S(s) => s,
            Raw::I(i) => i.to_string(),
            Raw::F(x) => x.to_string(),
        };
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kubernetes_forms() {
        let q = |s: &str| Quantity::parse(s).unwrap();
        assert_eq!(q("500m").milli_value(), 500);
        assert_eq!(q("500m").value(), 1);
        assert_eq!(q("2").milli_value(), 2000);
        assert_eq!(q("1.5").milli_value(), 1500);
        assert_eq!(q("1Gi").value(), 1 << 30);
        assert_eq!(q("64Gi").value(), 64 << 30);
        assert_eq!(q("2Mi").value(), 2 << 20);
        assert_eq!(q("1k").value(), 1000);
        assert_eq!(q("1e3").value(), 1000);
        assert_eq!(q("128974848").value(), 128_974_848);
        assert_eq!(q("129M").value(), 129_000_000);
        assert_eq!(q("0.1").milli_value(), 100);
        assert_eq!(q("1n").milli_value(), 1);
        assert!(q("3").is_integral());
        assert!(!q("3500m").is_integral());
        assert!(q("3000m").is_integral());
    }

    #[test]
    fn refuses_bad_forms_with_reason() {
        let e = |s: &str| Quantity::parse(s).unwrap_err().to_string();
        assert!(e("").contains("empty"));
        assert!(e("abc").contains("not a number"));
        assert!(e("1Xi").contains("unknown suffix"));
        assert!(e("1.2.3").contains("not a number"));
        assert!(e("0.5n").contains("precision"));
    }

    #[test]
    fn formats_bytes_in_the_largest_exact_binary_unit() {
        for (bytes, text) in [
            (0, "0"),
            (1000, "1000"),
            (1024, "1Ki"),
            (64 << 30, "64Gi"),
            (6_402_822_144, "6252756Ki"),
            (3 << 20, "3Mi"),
        ] {
            assert_eq!(format_binary(bytes), text);
            if bytes != 0 {
                assert_eq!(
                    Quantity::parse(text).unwrap().value(),
                    bytes as i64,
                    "{text} parses back"
                );
            }
        }
    }

    #[test]
    fn deserializes_numbers_and_strings() {
        let v: Vec<Quantity> = serde_json::from_str(r#"["1Gi", 2, 0.5]"#).unwrap();
        assert_eq!(v[0].value(), 1 << 30);
        assert_eq!(v[1].milli_value(), 2000);
        assert_eq!(v[2].milli_value(), 500);
    }
}
