//! The Azure LLM inference trace format: a CSV file whose header names the columns `TIMESTAMP`,
//! `ContextTokens` and `GeneratedTokens` (in any order, no others), one request per row.
//!
//! Row `k` (counting data rows from 0) becomes request `<client>-<k>`: one LLM call whose prompt
//! is `ContextTokens` tokens of its own and which generates `GeneratedTokens` tokens. `TIMESTAMP`
//! is either a date and time, `2023-11-16 18:15:46.6805900` (`T` may separate date and time; up
//! to 9 fractional digits; an optional `Z`, `±HH` or `±HH:MM` offset is applied), or a number of
//! seconds; the first row decides which, and every row must use the same kind. Arrivals are
//! microseconds after the first row (rounded to the nearest), so the first request arrives at 0.
//! A row without output (`GeneratedTokens` 0) or without prompt is refused: the simulated engine
//! generates exactly the given number of tokens, and nothing is not a request.

use blis_contracts::{FieldError, PromptPart, RequestSpec};

use super::trace_file::{LineFormat, single_call};

/// The column holding arrival times.
const TIMESTAMP: &str = "TIMESTAMP";
/// The column holding prompt lengths.
const CONTEXT_TOKENS: &str = "ContextTokens";
/// The column holding output lengths.
const GENERATED_TOKENS: &str = "GeneratedTokens";

/// Rows of an Azure trace, read as requests of one client.
pub struct AzureCsv {
    client: String,
    columns: Option<Columns>,
    first: Option<Stamp>,
    rows: u64,
}

/// Where each column is in a row.
#[derive(Clone, Copy)]
struct Columns {
    count: usize,
    timestamp: usize,
    context: usize,
    generated: usize,
}

/// One `TIMESTAMP`, in microseconds on its own clock.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Stamp {
    /// A date and time: µs since 1970-01-01 00:00 UTC.
    DateTime(i64),
    /// A number of seconds, as µs.
    Seconds(i64),
}

impl AzureCsv {
    /// Rows read as requests of `client`.
    pub fn new(client: &str) -> AzureCsv {
        AzureCsv { client: client.to_owned(), columns: None, first: None, rows: 0 }
    }

    /// Where the columns are, from the header line.
    fn header(at: &str, text: &str) -> Result<Columns, FieldError> {
        let names: Vec<&str> = text.trim_start_matches('\u{feff}').split(',').map(str::trim).collect();
        let expected =
            format!("the header names the columns {TIMESTAMP}, {CONTEXT_TOKENS} and {GENERATED_TOKENS}");
        for (i, name) in names.iter().enumerate() {
            if ![TIMESTAMP, CONTEXT_TOKENS, GENERATED_TOKENS].contains(name) {
                return Err(FieldError::new(at, format!("{name:?}"), format!("unknown column: {expected}")));
            }
            if names[..i].contains(name) {
                return Err(FieldError::new(at, format!("{name:?}"), "a column is named twice"));
            }
        }
        let find = |column: &str| {
            names
                .iter()
                .position(|n| *n == column)
                .ok_or_else(|| FieldError::at(at, format!("no {column} column: {expected}")))
        };
        Ok(Columns {
            count: names.len(),
            timestamp: find(TIMESTAMP)?,
            context: find(CONTEXT_TOKENS)?,
            generated: find(GENERATED_TOKENS)?,
        })
    }

    /// The arrival of a row, µs after the first row.
    fn arrival_us(&mut self, at: &str, text: &str) -> Result<u64, FieldError> {
        let refuse = |cause: String| FieldError::new(format!("{at}.{TIMESTAMP}"), text, cause);
        let stamp = parse_stamp(text).map_err(refuse)?;
        let first = *self.first.get_or_insert(stamp);
        let offset = match (first, stamp) {
            (Stamp::DateTime(a), Stamp::DateTime(b)) | (Stamp::Seconds(a), Stamp::Seconds(b)) => b - a,
            (Stamp::DateTime(_), Stamp::Seconds(_)) => {
                return Err(refuse("a number of seconds, but the first row gives a date and time".into()));
            }
            (Stamp::Seconds(_), Stamp::DateTime(_)) => {
                return Err(refuse("a date and time, but the first row gives a number of seconds".into()));
            }
        };
        u64::try_from(offset)
            .map_err(|_| refuse("earlier than the first row: arrivals must not go back in time".into()))
    }
}

