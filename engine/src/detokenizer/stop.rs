//! OpenAI `stop` strings over a stream of text deltas.
//!
//! A stop string can arrive split over any number of deltas, so the matcher holds back the
//! longest tail of the text that is still the beginning of some stop string, and releases it as
//! soon as it cannot be. When a stop string completes, everything before it is released and the
//! stop string and all later text are dropped (OpenAI does not return the stop sequence).

/// What one `push` lets through.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StopStep {
    /// Text safe to send to the client now.
    pub emit: String,
    /// A stop string completed: the request is finished, `emit` is the last text.
    pub stopped: bool,
}

#[derive(Debug, Clone)]
pub struct StopMatcher {
    /// Non-empty, no repeats.
    stops: Vec<String>,
    /// Text received but not emitted: a possible start of a stop string.
    held: String,
    /// Index into `stops` of the stop string that matched.
    matched: Option<usize>,
}

impl StopMatcher {
    /// Empty strings are ignored (they would match everywhere); repeats are kept once.
    pub fn new(stops: Vec<String>) -> StopMatcher {
        let mut unique: Vec<String> = Vec::with_capacity(stops.len());
        for stop in stops {
            if !stop.is_empty() && !unique.contains(&stop) {
                unique.push(stop);
            }
        }
        StopMatcher {
            stops: unique,
            held: String::new(),
            matched: None,
        }
    }

    /// Feeds the next piece of text. After a stop, further pushes emit nothing.
    pub fn push(&mut self, delta: &str) -> StopStep {
        if self.matched.is_some() {
            return StopStep {
                emit: String::new(),
                stopped: true,
            };
        }
        if self.stops.is_empty() {
            return StopStep {
                emit: delta.to_string(),
                stopped: false,
            };
        }
        self.held.push_str(delta);

        // The earliest match wins; every match must overlap the new text or the held tail, since
        // text emitted before could not begin a stop string.
        let first = self
            .stops
            .iter()
            .enumerate()
            .filter_map(|(i, stop)| self.held.find(stop.as_str()).map(|at| (at, i)))
            .min();
        if let Some((at, i)) = first {
            self.matched = Some(i);
            let mut emit = std::mem::take(&mut self.held);
            emit.truncate(at);
            return StopStep {
                emit,
                stopped: true,
            };
        }

        let keep = self.partial_match_start();
        let emit = self.held[..keep].to_string();
        self.held.replace_range(..keep, "");
        StopStep {
            emit,
            stopped: false,
        }
    }

    /// Byte offset in `held` where the longest suffix that begins some stop string starts
    /// (`held.len()` when no suffix does).
    fn partial_match_start(&self) -> usize {
        let longest = self.stops.iter().map(String::len).max().unwrap_or(0);
        // A held-back suffix is a proper prefix of a stop string, so shorter than the longest.
        let earliest = self.held.len().saturating_sub(longest.saturating_sub(1));
        (earliest..self.held.len())
            .filter(|&at| self.held.is_char_boundary(at))
            .find(|&at| {
                let tail = &self.held[at..];
                self.stops.iter().any(|stop| stop.starts_with(tail))
            })
            .unwrap_or(self.held.len())
    }

    /// The stream ended without a stop: returns the held-back text (empty after a stop).
    pub fn flush(&mut self) -> String {
        if self.matched.is_some() {
            self.held.clear();
            return String::new();
        }
        std::mem::take(&mut self.held)
    }

    /// The stop string that ended the stream, if one did (vLLM reports it as `stop_reason`).
    pub fn matched(&self) -> Option<&str> {
        self.matched.map(|i| self.stops[i].as_str())
    }

