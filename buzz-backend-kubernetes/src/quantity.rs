//! Kubernetes resource quantities (`resource.Quantity` syntax): a non-negative
//! number with an optional binary (`Ki`…`Ei`), decimal (`n u m k M G T P E`) or
//! exponent (`e3`) suffix. Parsed to a comparable value to catch `request > limit`
//! before anything is created.

/// A parsed quantity's magnitude.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct Quantity(f64);

impl Quantity {
    /// Parses the quantity grammar; `None` when it is not one.
    pub fn parse(s: &str) -> Option<Quantity> {
        let s = s.trim();
        let s = s.strip_prefix('+').unwrap_or(s);
        let num_end = s
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(s.len());
        let (num, suffix) = s.split_at(num_end);
        if num.is_empty() || num == "." || num.matches('.').count() > 1 {
            return None;
        }
        let base: f64 = num.parse().ok()?;
        let mult = match suffix {
            "" => 1.0,
            "Ki" => 1024f64,
            "Mi" => 1024f64.powi(2),
            "Gi" => 1024f64.powi(3),
            "Ti" => 1024f64.powi(4),
            "Pi" => 1024f64.powi(5),
            "Ei" => 1024f64.powi(6),
            "n" => 1e-9,
            "u" => 1e-6,
            "m" => 1e-3,
            "k" => 1e3,
            "M" => 1e6,
            "G" => 1e9,
            "T" => 1e12,
            "P" => 1e15,
            "E" => 1e18,
            exp if exp.starts_with(['e', 'E']) => {
                let e: i32 = exp[1..].parse().ok()?;
                10f64.powi(e)
            }
            _ => return None,
        };
        // An exponent can overflow to infinity: no cluster accepts that, so neither do we.
        let value = base * mult;
        value.is_finite().then_some(Quantity(value))
    }

    /// The magnitude in base units (cores, bytes).
    pub fn value(self) -> f64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grammar() {
        for ok in [
            "1",
            "500m",
            "2Gi",
            "0.5",
            "1e3",
            "+1",
            "128974848",
            "129M",
            "1.5Ki",
        ] {
            assert!(Quantity::parse(ok).is_some(), "{ok}");
        }
        for bad in [
            "", "-1", "1GB", "abc", "1.2.3", "Gi", ".", "1 Gi", "1e", "1e400", "9Ei1",
        ] {
            assert!(Quantity::parse(bad).is_none(), "{bad}");
        }
        assert!(Quantity::parse("500m") < Quantity::parse("1"));
        assert!(Quantity::parse("2Gi") > Quantity::parse("2G"));
    }
}
