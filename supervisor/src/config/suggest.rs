//! "Did you mean" for a misspelt key, value or behaviour name: the one candidate within a small edit
//! distance.

/// The candidate closest to `word` when it is a likely misspelling of it (at most one edit in four
/// characters, at least one), `None` when there is none or two are equally close.
pub(super) fn near_miss<'c>(word: &str, candidates: impl IntoIterator<Item = &'c str>) -> Option<&'c str> {
    let limit = (word.chars().count() / 4).max(1);
    let mut best: Option<(usize, &str)> = None;
    let mut tied = false;
    for c in candidates {
        let d = distance(word, c);
        match best {
            _ if d > limit || d == 0 => {}
            Some((b, _)) if d > b => {}
            Some((b, _)) if d == b => tied = true,
            _ => {
                best = Some((d, c));
                tied = false;
            }
        }
    }
    best.filter(|_| !tied).map(|(_, c)| c)
}

/// `" (did you mean \"x\"?)"` for the near miss among `candidates`, or nothing.
pub(super) fn did_you_mean<'c>(word: &str, candidates: impl IntoIterator<Item = &'c str>) -> String {
    near_miss(word, candidates).map(|c| format!("did you mean \"{c}\"? ")).unwrap_or_default()
}

/// Levenshtein distance, in characters (a swap of two neighbours counts one).
fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    // rows[k][j]: distance of a[..i-k] to b[..j]
    let mut rows = [vec![0; b.len() + 1], vec![0; b.len() + 1], (0..=b.len()).collect::<Vec<_>>()];
    for i in 1..=a.len() {
        rows.rotate_left(1);
        rows[2][0] = i;
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut d = (rows[1][j] + 1).min(rows[2][j - 1] + 1).min(rows[1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d = d.min(rows[0][j - 2] + 1);
            }
            rows[2][j] = d;
        }
    }
    rows[2][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_close_name_is_suggested_and_a_far_one_is_not() {
        let names = ["echo", "counter", "kv", "test", "token_bucket"];
        assert_eq!(near_miss("countr", names), Some("counter"));
        assert_eq!(near_miss("conuter", names), Some("counter"), "a swap is one edit");
        assert_eq!(near_miss("token_bukcet", names), Some("token_bucket"));
        assert_eq!(near_miss("moving_average", names), None);
        assert_eq!(near_miss("counter", names), None, "not a misspelling");
        assert_eq!(near_miss("kx", ["kv", "ky"]), None, "two equally close");
        assert_eq!(distance("", "abc"), 3);
        assert_eq!(did_you_mean("restrat", ["restart", "shutdown"]), "did you mean \"restart\"? ");
    }
}