/// A whole number of tokens, at least 1.
fn tokens(at: &str, column: &str, text: &str, why_not_zero: &str) -> Result<u32, FieldError> {
    match text.parse::<u32>() {
        Ok(0) => Err(FieldError::new(
            format!("{at}.{column}"),
            0,
            format!("must be at least 1 token: {why_not_zero}"),
        )),
        Ok(n) => Ok(n),
        Err(_) => Err(FieldError::new(
            format!("{at}.{column}"),
            format!("{text:?}"),
            "must be a whole number of tokens",
        )),
    }
}

impl LineFormat for AzureCsv {
    const ARRIVAL_FIELD: &'static str = TIMESTAMP;

    fn parse(&mut self, at: &str, text: &str) -> Result<Option<RequestSpec>, FieldError> {
        let Some(columns) = self.columns else {
            self.columns = Some(AzureCsv::header(at, text)?);
            return Ok(None);
        };
        let fields: Vec<&str> = text.split(',').map(str::trim).collect();
        if fields.len() != columns.count {
            return Err(FieldError::new(
                at,
                format!("{} fields", fields.len()),
                format!("the header has {} columns", columns.count),
            ));
        }
        let arrival_us = self.arrival_us(at, fields[columns.timestamp])?;
        let prompt =
            tokens(at, CONTEXT_TOKENS, fields[columns.context], "a prompt needs at least one token")?;
        let output = tokens(
            at,
            GENERATED_TOKENS,
            fields[columns.generated],
            "the engine generates exactly this many tokens, so a row without output cannot be replayed",
        )?;
        let id = format!("{}-{}", self.client, self.rows);
        self.rows += 1;
        Ok(Some(single_call(id, arrival_us, vec![PromptPart::Tokens(prompt)], output)))
    }
}

/// A `TIMESTAMP`: a number of seconds, or a date and time.
fn parse_stamp(text: &str) -> Result<Stamp, String> {
    if let Ok(seconds) = text.parse::<f64>() {
        if !seconds.is_finite() || seconds.abs() > 1e12 {
            return Err("must be a finite number of seconds within 10¹² of zero".into());
        }
        return Ok(Stamp::Seconds(libm::round(seconds * 1e6) as i64));
    }
    parse_date_time(text).map(Stamp::DateTime)
}

/// `YYYY-MM-DD HH:MM:SS[.fraction][Z|±HH|±HH:MM]` as µs since 1970-01-01 00:00 UTC, rounded to
/// the nearest µs.
fn parse_date_time(text: &str) -> Result<i64, String> {
    let form = "expected seconds or a date and time like 2023-11-16 18:15:46.6805900";
    let bytes = text.as_bytes();
    let number = |from: usize, len: usize| -> Result<i64, String> {
        let digits = bytes.get(from..from + len).ok_or(form)?;
        if !digits.iter().all(u8::is_ascii_digit) {
            return Err(form.into());
        }
        Ok(digits.iter().fold(0, |n, d| n * 10 + i64::from(d - b'0')))
    };
    let separator = |at: usize, allowed: &[u8]| match bytes.get(at) {
        Some(b) if allowed.contains(b) => Ok(()),
        _ => Err(form.to_owned()),
    };
    let year = number(0, 4)?;
    separator(4, b"-")?;
    let month = number(5, 2)?;
    separator(7, b"-")?;
    let day = number(8, 2)?;
    separator(10, b" T")?;
    let hour = number(11, 2)?;
    separator(13, b":")?;
    let minute = number(14, 2)?;
    separator(16, b":")?;
    let second = number(17, 2)?;
    let mut rest = &text[19..];
    let mut nanos = 0;
    if let Some(fraction) = rest.strip_prefix('.') {
        let digits = fraction.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 || digits > 9 {
            return Err("the fraction of a second needs 1 to 9 digits".into());
        }
        nanos = fraction[..digits].bytes().fold(0, |n, d| n * 10 + i64::from(d - b'0'))
            * 10_i64.pow(9 - digits as u32);
        rest = &fraction[digits..];
    }
    let offset_minutes = parse_offset(rest).ok_or(form)?;
    if !(1..=12).contains(&month) {
        return Err(format!("month {month} does not exist"));
    }
    if !(1..=days_in_month(year, month)).contains(&day) {
        return Err(format!("day {day} of month {month} does not exist in {year}"));
    }
    if hour > 23 || minute > 59 || second > 59 {
        return Err(format!("time {hour:02}:{minute:02}:{second:02} does not exist"));
    }
    let seconds =
        days_since_epoch(year, month, day) * 86_400 + hour * 3_600 + (minute - offset_minutes) * 60 + second;
    let nanos = i128::from(seconds) * 1_000_000_000 + i128::from(nanos);
    Ok((nanos + 500).div_euclid(1_000) as i64)
}

