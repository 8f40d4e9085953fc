//! Kubernetes `resource.Quantity`, as the `flowControl` section's `maxBytes` and `maxRequests`
//! are written (`5000`, `"1Gi"`, `"500M"`, `"1e9"`), read to the integer `Quantity.Value()`
//! gives (rounded up).

use serde_json::Value;

/// The largest quantity accepted: 2^53, where every integer is still exact in the parse.
pub const MAX_QUANTITY: i64 = 1 << 53;

/// The integer value of a quantity written as `value` (a JSON number or string), or why not.
pub fn parse(value: &Value) -> Result<i64, String> {
    let text = match value {
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.trim().to_owned(),
        other => return Err(format!("quantities must be a string or a number, got {other}")),
    };
    let invalid = || {
        "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
            .to_owned()
    };
    let number_end = text
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_digit() || c == '.' || (i == 0 && (c == '+' || c == '-'))))
        .map_or(text.len(), |(i, _)| i);
    let (number, suffix) = text.split_at(number_end);
    let mantissa: f64 = number.parse().map_err(|_| invalid())?;
    let scale = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        "Ti" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        "Pi" => 1024.0 * 1024.0 * 1024.0 * 1024.0 * 1024.0,
        "Ei" => 1024.0 * 1024.0 * 1024.0 * 1024.0 * 1024.0 * 1024.0,
        exponent if exponent.starts_with(['e', 'E']) => {
            let power: i32 = exponent[1..].parse().map_err(|_| invalid())?;
            if !(-30..=30).contains(&power) {
                return Err(invalid());
            }
            10f64.powi(power)
        }
        _ => return Err(invalid()),
    };
    let value = (mantissa * scale).ceil();
    if !value.is_finite() || value.abs() > MAX_QUANTITY as f64 {
        return Err(format!("at most {MAX_QUANTITY} (2^53) in magnitude"));
    }
    Ok(value as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn integers_suffixes_and_exponents_read_as_kubernetes_reads_them() {
        assert_eq!(parse(&json!(5000)), Ok(5000));
        assert_eq!(parse(&json!("1Gi")), Ok(1 << 30));
        assert_eq!(parse(&json!("500M")), Ok(500_000_000));
        assert_eq!(parse(&json!("1e9")), Ok(1_000_000_000));
        assert_eq!(parse(&json!("1.5k")), Ok(1500));
        assert_eq!(parse(&json!("1500m")), Ok(2), "Value() rounds up");
        assert_eq!(parse(&json!("-5")), Ok(-5));
        assert!(parse(&json!("ten")).is_err());
        assert!(parse(&json!("5 apples")).is_err());
        assert!(parse(&json!(true)).is_err());
        assert!(parse(&json!("1e30")).is_err(), "beyond 2^53");
    }
}