    /// Text currently held back as a possible start of a stop string.
    pub fn held_back(&self) -> &str {
        &self.held
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matcher(stops: &[&str]) -> StopMatcher {
        StopMatcher::new(stops.iter().map(|s| s.to_string()).collect())
    }

    fn step(emit: &str, stopped: bool) -> StopStep {
        StopStep {
            emit: emit.to_string(),
            stopped,
        }
    }

    #[test]
    fn stop_inside_one_delta_cuts_it_and_everything_after() {
        let mut m = matcher(&["STOP"]);
        assert_eq!(m.push("hello STOP world"), step("hello ", true));
        assert_eq!(m.push("more"), step("", true));
        assert_eq!(m.flush(), "");
        assert_eq!(m.matched(), Some("STOP"));
    }

    #[test]
    fn stop_split_over_deltas_is_found_and_never_emitted() {
        let mut m = matcher(&["STOP"]);
        assert_eq!(m.push("hello S"), step("hello ", false));
        assert_eq!(m.held_back(), "S");
        assert_eq!(m.push("T"), step("", false));
        assert_eq!(m.push("O"), step("", false));
        assert_eq!(m.held_back(), "STO");
        assert_eq!(m.push("P and after"), step("", true));
    }

    #[test]
    fn held_back_text_is_released_when_it_stops_matching() {
        let mut m = matcher(&["STOP"]);
        assert_eq!(m.push("a ST"), step("a ", false));
        assert_eq!(m.push("AR"), step("STAR", false));
        // A false start that contains a real start: "SSTOP".
        assert_eq!(m.push(" SS"), step(" S", false));
        assert_eq!(m.push("TOP"), step("", true));
    }

    #[test]
    fn flush_returns_what_was_held_back() {
        let mut m = matcher(&["</answer>"]);
        assert_eq!(m.push("done </ans"), step("done ", false));
        assert_eq!(m.flush(), "</ans");
        assert_eq!(m.matched(), None);
    }

    #[test]
    fn earliest_of_several_stops_wins() {
        let mut m = matcher(&["world", "lo w", "xyz"]);
        assert_eq!(m.push("hello world"), step("hel", true));
        assert_eq!(m.matched(), Some("lo w"));
        // A stop that is a prefix of another completes first.
        let mut m = matcher(&["abc", "ab"]);
        assert_eq!(m.push("xa"), step("x", false));
        assert_eq!(m.push("b"), step("", true));
        assert_eq!(m.matched(), Some("ab"));
    }

    #[test]
    fn multibyte_stops_hold_back_on_character_boundaries() {
        let mut m = matcher(&["東京駅"]);
        assert_eq!(m.push("行き先は東"), step("行き先は", false));
        assert_eq!(m.push("京"), step("", false));
        assert_eq!(m.push("都"), step("東京都", false));
        assert_eq!(m.push("東京駅です"), step("", true));
    }

    #[test]
    fn no_stops_or_empty_stops_pass_everything_through() {
        let mut m = matcher(&[]);
        assert_eq!(m.push("anything"), step("anything", false));
        let mut m = matcher(&["", ""]);
        assert_eq!(m.push("anything"), step("anything", false));
        assert_eq!(m.flush(), "");
    }

    /// Property: however the text is cut into deltas, the output is the text before the first
    /// stop string (found by a plain search of the whole text), and nothing after it.
    #[test]
    fn any_split_gives_the_text_before_the_first_stop() {
        let stops = ["ab", "bca", "cccc", "日本", "a\n"];
        let alphabet: Vec<char> = "abc 日本\n".chars().collect();
        let mut state: u64 = 0x2545_F491_4F6C_DD1D;
        let mut next = move |n: usize| {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            (state.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 33) as usize % n
        };
        for _ in 0..3000 {
            let text: String = (0..1 + next(30))
                .map(|_| alphabet[next(alphabet.len())])
                .collect();
            let chosen: Vec<&str> = stops.iter().copied().filter(|_| next(2) == 0).collect();
            let first = chosen.iter().filter_map(|s| text.find(s)).min();
            let expected = &text[..first.unwrap_or(text.len())];

            let mut m = StopMatcher::new(chosen.iter().map(|s| s.to_string()).collect());
            let mut out = String::new();
            let mut stopped = false;
            let chars: Vec<char> = text.chars().collect();
            let mut i = 0;
            while i < chars.len() && !stopped {
                let n = 1 + next(4).min(chars.len() - i - 1);
                let delta: String = chars[i..i + n].iter().collect();
                i += n;
                let s = m.push(&delta);
                out.push_str(&s.emit);
                stopped = s.stopped;
                assert!(
                    expected.starts_with(&out),
                    "{text:?} {chosen:?}: emitted {out:?}"
                );
            }
            if !stopped {
                out.push_str(&m.flush());
            }
            assert_eq!(stopped, first.is_some(), "{text:?} {chosen:?}");
            assert_eq!(out, expected, "{text:?} {chosen:?}");
        }
    }
}
