//! C/Python `strftime` for the `strftime_now(format)` function transformers gives chat templates
//! (Llama 3's template prints today's date with it). No date library: a Unix time is split into
//! civil fields with Howard Hinnant's algorithm.

use std::fmt::Write as _;

const WEEKDAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];
const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

/// A UTC calendar time broken into fields.
#[derive(Debug, Clone, Copy)]
struct Civil {
    year: i64,
    month: u32,   // 1..=12
    day: u32,     // 1..=31
    weekday: u32, // 0 = Monday
    yday: u32,    // 1..=366
    hour: u32,
    minute: u32,
    second: u32,
    micros: u32,
}

impl Civil {
    fn from_unix(secs: i64, micros: u32) -> Civil {
        let days = secs.div_euclid(86_400);
        let rem = secs.rem_euclid(86_400) as u32;
        // Howard Hinnant's days-to-civil.
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        let year = yoe + era * 400 + i64::from(month <= 2);
        let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
        const BEFORE: [u32; 12] = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
        let yday = BEFORE[(month - 1) as usize] + day + u32::from(leap && month > 2);
        // 1970-01-01 was a Thursday (3 with Monday = 0).
        let weekday = (days + 3).rem_euclid(7) as u32;
        Civil {
            year,
            month,
            day,
            weekday,
            yday,
            hour: rem / 3600,
            minute: rem / 60 % 60,
            second: rem % 60,
            micros,
        }
    }
}

/// C/Python `strftime` over a UTC time (a naive `datetime`, so `%Z` and `%z` are empty), in
/// the C locale. Knows the codes of C89 plus the common glibc ones and the `-` (no padding)
/// flag; an unknown code is copied through, as glibc does.
pub(super) fn strftime(secs: i64, micros: u32, format: &str) -> String {
    let t = Civil::from_unix(secs, micros);
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut code = chars.next();
        let unpadded = code == Some('-');
        if unpadded {
            code = chars.next();
        }
        let num = |out: &mut String, n: i64, width: usize| {
            if unpadded {
                let _ = write!(out, "{n}");
            } else {
                let _ = write!(out, "{n:0width$}");
            }
        };
        let hour12 = match t.hour % 12 {
            0 => 12,
            h => h,
        };
        match code {
            None => out.push('%'),
            Some('%') => out.push('%'),
            Some('a') => out.push_str(&WEEKDAYS[t.weekday as usize][..3]),
            Some('A') => out.push_str(WEEKDAYS[t.weekday as usize]),
            Some('b') | Some('h') => out.push_str(&MONTHS[(t.month - 1) as usize][..3]),
            Some('B') => out.push_str(MONTHS[(t.month - 1) as usize]),
            Some('c') => out.push_str(&strftime(secs, micros, "%a %b %e %H:%M:%S %Y")),
            Some('x') => out.push_str(&strftime(secs, micros, "%m/%d/%y")),
            Some('X') | Some('T') => out.push_str(&strftime(secs, micros, "%H:%M:%S")),
            Some('D') => out.push_str(&strftime(secs, micros, "%m/%d/%y")),
            Some('F') => out.push_str(&strftime(secs, micros, "%Y-%m-%d")),
            Some('R') => out.push_str(&strftime(secs, micros, "%H:%M")),
            Some('d') => num(&mut out, t.day.into(), 2),
            Some('e') => {
                let _ = write!(out, "{:2}", t.day);
            }
            Some('f') => num(&mut out, t.micros.into(), 6),
            Some('H') => num(&mut out, t.hour.into(), 2),
            Some('I') => num(&mut out, hour12.into(), 2),
            Some('j') => num(&mut out, t.yday.into(), 3),
            Some('m') => num(&mut out, t.month.into(), 2),
            Some('M') => num(&mut out, t.minute.into(), 2),
            Some('S') => num(&mut out, t.second.into(), 2),
            Some('p') => out.push_str(if t.hour < 12 { "AM" } else { "PM" }),
            Some('u') => num(&mut out, (t.weekday + 1).into(), 1),
            Some('w') => num(&mut out, ((t.weekday + 1) % 7).into(), 1),
            Some('y') => num(&mut out, t.year.rem_euclid(100), 2),
            Some('Y') => {
                let _ = write!(out, "{}", t.year);
            }
            Some('Z') | Some('z') => {}
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some(other) => {
                out.push('%');
                if unpadded {
                    out.push('-');
                }
                out.push(other);
            }
        }
    }
    out
}

/// `strftime_now(format)`: the current time, in UTC (transformers uses the local time, which
/// is UTC in the containers we ship).
pub(super) fn strftime_now(format: &str) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = i64::try_from(now.as_secs()).unwrap_or(i64::MAX);
    strftime(secs, now.subsec_micros(), format)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Python's outputs for fixed times, recorded by tests/fixtures/make_chat_cases.py.
    #[test]
    fn strftime_matches_python() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/chat_template/strftime.json"
        );
        let text = std::fs::read_to_string(path).expect("fixture strftime.json");
        let cases: serde_json::Value = serde_json::from_str(&text).expect("strftime.json is JSON");
        let cases = cases.as_array().expect("a list of cases");
        assert!(cases.len() > 20);
        for case in cases {
            let secs = case["secs"].as_i64().expect("secs");
            let micros = case["micros"].as_u64().expect("micros") as u32;
            let format = case["format"].as_str().expect("format");
            let expected = case["text"].as_str().expect("text");
            assert_eq!(
                strftime(secs, micros, format),
                expected,
                "{format:?} at {secs}"
            );
        }
    }
}