/// A UTC offset in minutes: empty (UTC), `Z`, `±HH` or `±HH:MM`.
fn parse_offset(text: &str) -> Option<i64> {
    let sign = match text.as_bytes().first() {
        None => return Some(0),
        Some(b'Z') if text.len() == 1 => return Some(0),
        Some(b'+') => 1,
        Some(b'-') => -1,
        Some(_) => return None,
    };
    let (hours, minutes) = text[1..].split_once(':').unwrap_or((&text[1..], "00"));
    if hours.len() != 2 || minutes.len() != 2 {
        return None;
    }
    let (hours, minutes) = (hours.parse::<i64>().ok()?, minutes.parse::<i64>().ok()?);
    (hours <= 23 && minutes <= 59).then_some(sign * (hours * 60 + minutes))
}

/// Days in `month` (1–12) of `year` in the proleptic Gregorian calendar.
fn days_in_month(year: i64, month: i64) -> i64 {
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days from 1970-01-01 to the given date: whole 400-year cycles of 146,097 days from a year
/// that starts in March (so the leap day ends the year), then years, then days.
fn days_since_epoch(year: i64, month: i64, day: i64) -> i64 {
    let march_year = if month <= 2 { year - 1 } else { year };
    let cycle = march_year.div_euclid(400);
    let year_of_cycle = march_year - cycle * 400;
    let month_from_march = (month + 9) % 12;
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1;
    let day_of_cycle = year_of_cycle * 365 + year_of_cycle / 4 - year_of_cycle / 100 + day_of_year;
    // 719,468 days separate 0000-03-01 from 1970-01-01.
    cycle * 146_097 + day_of_cycle - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_count_days_from_1970_across_leap_years() {
        assert_eq!(days_since_epoch(1970, 1, 1), 0);
        assert_eq!(days_since_epoch(1969, 12, 31), -1);
        assert_eq!(days_since_epoch(2000, 2, 29), 11_016);
        assert_eq!(days_since_epoch(2023, 11, 16), 19_677);
        assert_eq!(days_in_month(1900, 2), 28);
        assert_eq!(days_in_month(2024, 2), 29);
    }

    #[test]
    fn timestamps_read_to_the_nearest_microsecond_with_their_offset() {
        let base = 19_677 * 86_400_000_000_i64 + (18 * 3_600 + 15 * 60 + 46) * 1_000_000;
        assert_eq!(parse_date_time("2023-11-16 18:15:46.6805900"), Ok(base + 680_590));
        assert_eq!(parse_date_time("2023-11-16T18:15:46.0000004"), Ok(base));
        assert_eq!(parse_date_time("2023-11-16 18:15:46.0000005"), Ok(base + 1));
        assert_eq!(parse_date_time("2023-11-16 18:15:46"), Ok(base));
        assert_eq!(parse_date_time("2023-11-16 19:15:46+01:00"), Ok(base));
        assert_eq!(parse_date_time("2023-11-16 17:15:46-01Z").ok(), None);
        assert_eq!(parse_date_time("2023-11-16 17:15:46-01"), Ok(base));
        assert_eq!(parse_date_time("2023-11-16 18:15:46Z"), Ok(base));
        assert_eq!(parse_stamp("12.5"), Ok(Stamp::Seconds(12_500_000)));
        for bad in ["2023-02-29 00:00:00", "2023-11-16 24:00:00", "2023-11-16", "16/11/2023 18:15:46", "nan"]
        {
            assert!(parse_stamp(bad).is_err(), "{bad}");
        }
    }
}
